"""Controller-mode commands, RocketMQ 5's mqadmin names: getControllerMetaData, getSyncStateSet, electMaster,
getBrokerEpoch; and ``controller_view``, the controller's picture of broker groups that clusterList and haStatus add
to their reports in controller mode.

``-a`` is the controller list (``host:port;host:port``); it defaults to the nameservers of ``-n``, where the
controller runs when it is embedded (``enableControllerInNamesrv``). Requests go to the active instance (a standby
names it; ``controller.client`` follows). electMaster asks CONTROLLER_ELECT_MASTER with ``designateElect=true``: the
controller elects the named broker only if it is an alive member of the SyncStateSet (every member acked every
SEND_OK, so nothing acknowledged is lost), and refuses otherwise with the members it could elect. It then waits
until the nameserver routes to the new master, so that the command's success means writes go there.

getBrokerEpoch asks every broker of the group (GET_BROKER_EPOCH_CACHE, 1007) with ``anyRole=true``, which lets a
slave answer its own history too (without it only a master answers: a slave computing its truncation point must
not take another slave's history for its master's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ctl.errors import CtlError
from ctl.options import DEFAULT_NAMESRV, ClusterOpt, JsonOpt, NamesrvOpt
from ctl.output import Column, Output, format_table

if TYPE_CHECKING:
    from ctl.rpc import Cluster

app = typer.Typer()

ControllerAddrOpt = Annotated[
    str | None,
    typer.Option("-a", "--controllerAddress", envvar="CONTROLLER_ADDR",
                 help="Controller list, host:port;host:port (default: the nameservers of -n, for an embedded "
                      "controller)."),
]
BrokerNameOpt = Annotated[str, typer.Option("-b", "--brokerName", help="Broker name (a group), e.g. broker-a.")]
ELECT_WAIT_S = 30.0

REPLICA_COLUMNS = [
    Column("BrokerId", "brokerId"),
    Column("Addr", "brokerAddress"),
    Column("Role", "role"),
    Column("InSyncStateSet", "inSyncStateSet"),
    Column("Alive", "alive"),
]
EPOCH_COLUMNS = [Column("Epoch", "epoch"), Column("StartOffset", "startOffset"), Column("EndOffset", "endOffset")]


class ControllerRefused(CtlError):
    """The controller said no; the text says what to do."""


def split_addrs(text: str) -> list[str]:
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


def refusal(what: str, code: int, remark: str, addrs: list[str]) -> ControllerRefused:
    """A controller answer in an operator's words, ending with what to do."""
    from remoting.codes import ResponseCode as RC
    from remoting.codes import describe

    where = ";".join(addrs)
    if code == RC.REQUEST_CODE_NOT_SUPPORTED:
        return ControllerRefused(f"{where} runs no controller ({what} is not supported there)",
                                 hint="pass -a with the controller's address, or start the nameserver with "
                                      "enableControllerInNamesrv=true")
    if code == RC.CONTROLLER_NOT_LEADER:
        if "etcd" in remark:
            hint = ("etcd lost its majority or does not answer: restart etcd members until a majority runs; brokers "
                    "keep their roles meanwhile")
        else:
            hint = "retry in a second, or pass -a with every controller so the active one is found"
        return ControllerRefused(f"controller {where} refused {what}: {remark}", hint=hint)
    if code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST:
        return ControllerRefused(f"controller refused {what}: {remark}",
                                 hint="check the broker name with `mqctl clusterList` (controller-mode groups only)")
    if code == RC.CONTROLLER_JRAFT_INTERNAL_ERROR:
        return ControllerRefused(f"controller refused {what}: {remark}", hint="check etcd, then retry")
    text = f"controller refused {what}: {describe(code)}"
    return ControllerRefused(f"{text}: {remark}" if remark else text)


@dataclass
class GroupView:
    """One broker group as the controller holds it (GET_SYNC_STATE_DATA)."""

    broker_name: str
    master_broker_id: int | None
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    replicas: list[dict[str, Any]] = field(default_factory=list)  # brokerId, brokerAddress, alive, inSyncStateSet

    @property
    def sync_state_set(self) -> list[int]:
        return sorted(r["brokerId"] for r in self.replicas if r["inSyncStateSet"])

    def id_of(self, address: str) -> int | None:
        return next((r["brokerId"] for r in self.replicas if r["brokerAddress"] == address), None)

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "masterBrokerId": self.master_broker_id,
                "masterAddress": self.master_address, "masterEpoch": self.master_epoch,
                "syncStateSet": self.sync_state_set, "syncStateSetEpoch": self.sync_state_set_epoch,
                "replicas": self.replicas}


