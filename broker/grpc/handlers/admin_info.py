"""Admin: what the broker is and how it runs (GetBrokerRuntimeInfo 28, GetBrokerConfig, GetHAStatus).

Runtime info is the store's own table plus the broker's identity and counters, keyed like RocketMQ's brokerStatus
so operators find familiar names. The config answer lists every effective key of both config classes (what
``--print-config`` prints). GetHAStatus answers role and commitlog range itself while no HA service is wired
(``server.ha is None``); once HA is wired, the HA service fills in the connection details.
"""

from __future__ import annotations

import time
from functools import cache
from importlib import metadata

from broker.context import BrokerContext
from common import conf
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2


@cache
def version_desc() -> str:
    """``brokerVersionDesc`` (mqadmin clusterList's #Version column)."""
    try:
        return f"pyrmq {metadata.version('pyrmq')}"
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "pyrmq (source)"


async def runtime_info(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.KeyValueTable:
    table = {str(k): str(v) for k, v in ctx.store.runtime_info().items()}
    now_ms = int(time.time() * 1000)
    server = ctx.server
    table.update(
        {
            "brokerVersionDesc": version_desc(),
            "brokerRole": ctx.settings.role.name,
            "brokerId": str(ctx.broker_id),
            "brokerName": ctx.broker_name,
            "brokerClusterName": ctx.settings.broker.broker_cluster_name,
            "brokerAddr": ctx.settings.broker.broker_addr,
            "haServerAddr": ctx.settings.ha_server_addr,
            "masterHaAddr": getattr(server, "master_ha_addr", "") or "",
            "masterAddr": getattr(server, "master_addr", "") or "",
            "bootTimestamp": str(ctx.boot_timestamp_ms),
            "runtime": f"{(now_ms - ctx.boot_timestamp_ms) // 1000}s",
            "putTps": f"{ctx.stats.put.rate():.1f}",
            "getTransferedTps": f"{ctx.stats.get.rate():.1f}",
            "msgPutTotal": str(ctx.stats.put.total),
            "msgGetTotal": str(ctx.stats.get.total),
            "heldPullRequests": str(ctx.hold.held),
            "brokerPermission": str(ctx.settings.broker.broker_permission),
        }
    )
    return admin_pb2.KeyValueTable(code=int(ResponseCode.SUCCESS), table=table)


async def broker_config(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.KeyValueTable:
    table = dict(conf.render(ctx.settings.broker))
    table.update(conf.render(ctx.settings.store))
    return admin_pb2.KeyValueTable(code=int(ResponseCode.SUCCESS), table=table)


async def ha_status(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.HAStatus:
    store = ctx.store
    status = admin_pb2.HAStatus(
        code=int(ResponseCode.SUCCESS),
        role=ctx.settings.role.name,
        commitlog_max_offset=store.max_phy_offset,
        commitlog_min_offset=store.min_phy_offset,
        master_ha_addr=getattr(ctx.server, "master_ha_addr", "") or "",
    )
    ha = getattr(ctx.server, "ha", None)
    if ha is None:
        status.remark = "no HA service is running on this broker"
        return status
    fill = getattr(ha, "fill_status", None)
    if fill is not None:
        fill(status)
    return status
