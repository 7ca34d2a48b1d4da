"""Admin: what the broker is and how it runs (RocketMQ AdminBrokerProcessor; spec remoting.md §2.4).

- GET_BROKER_RUNTIME_INFO (28): KVTable ``{"table":{S:S}}``. Every key ``mqadmin clusterList`` and
  ``brokerStatus`` read (``brokerVersionDesc``, ``brokerVersion``, ``msgPutTotal{YesterdayMorning,TodayMorning,
  TodayNow}`` and the ``msgGetTotal`` ones, ``putTps``, ``getTransferedTps``, the thread-pool queue figures,
  ``pageCacheLockTimeMills``, ``earliestMessageTimeStamp``, ``commitLogDiskRatio``, ...), the store's own table,
  and pyrmq's: identity (``brokerRole``, ``brokerId``, ``brokerName``, ``brokerAddr``, ``haServerAddr``,
  ``masterAddr``, ``masterHaAddr``), ``bootTimestamp``, ``msgPutTotal`` / ``msgGetTotal`` since start, held pulls,
  and the HA figures (a master: ``haSlaveNum``, ``inSyncSlaveNums``; a slave: ``haMasterConnected``).
  ``putTps`` / ``getTransferedTps`` carry one figure, the rate over the last 10 s (RocketMQ gives three: 10 s, 1 min,
  10 min; its tools read the first). pyrmq has no send/pull thread pools, so their queue figures are 0. The
  "morning" totals are recorded at the first runtime-info request after each local midnight (RocketMQ records them
  at midnight); until the first midnight they are 0, as in RocketMQ.
- GET_BROKER_CONFIG (26): body Java properties text ``key=value\\n`` of every effective key (what
  ``--print-config`` prints); header ``version`` = the config's DataVersion JSON. The config never changes while
  the broker runs, so the version is counter 0 stamped with the boot time. A secret key (``haAuthSecret``,
  ``haAuthSecretFile``: ``common.conf.secret``) reads ``<set>`` when set, never its value or path, to any caller.
- UPDATE_BROKER_CONFIG (25): pyrmq's settings are fixed at start (reliability.md §7 case 26: an unauthenticated
  config change is refused). A body that changes nothing answers 0; one that would change a key answers 16
  NO_PERMISSION naming the keys: edit the config file and restart the broker. Unknown keys or a body that is not
  properties text answer 29 INVALID_PARAMETER (RocketMQ answers 1, which would tell a caller to retry).
- GET_BROKER_HA_STATUS (907, RocketMQ 5's number): JSON body ``broker/ha/status.py`` documents (HARuntimeInfo
  names plus pyrmq's). Without an HA service (unit tests) it carries the role and commitlog range only.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from broker.context import BrokerContext
from broker.ha.status import HAStatus, MasterLinkStatus
from common import conf
from common.errors import ConfigError
from remoting import fastjson
from remoting.codes import CURRENT_VERSION, RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to


@cache
def version_desc() -> str:
    """``brokerVersionDesc`` (mqadmin clusterList's #Version column)."""
    try:
        return f"pyrmq {metadata.version('pyrmq')}"
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "pyrmq (source)"


@dataclass(slots=True)
class MorningTotals:
    """Put/get totals at the last two local midnights (RocketMQ BrokerStats.record), recorded lazily."""

    day: int = -1  # local date ordinal of the last record; -1 before the first request
    put_yesterday: int = 0
    put_today: int = 0
    get_yesterday: int = 0
    get_today: int = 0

    def observe(self, now_s: float, put_total: int, get_total: int) -> None:
        day = datetime.date.fromtimestamp(now_s).toordinal()
        if self.day < 0:
            self.day = day  # the broker started today: no midnight has passed, the morning totals stay 0
        elif day != self.day:
            self.day = day
            self.put_yesterday, self.put_today = self.put_today, put_total
            self.get_yesterday, self.get_today = self.get_today, get_total


def ha_status(ctx: BrokerContext) -> HAStatus:
    master_ha_addr = ctx.master.ha
    if ctx.ha is not None:
        return ctx.ha.status(master_ha_addr)
    store = ctx.store
    client = None if ctx.settings.role.is_master else MasterLinkStatus(master_addr=master_ha_addr)
    return HAStatus(ctx.settings.role.name, store.max_phy_offset, store.min_phy_offset, client=client)


def runtime_table(ctx: BrokerContext, mornings: MorningTotals) -> dict[str, str]:
    now = time.time()
    put, get = ctx.stats.put, ctx.stats.get
    mornings.observe(now, put.total, get.total)
    store_info = ctx.store.runtime_info()
    table = {str(k): str(v) for k, v in store_info.items()}
    b = ctx.settings.broker
    table.update(
        {
            "brokerVersionDesc": version_desc(),
            "brokerVersion": str(CURRENT_VERSION),
            "brokerRole": ctx.settings.role.name,
            "brokerId": str(ctx.broker_id),
            "brokerName": ctx.broker_name,
            "brokerClusterName": b.broker_cluster_name,
            "brokerAddr": b.broker_addr,
            "haServerAddr": ctx.settings.ha_server_addr,
            "masterHaAddr": ctx.master.ha,
            "masterAddr": ctx.master.broker,
            "bootTimestamp": str(ctx.boot_timestamp_ms),
            "startAcceptSendRequestTimeStamp": str(ctx.boot_timestamp_ms),
            "runtime": f"{(int(now * 1000) - ctx.boot_timestamp_ms) // 1000}s",
            "putTps": f"{put.rate():.2f}",
            "getTransferedTps": f"{get.rate():.2f}",
            "msgPutTotal": str(put.total),
            "msgGetTotal": str(get.total),
            "msgPutTotalTodayNow": str(put.total),
            "msgGetTotalTodayNow": str(get.total),
            "msgPutTotalTodayMorning": str(mornings.put_today),
            "msgGetTotalTodayMorning": str(mornings.get_today),
            "msgPutTotalYesterdayMorning": str(mornings.put_yesterday),
            "msgGetTotalYesterdayMorning": str(mornings.get_yesterday),
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueCapacity": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueCapacity": "0",
            "queryThreadPoolQueueSize": "0",
            "queryThreadPoolQueueCapacity": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "heldPullRequests": str(ctx.hold.held),
            "brokerPermission": str(b.broker_permission),
        }
    )
    mode = ctx.settings.controller
    if mode.enable_controller_mode:  # pyrmq's own keys: clusterList asks this controller for the SyncStateSet
        table["controllerAddr"] = ";".join(mode.controller_addrs)
        table["masterEpoch"] = str(ctx.store.epochs.last_epoch)  # the epoch of the last entry this store holds
    table.setdefault("earliestMessageTimeStamp", "0")
    table.setdefault("commitLogDiskRatio", "0")
    ha = ha_status(ctx)
    if ha.client is None:
        table["haSlaveNum"] = str(sum(1 for s in ha.slaves if s.connected))
        table["inSyncSlaveNums"] = str(ha.in_sync_slave_nums)
    else:
        table["haMasterConnected"] = "true" if ha.client.connected else "false"
    return table


def runtime_info(ctx: BrokerContext, mornings: MorningTotals, conn, request: RemotingCommand) -> RemotingCommand:
    body = fastjson.dumps({"table": runtime_table(ctx, mornings)})
    return response_to(request, ResponseCode.SUCCESS, body=body)


def effective_config(ctx: BrokerContext) -> dict[str, str]:
    """Every key as ``conf.render`` shows it: secrets as ``conf.SECRET_MARKER``, so neither GET_BROKER_CONFIG nor
    UPDATE_BROKER_CONFIG's comparison (which would answer "unchanged" to a right guess) reveals one."""
    table = dict(conf.render(ctx.settings.broker))
    table.update(conf.render(ctx.settings.store))
    return table


def broker_config(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    text = "".join(f"{k}={v}\n" for k, v in effective_config(ctx).items())
    version = fastjson.dumps({"counter": 0, "stateVersion": 0, "timestamp": ctx.boot_timestamp_ms}).decode()
    return response_to(request, ResponseCode.SUCCESS, ext={"version": version}, body=text.encode("utf-8"))


def update_config(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    try:
        wanted = conf.parse_properties(request.body_bytes().decode("utf-8"), "UPDATE_BROKER_CONFIG body")
    except (ConfigError, UnicodeDecodeError) as exc:
        return response_to(
            request,
            ResponseCode.INVALID_PARAMETER,
            f"the body is not Java properties text ({exc}); send key=value lines",
        )
    current = effective_config(ctx)
    unknown = sorted(k for k in wanted if k not in current)
    if unknown:
        return response_to(
            request,
            ResponseCode.INVALID_PARAMETER,
            f"unknown config keys {', '.join(unknown)}; GET_BROKER_CONFIG lists the keys this broker has",
        )
    changed = sorted(k for k, (v, _line) in wanted.items() if current[k] != v.strip())
    if changed:
        return response_to(
            request,
            ResponseCode.NO_PERMISSION,
            f"pyrmq brokers do not change their configuration at runtime ({', '.join(changed)} would change);"
            " edit the broker's config file and restart it",
        )
    return response_to(request, ResponseCode.SUCCESS, "every key already has that value; nothing changed")


def ha_status_request(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    status = ha_status(ctx)
    remark = None if ctx.ha is not None else "no HA service is running on this broker"
    return response_to(request, ResponseCode.SUCCESS, remark, body=fastjson.dumps(status.to_json()))


def register(server, ctx: BrokerContext) -> None:
    mornings = MorningTotals()
    server.register(RequestCode.GET_BROKER_RUNTIME_INFO, lambda conn, req: runtime_info(ctx, mornings, conn, req))
    server.register(RequestCode.GET_BROKER_CONFIG, lambda conn, req: broker_config(ctx, conn, req))
    server.register(RequestCode.UPDATE_BROKER_CONFIG, lambda conn, req: update_config(ctx, conn, req))
    server.register(RequestCode.GET_BROKER_HA_STATUS, lambda conn, req: ha_status_request(ctx, conn, req))