@dataclass
class ControllerView:
    addrs: list[str]
    metadata: dict[str, str]
    groups: dict[str, GroupView]

    @property
    def active(self) -> str:
        leader = self.metadata.get("controllerLeaderAddress") or "none"
        ident = self.metadata.get("controllerLeaderId")
        return f"{leader} ({ident})" if ident else leader


def parse_sync_state_data(body: bytes) -> dict[str, GroupView]:
    import orjson

    try:
        table = orjson.loads(body or b"{}").get("replicasInfoTable", {})
        out = {}
        for name, g in table.items():
            replicas = [{"brokerId": int(r["brokerId"]), "brokerAddress": str(r["brokerAddress"]),
                         "alive": bool(r.get("alive")), "inSyncStateSet": in_set}
                        for key, in_set in (("inSyncReplicas", True), ("notInSyncReplicas", False))
                        for r in g.get(key, [])]
            master = g.get("masterBrokerId")
            out[name] = GroupView(name, int(master) if master is not None else None, str(g.get("masterAddress") or ""),
                                  int(g.get("masterEpoch") or 0), int(g.get("syncStateSetEpoch") or 0),
                                  sorted(replicas, key=lambda r: r["brokerId"]))
        return out
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CtlError(f"the controller's GET_SYNC_STATE_DATA answer does not parse: {exc}") from None


def controller_client(addrs: list[str], timeout_s: float = 3.0):
    """A ControllerClient connecting as this mqctl run does: its TLS and its ACL 2.0 credentials (a controller with
    authentication on, embedded in a nameserver or not, answers only signed requests of a Super user)."""
    from controller.client import ControllerClient
    from ctl.rpc import env_credentials, tls
    from remoting.acl_signature import signer
    from remoting.client import RemotingClient

    remoting = RemotingClient(name="mqctl-controller", ssl=tls())
    credentials = env_credentials()
    if credentials is not None:
        remoting.signer = signer(*credentials)
    return ControllerClient(addrs, client=remoting, timeout_s=timeout_s, owns_client=True)


async def fetch_view(addrs: list[str], names: list[str], timeout_s: float = 5.0) -> ControllerView:
    """The active controller's view of ``names`` and the metadata of the instance that answered."""
    import orjson

    from remoting.codes import RequestCode, ResponseCode

    client = controller_client(addrs, timeout_s=timeout_s)
    try:
        resp = await client.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=orjson.dumps(sorted(names)))
        if resp.code != ResponseCode.SUCCESS:
            raise refusal("GET_SYNC_STATE_DATA", resp.code, resp.remark or "", addrs)
        groups = parse_sync_state_data(resp.body_bytes())
        metadata = await client.metadata(client.active or addrs[0])
    finally:
        await client.close()
    return ControllerView(addrs, metadata, groups)


def group_roles(addrs: list[str], broker_name: str) -> tuple[str | None, list[str]]:
    """(the master's address, the other members' addresses) of a controller-mode group as the active controller
    records them: what ``mqctl kill master -b`` acts on in controller mode, dev processes and compose containers."""
    import asyncio

    view = asyncio.run(fetch_view(addrs, [broker_name]))
    group = view.groups.get(broker_name)
    if group is None:
        return None, []
    return group.master_address or None, [r["brokerAddress"] for r in group.replicas
                                          if r["brokerId"] != group.master_broker_id]


@dataclass(frozen=True)
class NoView:
    """The controller gave no view: ``reason`` says why (e.g. etcd lost its majority)."""

    reason: str


def controller_view(cluster: Cluster, controller_addrs: set[str], names: list[str]) -> ControllerView | NoView | None:
    """For clusterList and haStatus: the controller's view when the brokers named a controller (None when none
    did); ``NoView`` with the reason when the controller does not answer or refuses (the reports then say so instead
    of failing)."""
    from remoting.errors import RemotingError

    if not controller_addrs:
        return None
    addrs = sorted({a for text in controller_addrs for a in split_addrs(text)})
    try:
        return cluster.run(fetch_view(addrs, names, cluster.timeout_s))
    except (RemotingError, CtlError) as exc:
        return NoView(str(exc))


