"""ControllerMetrics: the controller's Prometheus series (RocketMQ 5's controller has a few; names follow its style).

- ``rocketmq_controller_elections_total{broker_name,result}``: elections by outcome: ``elected`` (a new master),
  ``no_candidate`` (the master was cleared, nobody eligible was alive) or ``refused`` (a requested or designated
  election found its broker ineligible; nothing changed);
- ``rocketmq_controller_seconds_without_master{broker_name}``: seconds since the group's master was last known
  alive (its connection closed or its heartbeats stopped), 0 while it has a live master; on the active instance
  (a standby, which hears no heartbeats, shows 0);
- ``rocketmq_controller_active``: 1 on the active instance, 0 on the others (at scrape time);
- ``rocketmq_controller_master_epoch{broker_name}``, ``rocketmq_controller_sync_state_set_size{broker_name}`` and
  ``rocketmq_controller_has_master{broker_name}``: from the group states this instance last read or wrote (the
  active one's are current; a standby's may lag, which the ``active`` series tells apart).

Common labels: ``node_type="controller"`` and ``node_id`` (the instance id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from common.metrics import ConstLabels, ScrapeCollector
from controller.state import GroupState

ELECTION_RESULTS = ("elected", "no_candidate", "refused")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry, *, node_id: str, is_active: Callable[[], bool],
                 groups: Callable[[], Iterable[GroupState]],
                 without_master_s: Callable[[str], float] = lambda name: 0.0) -> None:
        reg = self.registry = CollectorRegistry(auto_describe=True)
        registry.register(ConstLabels(reg, {"node_type": "controller", "node_id": node_id}))
        self._is_active = is_active
        self._groups = groups
        self._without_master_s = without_master_s
        self.elections = Counter("rocketmq_controller_elections",
                                 "Elections that changed a group's master, by result.",
                                 ["broker_name", "result"], registry=reg)
        reg.register(ScrapeCollector("controller-groups", self._collect))

    def on_election(self, broker_name: str, result: str) -> None:
        self.elections.labels(broker_name, result).inc()

    def _collect(self) -> Iterable[Metric]:
        epoch = GaugeMetricFamily("rocketmq_controller_master_epoch", "The group's masterEpoch.",
                                  labels=["broker_name"])
        size = GaugeMetricFamily("rocketmq_controller_sync_state_set_size", "Members of the group's SyncStateSet.",
                                 labels=["broker_name"])
        has = GaugeMetricFamily("rocketmq_controller_has_master", "1 when the group has a master.",
                                labels=["broker_name"])
        down = GaugeMetricFamily("rocketmq_controller_seconds_without_master",
                                 "Seconds since the group's master was last known alive; 0 while it has one.",
                                 labels=["broker_name"])
        for state in sorted(self._groups(), key=lambda s: s.broker_name):
            down.add_metric([state.broker_name], self._without_master_s(state.broker_name))
            epoch.add_metric([state.broker_name], state.master_epoch)
            size.add_metric([state.broker_name], len(state.sync_state_set))
            has.add_metric([state.broker_name], 1 if state.has_master else 0)
        active = GaugeMetricFamily("rocketmq_controller_active", "1 on the active controller instance.",
                                   1 if self._is_active() else 0)
        return [active, epoch, size, has, down]
