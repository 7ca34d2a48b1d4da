"""Failure injection on the compose cluster through the Docker SDK (spec/operator-conventions.md §5.1).

Targets are compose services found by label on the project's containers
(``com.docker.compose.project=<project>``, ``com.docker.compose.service=<service>``). The target grammar:
``master -b broker-a`` (service ``broker-a``), ``slave -b broker-a`` (service ``broker-a-s``), ``namesrv``, or any
service name such as ``broker-b-s``. The project is ``--project``, else ``COMPOSE_PROJECT_NAME``, else the
``name:`` of the repository's docker-compose.yml, else the repository directory's name (compose's own rule);
when that project has no containers but exactly one compose project runs pyrmq images, that one (a clone under
another directory name, or an mqctl installed outside the checkout).

kill = SIGKILL (a crash); stop = SIGTERM then SIGKILL after 10 s; pause = cgroup freezer (sockets stay open,
peers see timeouts). ``partition A B`` first tries a symmetric ``ip route add blackhole <peer ip>/32`` inside
both containers, which cuts A from B only; containers without NET_ADMIN (the compose default) refuse that,
and then B is disconnected from every network it shares with A, which isolates B from everyone on those
networks. The disconnections are recorded in a state file so ``heal`` reconnects B with its service alias;
``heal`` also removes every blackhole route. Each command prints what it did, then clusterList. With ``--dir DIR``
kill/stop/start/restart/pause/unpause act on the ``mqctl dev`` cluster in DIR instead (``ctl.dev.dev_lifecycle``).

Controller mode (docker-compose.controller.yml): a broker container labelled ``pyrmq.brokerName`` belongs to that
group, whose roles the controller decides, so ``master -b broker-a`` is the container whose address (its
``BROKER_IP1``, or its address on the compose network) is the master's in the active controller's records, and
``slave -b broker-a`` the first running other member; the controllers are the label ``pyrmq.controllerAddr`` (the
nameservers running it, as the host reaches them), which also stands in for ``-n`` when neither ``-n`` nor
``NAMESRV_ADDR`` is given. ``start``/``unpause master -b broker-a`` in controller mode act on the member of
the group that is down/paused, whatever the controller now names master (it rejoins as a slave).
"""

from __future__ import annotations

import json as jsonlib
import os
import re
import time
from pathlib import Path
from typing import Annotated

import typer

from ctl.options import DEFAULT_NAMESRV, JsonOpt, NamesrvOpt
from ctl.output import Output, format_table

app = typer.Typer()

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
BROKER_NAME_LABEL = "pyrmq.brokerName"  # controller mode: the group of this broker container
CONTROLLER_LABEL = "pyrmq.controllerAddr"  # controller mode: the controllers, host:port;host:port as the host sees them
REPO_ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 10

TargetArg = Annotated[str, typer.Argument(
    help="master | slave | namesrv | a compose service name (broker-a-s) | with --dir, a dev process (broker-a-2).")]
BrokerNameOpt = Annotated[str | None, typer.Option("-b", "--brokerName", help="Broker name, for master/slave.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", envvar="COMPOSE_PROJECT_NAME", show_envvar=True, help="Compose project name."),
]
SettleOpt = Annotated[float, typer.Option("--settle", min=0.0, help="Seconds to wait before showing the cluster.")]