def controller_lines(view: ControllerView | NoView | None, names: list[str], wanted: bool) -> list[str]:
    """The footer clusterList and haStatus print in controller mode."""
    if not wanted:
        return []
    if not isinstance(view, ControllerView):
        why = f": {view.reason}" if isinstance(view, NoView) else ""
        return ["", f"#Controller  not answering{why} (see `mqctl getControllerMetaData -a <controllerAddr>`)"]
    lines = ["", f"#Controller  {';'.join(view.addrs)}  active: {view.active}"]
    for name in names:
        g = view.groups.get(name)
        if g is not None:
            lines.append(f"#{name}  masterBrokerId {g.master_broker_id if g.master_broker_id else '-'}  "
                         f"masterEpoch {g.master_epoch}  SyncStateSet {g.sync_state_set}  "
                         f"syncStateSetEpoch {g.sync_state_set_epoch}")
    return lines


def _controller_addrs(addr: str | None, namesrv: str) -> list[str]:
    addrs = split_addrs(addr or namesrv)
    if not addrs:
        raise typer.BadParameter("pass -a <controllerAddr>")
    return addrs


def _run(coro):
    """Run one command's calls; a connection the controller's port closed while this run speaks plaintext gets the
    hint the brokers' and nameservers' ports get (an enforcing TLS port closes plaintext)."""
    import asyncio

    from ctl.rpc import tls
    from remoting.errors import RemotingError

    try:
        return asyncio.run(coro)
    except RemotingError as exc:
        text = str(exc)
        if tls() is None and ("connection lost" in text or "closed by the peer" in text):
            raise RemotingError(exc.addr, exc.detail, hint="a port with tls.server.mode=enforcing closes plaintext: "
                                "connect with --tls (or MQCTL_TLS=true)") from None
        raise


# commands ----------------------------------------------------------------------------------------------------
@app.command("getControllerMetaData")
def get_controller_metadata(controller_addr: ControllerAddrOpt = None, namesrv: NamesrvOpt = DEFAULT_NAMESRV,
                            json: JsonOpt = False):
    """Each controller instance's view: its group (the etcd store), the active instance and whether it is it."""
    from remoting.errors import RemotingError

    addrs = _controller_addrs(controller_addr, namesrv)

    async def collect() -> list[dict[str, Any]]:
        client = controller_client(addrs)
        rows = []
        try:
            for addr in addrs:
                try:
                    meta = await client.metadata(addr)
                except RemotingError as exc:
                    rows.append({"controllerAddr": addr, "error": str(exc)})
                    continue
                rows.append({"controllerAddr": addr, "controllerGroup": meta.get("group", ""),
                             "controllerLeaderId": meta.get("controllerLeaderId") or "-",
                             "controllerLeaderAddress": meta.get("controllerLeaderAddress") or "-",
                             "isLeader": meta.get("isLeader") == "true", "peers": meta.get("peers", "")})
        finally:
            await client.close()
        return rows

    rows = _run(collect())
    if all("error" in r for r in rows):
        raise ControllerRefused(f"no controller answered at {';'.join(addrs)} ({rows[-1]['error']})",
                                hint="check -a, or that the nameserver runs with enableControllerInNamesrv=true")
    lines: list[str] = []
    for r in rows:
        if lines:
            lines.append("")
        if "error" in r:
            lines += [f"#ControllerAddr\t{r['controllerAddr']}", f"#Error\t{r['error']}"]
            continue
        lines += [f"#ControllerAddr\t{r['controllerAddr']}", f"#ControllerGroup\t{r['controllerGroup']}",
                  f"#ControllerLeaderId\t{r['controllerLeaderId']}",
                  f"#ControllerLeaderAddress\t{r['controllerLeaderAddress']}",
                  f"#IsLeader\t{'true' if r['isLeader'] else 'false'}"]
    if not any(r.get("controllerLeaderId", "-") != "-" for r in rows):
        lines.append("warning: no controller is active: etcd may have lost its majority (brokers keep their roles, "
                     "nothing is elected until it is back)")
    Output(json).show(rows, lines)


