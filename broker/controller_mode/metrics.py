"""A controller-mode broker's own Prometheus series, added to each BrokerServer's registry on every role switch (so
they carry the broker's common labels, ``role`` included) and read at scrape time from the long-lived
ReplicasManager, so counters stay monotonic across switches:

- ``rocketmq_controller_master_epoch``: the masterEpoch this broker follows (its role's; the controller's last
  answer before it has one);
- ``rocketmq_sync_state_set_size``: members of the group's SyncStateSet as this broker knows it (on the master, the
  set its acks count against);
- ``rocketmq_fenced_sends_total``: sends answered without SEND_OK because the master's role lease was not valid;
- ``rocketmq_role_changes_total{to_role}``: role switches carried out, by the role taken (MASTER / SLAVE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric


@dataclass
class ControllerModeFacts:
    master_epoch: int = 0
    sync_state_set_size: int = 0
    fenced_sends: int = 0
    role_changes: dict[str, int] = field(default_factory=dict)


def families(facts: Callable[[], ControllerModeFacts]) -> Iterable[Metric]:
    f = facts()
    changes = CounterMetricFamily("rocketmq_role_changes", "Role switches this broker carried out, by the role taken.",
                                  labels=["to_role"])
    for role in ("MASTER", "SLAVE"):
        changes.add_metric([role], f.role_changes.get(role, 0))
    return [
        GaugeMetricFamily("rocketmq_controller_master_epoch", "The masterEpoch this broker follows.", f.master_epoch),
        GaugeMetricFamily("rocketmq_sync_state_set_size", "Members of the group's SyncStateSet as this broker knows it.",
                          f.sync_state_set_size),
        CounterMetricFamily("rocketmq_fenced_sends", "Sends answered without SEND_OK: the master's role lease was not "
                            "valid.", f.fenced_sends),
        changes,
    ]