def default_project() -> str:
    compose = REPO_ROOT / "docker-compose.yml"
    if compose.exists():
        match = re.search(r"^name:\s*['\"]?([\w.-]+)", compose.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    return re.sub(r"[^a-z0-9_-]", "", REPO_ROOT.name.lower())


def state_file(project: str) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "mqctl" / f"partitions-{project}.json"


class Project:
    """The containers of one compose project, by service."""

    def __init__(self, name: str | None) -> None:
        import docker
        from docker.errors import DockerException

        from ctl.errors import DockerUnavailable, NoComposeProject

        self.name = name or default_project()
        try:
            self.client = docker.from_env()
            self.client.ping()
        except DockerException as exc:
            raise DockerUnavailable(str(exc).splitlines()[0][:200]) from None
        containers = self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.name}"})
        if not containers and name is None:
            guessed = self._only_pyrmq_project()
            if guessed:
                self.name = guessed
                containers = self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={guessed}"})
        if not containers:
            running = sorted({c.labels.get(PROJECT_LABEL) for c in self.client.containers.list(all=True)} - {None})
            raise NoComposeProject(self.name, running)
        self.services: dict[str, list] = {}
        for container in containers:
            self.services.setdefault(container.labels.get(SERVICE_LABEL, container.name), []).append(container)

    def _only_pyrmq_project(self) -> str | None:
        """The one compose project whose containers run pyrmq images, if there is exactly one."""
        projects = set()
        for container in self.client.containers.list(all=True, filters={"label": PROJECT_LABEL}):
            image = container.attrs.get("Config", {}).get("Image", "")
            if image.startswith("pyrmq-"):
                projects.add(container.labels[PROJECT_LABEL])
        return projects.pop() if len(projects) == 1 else None

    def controller_groups(self) -> dict[str, list[str]]:
        """Controller-mode broker groups: brokerName -> the services of its members (label pyrmq.brokerName)."""
        groups: dict[str, list[str]] = {}
        for service, containers in self.services.items():
            name = containers[0].labels.get(BROKER_NAME_LABEL)
            if name:
                groups.setdefault(name, []).append(service)
        return {name: sorted(services) for name, services in groups.items()}

    def controller_addrs(self) -> list[str]:
        from ctl.controller import split_addrs

        return sorted({a for cs in self.services.values() for c in cs
                       for a in split_addrs(c.labels.get(CONTROLLER_LABEL, ""))})

    def namesrv_addr(self, given: str) -> str:
        """``-n`` as given; in controller mode with neither ``-n`` nor NAMESRV_ADDR, the nameservers it labels."""
        if given == DEFAULT_NAMESRV and not os.environ.get("NAMESRV_ADDR") and self.controller_addrs():
            return ";".join(self.controller_addrs())
        return given

    def brokers(self) -> list[str]:
        groups = self.controller_groups()
        members = {s for services in groups.values() for s in services}
        classic = {s for s in self.services if s not in members
                   and (f"{s}-s" in self.services or (s.startswith("broker") and not s.endswith("-s")))}
        return sorted(classic | set(groups))

    def member_down(self, broker_name: str, action: str) -> str | None:
        """For ``start``/``unpause master|slave -b`` in controller mode: the group's member that is down (exited) or
        paused. By then the controller names another master, so the role would point at a running broker; the one
        that was killed or paused is what the operator means (it comes back as a slave)."""
        wanted = {"start": ("exited", "created", "dead"), "unpause": ("paused",)}.get(action)
        for service in self.controller_groups().get(broker_name, []) if wanted else []:
            if self.services[service][0].status in wanted:
                return service
        return None

    def member_by_role(self, target: str, broker_name: str) -> str:
        """The service of a controller-mode group's master (or first running slave), by the controller's word."""
        from ctl.controller import group_roles
        from ctl.errors import CtlError

        addrs = self.controller_addrs()
        if not addrs:
            raise CtlError(f"the containers of {broker_name} carry no {CONTROLLER_LABEL} label: no controller to ask "
                           "who is master", hint="name the container's service instead, e.g. broker-a-1")
        master, slaves = group_roles(addrs, broker_name)
        services = self.controller_groups()[broker_name]
        for addr in [master] if target == "master" else slaves:
            host = (addr or "").rpartition(":")[0]
            for service in services:
                container = self.services[service][0]
                if host and host in _addresses(container) and (target == "master" or container.status == "running"):
                    return service
        raise CtlError(f"{broker_name} has no {target} now (the controller names master {master or 'none'}, "
                       f"slaves {slaves or 'none'})",
                       hint=f"see `mqctl getSyncStateSet -b {broker_name} -a '{';'.join(addrs)}'`")

    def service(self, target: str, broker_name: str | None) -> str:
        from ctl.errors import UnknownName

        if target in ("master", "slave"):
            if not broker_name:
                raise typer.BadParameter(f"{target} needs -b <brokerName>, e.g. -b broker-a")
            if broker_name not in self.brokers():
                raise UnknownName(
                    "broker", broker_name, self.brokers(), hint=f"pass -b with a broker of compose project {self.name}"
                )
            if broker_name in self.controller_groups():
                service = self.member_by_role(target, broker_name)
            else:
                service = broker_name if target == "master" else f"{broker_name}-s"
        else:
            service = target
        if service not in self.services:
            raise UnknownName(
                "service",
                service,
                list(self.services),
                hint=f"pass master/slave -b <broker>, namesrv, or a service of project {self.name}",
            )
        return service

    def containers(self, service: str) -> list:
        return self.services[service]