def _group_names(namesrv: str, broker_names: str | None, cluster_name: str | None) -> list[str]:
    if broker_names:
        return split_addrs(broker_names)
    if not cluster_name:
        raise typer.BadParameter("pass -b <brokerName> or -c <clusterName>")
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        return sorted({r.broker_name for r in cluster.brokers(cluster_name)})


def group_lines(g: GroupView) -> list[str]:
    rows = [{**r, "role": "MASTER" if r["brokerId"] == g.master_broker_id else "SLAVE"} for r in g.replicas]
    return [f"#brokerName\t{g.broker_name}",
            f"#MasterBrokerId\t{g.master_broker_id if g.master_broker_id else 'none'}",
            f"#MasterAddr\t{g.master_address or '-'}",
            f"#MasterEpoch\t{g.master_epoch}",
            f"#SyncStateSetEpoch\t{g.sync_state_set_epoch}",
            f"#SyncStateSet\t{g.sync_state_set}",
            f"#SyncStateSetNums\t{len(g.sync_state_set)}",
            *format_table(REPLICA_COLUMNS, rows)]


@app.command("getSyncStateSet")
def get_sync_state_set(
    controller_addr: ControllerAddrOpt = None,
    broker_names: Annotated[str | None, typer.Option("-b", "--brokerName",
                                                     help="Broker name(s), comma-separated.")] = None,
    cluster_name: ClusterOpt = None,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """A broker group's master, masterEpoch and SyncStateSet as the controller holds them (-b name, or -c cluster)."""
    names = _group_names(namesrv, broker_names, cluster_name)
    addrs = _controller_addrs(controller_addr, namesrv)
    view = _run(fetch_view(addrs, names))
    missing = [n for n in names if n not in view.groups]
    if missing:
        raise ControllerRefused(f"the controller knows no broker group {', '.join(missing)}"
                                + (f" (it knows {', '.join(sorted(view.groups))})" if view.groups else ""),
                                hint="check the name with `mqctl clusterList`; only controller-mode groups "
                                     "(enableControllerMode=true) are there")
    lines: list[str] = []
    for name in names:
        if lines:
            lines.append("")
        lines += group_lines(view.groups[name])
    Output(json).show([view.groups[n].to_json() for n in names], lines)


@app.command("electMaster")
def elect_master(
    broker_name: BrokerNameOpt,
    broker_id: Annotated[int, typer.Option("-i", "--brokerId", help="The controller brokerId to make master.")],
    controller_addr: ControllerAddrOpt = None,
    cluster_name: Annotated[str, typer.Option("-c", "--clusterName", help="The group's cluster.")] = "DefaultCluster",
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    wait: Annotated[bool, typer.Option("--wait/--no-wait",
                                       help="Wait until the nameserver routes to the new master.")] = True,
    json: JsonOpt = False,
):
    """A designated switchover: make SyncStateSet member -i master of -b (refused for any other broker)."""
    from remoting.codes import ResponseCode as RC

    addrs = _controller_addrs(controller_addr, namesrv)

    async def elect():
        client = controller_client(addrs)
        try:
            return await client.elect(cluster_name, broker_name, broker_id, designate=True)
        finally:
            await client.close()

    code, remark, state = _run(elect())
    out = Output(json)
    if code == RC.CONTROLLER_MASTER_STILL_EXIST and state is not None and state.master_broker_id == broker_id:
        out.progress(f"brokerId {broker_id} is already master of {broker_name}; nothing changed")
    elif code != RC.SUCCESS or state is None:
        raise refusal(f"electMaster of brokerId {broker_id} in {broker_name}", code, remark, addrs)
    data = {"clusterName": cluster_name, "brokerName": broker_name, "masterBrokerId": state.master_broker_id,
            "masterAddress": state.master_address, "masterEpoch": state.master_epoch,
            "syncStateSet": sorted(state.sync_state_set), "syncStateSetEpoch": state.sync_state_set_epoch,
            "routed": None}
    if wait and code == RC.SUCCESS:
        data["routed"] = _wait_routed(namesrv, broker_name, state.master_address)
    lines = [f"#ClusterName\t{cluster_name}", f"#BrokerName\t{broker_name}",
             f"#BrokerMasterId\t{state.master_broker_id}", f"#BrokerMasterAddr\t{state.master_address}",
             f"#MasterEpoch\t{state.master_epoch}", f"#SyncStateSetEpoch\t{state.sync_state_set_epoch}",
             f"#SyncStateSet\t{sorted(state.sync_state_set)}"]
    if data["routed"] is False:
        lines.append(f"warning: the nameserver did not route {broker_name} to {state.master_address} within "
                     f"{ELECT_WAIT_S:.0f}s; check `mqctl clusterList`")
    out.show(data, lines)


def _wait_routed(namesrv: str, broker_name: str, master_addr: str) -> bool:
    """True once the nameserver lists ``master_addr`` as brokerId 0 of the group (the new master registered)."""
    from ctl.errors import NamesrvUnreachable
    from ctl.rpc import Cluster

    deadline = time.monotonic() + ELECT_WAIT_S
    with Cluster(namesrv) as cluster:
        while time.monotonic() < deadline:
            try:
                cluster.refresh()
                data = cluster.cluster_info().broker_addr_table.get(broker_name)
                if data is not None and str(data.broker_addrs.get(0) or data.broker_addrs.get("0")) == master_addr:
                    return True
            except NamesrvUnreachable:
                pass
            time.sleep(0.2)
    return False


def parse_epoch_cache(body: bytes) -> dict[str, Any]:
    import orjson

    try:
        obj = orjson.loads(body or b"{}")
        return {"clusterName": str(obj.get("clusterName", "")), "brokerName": str(obj.get("brokerName", "")),
                "brokerId": int(obj.get("brokerId", 0)), "maxOffset": int(obj.get("maxOffset", 0)),
                "epochList": [{"epoch": int(e["epoch"]), "startOffset": int(e["startOffset"]),
                               "endOffset": int(e["endOffset"])} for e in obj.get("epochList", [])]}
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CtlError(f"a GET_BROKER_EPOCH_CACHE answer does not parse: {exc}") from None


@app.command("getBrokerEpoch")
def get_broker_epoch(
    broker_name: Annotated[str | None, typer.Option("-b", "--brokerName", help="Broker name (a group).")] = None,
    cluster_name: ClusterOpt = None,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Each broker's epoch history (masterEpoch, start and end offset) of a group (-b) or cluster (-c)."""
    from ctl.options import one_target
    from ctl.rpc import Cluster
    from remoting.codes import RequestCode, ResponseCode
    from remoting.frame_codec import RemotingCommand

    one_target(broker_name, cluster_name)
    reports: list[dict[str, Any]] = []
    with Cluster(namesrv) as cluster:
        if broker_name:
            group = cluster.broker_group(broker_name)
            refs = sorted((int(i), a) for i, a in group.broker_addrs.items())
        else:
            refs = [(r.broker_id, r.addr) for r in cluster.brokers(cluster_name)]
        for registered_id, addr in refs:
            from client.errors import BrokerError, NoAnswerError

            try:
                request = RemotingCommand(RequestCode.GET_BROKER_EPOCH_CACHE, ext={"anyRole": "true"})
                resp = cluster.run(cluster.client.remoting.invoke(addr, request, cluster.timeout_s,
                                                                  "GET_BROKER_EPOCH_CACHE"))
            except (NoAnswerError, BrokerError) as exc:
                reports.append({"brokerAddr": addr, "registeredId": registered_id, "error": str(exc)})
                continue
            if resp.code != ResponseCode.SUCCESS:
                reports.append({"brokerAddr": addr, "registeredId": registered_id,
                                "error": refusal("GET_BROKER_EPOCH_CACHE", resp.code, resp.remark or "",
                                                 [addr]).message})
                continue
            reports.append({"brokerAddr": addr, "registeredId": registered_id, **parse_epoch_cache(resp.body_bytes())})
    lines: list[str] = []
    for r in reports:
        if lines:
            lines.append("")
        if "error" in r:
            lines += [f"#brokerAddr\t{r['brokerAddr']}", f"#error\t{r['error']}"]
            continue
        lines += [f"#clusterName\t{r['clusterName']}", f"#brokerName\t{r['brokerName']}",
                  f"#brokerAddr\t{r['brokerAddr']}", f"#brokerId\t{r['brokerId']}", f"#maxOffset\t{r['maxOffset']}",
                  *format_table(EPOCH_COLUMNS, r["epochList"])]
    Output(json).show(reports, lines)
