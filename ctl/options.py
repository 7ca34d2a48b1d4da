"""Option aliases shared by every command, with mqadmin's letters (spec/operator-conventions.md §3.5).

Each alias is an ``Annotated`` type; a command gives the default in its signature. ``-b`` and ``-c`` mean what
they mean in mqadmin: a broker address and a cluster name. mqadmin's boolean options take a value
(``-o true``), so those are strings read by ``truthy``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from common.ports import DEFAULT_NAMESRV_ADDR as DEFAULT_NAMESRV

NamesrvOpt = Annotated[
    str,
    typer.Option(
        "-n",
        "--namesrvAddr",
        envvar="NAMESRV_ADDR",
        show_envvar=True,
        help="Nameserver list, host:port;host:port.",
    ),
]
ClusterOpt = Annotated[str | None, typer.Option("-c", "--clusterName", help="Cluster name: every master of it.")]
BrokerAddrOpt = Annotated[str | None, typer.Option("-b", "--brokerAddr", help="One broker, host:port.")]
TopicOpt = Annotated[str, typer.Option("-t", "--topic", help="Topic name.")]
GroupOpt = Annotated[str, typer.Option("-g", "--groupName", help="Consumer group name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of the table.")]


def truthy(value: str | None) -> bool:
    """mqadmin's rule: "true" (any case) is true, anything else false."""
    return value is not None and value.strip().lower() == "true"


def one_target(broker_addr: str | None, cluster: str | None) -> None:
    """mqadmin's ``-b | -c``: exactly one of them; otherwise a usage error (exit 2)."""
    if bool(broker_addr) == bool(cluster):
        raise typer.BadParameter("pass exactly one of -b <brokerAddr> or -c <clusterName>")