def _show(project: Project, did: list[str], namesrv: str, settle_s: float, json: bool, extra: dict | None = None):
    from ctl.cluster import CLUSTER_COLUMNS, cluster_rows
    from ctl.errors import CtlError
    from ctl.rpc import Cluster

    if settle_s:
        time.sleep(settle_s)
    try:
        with Cluster(project.namesrv_addr(namesrv)) as cluster:
            rows = cluster_rows(cluster)
        state = format_table(CLUSTER_COLUMNS, rows)
    except CtlError as exc:
        rows, state = None, [f"cluster state unavailable: {exc}"]
    data = {"project": project.name, "did": did, "cluster": rows, **(extra or {})}
    Output(json).show(data, [*did, "", *state])


def _lifecycle(action: str):
    def command(
        target: TargetArg,
        broker_name: BrokerNameOpt = None,
        project: ProjectOpt = None,
        namesrv: NamesrvOpt = DEFAULT_NAMESRV,
        settle_s: SettleOpt = 1.0,
        json: JsonOpt = False,
        dev_dir: Annotated[Path | None, typer.Option(
            "--dir", help="Act on the mqctl dev cluster in DIR (local processes) instead of compose.")] = None,
    ):
        if dev_dir is not None:
            from ctl.dev import dev_lifecycle

            dev_lifecycle(action, dev_dir, target, broker_name, settle_s, json)
            return
        proj = Project(project)
        down = proj.member_down(broker_name, action) if target in ("master", "slave") and broker_name else None
        service = down or proj.service(target, broker_name)
        did = []
        for container in proj.containers(service):
            if action == "kill":
                container.kill()
            elif action == "stop":
                container.stop(timeout=STOP_TIMEOUT_S)
            elif action == "restart":
                container.restart(timeout=STOP_TIMEOUT_S)
            else:
                getattr(container, action)()
            did.append(f"{action} {service} (container {container.name}) done.")
        _show(proj, did, namesrv, settle_s, json)

    command.__doc__ = {
        "kill": "Crash a service: SIGKILL, no flush.",
        "stop": f"Stop a service: SIGTERM, then SIGKILL after {STOP_TIMEOUT_S} s.",
        "start": "Start a stopped or killed service.",
        "restart": "Restart a service (graceful stop, then start).",
        "pause": "Freeze a service (cgroup freezer): sockets stay open, nothing answers.",
        "unpause": "Thaw a paused service.",
    }[action]
    return command


for _action in ("kill", "stop", "start", "restart", "pause", "unpause"):
    app.command(_action)(_lifecycle(_action))


def _addresses(container) -> set[str]:
    """Every address a broker container is known by, stopped or not: its BROKER_IP1, its fixed and current IPs."""
    env = dict(e.split("=", 1) for e in container.attrs.get("Config", {}).get("Env") or [] if "=" in e)
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    fixed = {(net.get("IPAMConfig") or {}).get("IPv4Address") for net in networks.values()}
    current = {net.get("IPAddress") for net in networks.values()}
    return {a for a in {env.get("BROKER_IP1"), *fixed, *current} if a}


def _ips(container) -> dict[str, str]:
    container.reload()
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    return {name: net.get("IPAddress") for name, net in networks.items() if net.get("IPAddress")}


def _exec(container, argv: list[str]):
    """``container.exec_run`` as root; None when the engine refuses (container not running)."""
    from docker.errors import APIError

    try:
        return container.exec_run(argv, user="root")
    except APIError:
        return None


def _blackhole(container, ip: str) -> bool:
    """Drop traffic to ``ip`` inside ``container``; False without `ip` or without NET_ADMIN."""
    result = _exec(container, ["ip", "route", "add", "blackhole", f"{ip}/32"])
    return result is not None and result.exit_code == 0


@app.command("partition")
def partition(
    service_a: Annotated[str, typer.Argument(help="A compose service, e.g. broker-a.")],
    service_b: Annotated[str, typer.Argument(help="Another one, e.g. broker-a-s (cut off when routes fail).")],
    project: ProjectOpt = None,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    settle_s: SettleOpt = 1.0,
    json: JsonOpt = False,
):
    """Cut the network between two services (blackhole routes, else disconnect the second one)."""
    from ctl.errors import CtlError

    proj = Project(project)
    a = proj.containers(proj.service(service_a, None))[0]
    b = proj.containers(proj.service(service_b, None))[0]
    ips_a, ips_b = _ips(a), _ips(b)
    shared = sorted(set(ips_a) & set(ips_b))
    if not shared:
        raise CtlError(
            f"{service_a} and {service_b} share no network; they are partitioned already",
            hint=f"run `mqctl heal --project {proj.name}` to reconnect them",
        )
    did = []
    if all(_blackhole(a, ips_b[n]) for n in shared) and all(_blackhole(b, ips_a[n]) for n in shared):
        method = "blackhole"
        did.append(
            f"partition {service_a} <-> {service_b}: blackhole routes to each other's "
            f"{', '.join(ips_a[n] + '/' + ips_b[n] for n in shared)} added."
        )
    else:
        _remove_blackholes([a, b])
        method = "disconnect"
        path = state_file(proj.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        records = jsonlib.loads(path.read_text()) if path.exists() else []
        for network_name in shared:
            proj.client.networks.get(network_name).disconnect(b, force=True)
            records.append({"container": b.name, "service": service_b, "network": network_name})
            did.append(
                f"partition {service_a} <-> {service_b}: {service_b} disconnected from network "
                f"{network_name} (no NET_ADMIN for routes; it is cut off from every peer there)."
            )
        path.write_text(jsonlib.dumps(records))
    _show(proj, did, namesrv, settle_s, json, {"method": method})


def _remove_blackholes(containers) -> list[str]:
    removed = []
    for container in containers:
        result = _exec(container, ["ip", "route", "show", "type", "blackhole"])
        if result is None or result.exit_code != 0:  # stopped, or no `ip`: none of our routes can be there
            continue
        for line in result.output.decode(errors="replace").splitlines():
            route = line.split()
            if len(route) >= 2 and route[0] == "blackhole":
                _exec(container, ["ip", "route", "del", "blackhole", route[1]])
                removed.append(f"heal: blackhole route to {route[1]} removed in {container.name}.")
    return removed


@app.command("heal")
def heal(
    project: ProjectOpt = None,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    settle_s: SettleOpt = 1.0,
    json: JsonOpt = False,
):
    """Undo every partition of the project: remove blackhole routes, reconnect disconnected services."""
    proj = Project(project)
    running = [c for cs in proj.services.values() for c in cs if c.status == "running"]
    did = _remove_blackholes(running)
    path = state_file(proj.name)
    records = jsonlib.loads(path.read_text()) if path.exists() else []
    by_name = {c.name: (service, c) for service, cs in proj.services.items() for c in cs}
    for record in records:
        service, container = by_name.get(record["container"], (record["service"], None))
        if container is None or record["network"] in _ips(container):
            continue
        proj.client.networks.get(record["network"]).connect(container, aliases=[service])
        did.append(f"heal: {service} reconnected to network {record['network']}.")
    if path.exists():
        path.unlink()
    if not did:
        did.append(f"heal: nothing to undo in project {proj.name}.")
    _show(proj, did, namesrv, settle_s, json)
