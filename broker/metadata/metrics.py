"""Prometheus families of the metadata tables, computed at scrape time from the managers' own counters.

- ``rocketmq_metadata_entries{table}``: topics and subscription groups held (``table`` = ``topics`` /
  ``subscription_groups``);
- ``rocketmq_metadata_auto_created_entries{table}``: how many of them clients created by naming them, against
  ``maxAutoCreatedTopics`` / ``maxAutoCreatedSubscriptionGroups`` (``rocketmq_metadata_auto_create_limit{table}``);
- ``rocketmq_metadata_auto_create_refusals_total{table}``: names refused because the limit was reached;
- ``rocketmq_metadata_persists_total{file}`` and ``rocketmq_metadata_persist_failures_total{file}``: completed and
  failed writes of each config file (batched: at most one per interval however many changes).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.metadata.config_file import ConfigFile
from broker.metadata.subscription_groups import SubscriptionGroupManager
from broker.metadata.topics import TopicConfigManager


def metadata_families(
    *, topics: TopicConfigManager, groups: SubscriptionGroupManager, files: Iterable[ConfigFile]
) -> list[Metric]:
    entries = GaugeMetricFamily("rocketmq_metadata_entries", "Topics and subscription groups held.", labels=["table"])
    auto = GaugeMetricFamily("rocketmq_metadata_auto_created_entries",
                             "Topics and groups that clients created by naming them (bounded by the limit).",
                             labels=["table"])
    limit = GaugeMetricFamily("rocketmq_metadata_auto_create_limit",
                              "maxAutoCreatedTopics / maxAutoCreatedSubscriptionGroups.", labels=["table"])
    refusals = CounterMetricFamily("rocketmq_metadata_auto_create_refusals",
                                   "New names refused because the auto-creation limit was reached.", labels=["table"])
    for name, manager in (("topics", topics), ("subscription_groups", groups)):
        entries.add_metric([name], len(manager.table))
        auto.add_metric([name], len(manager.auto_created))
        limit.add_metric([name], manager.max_auto_created)
        refusals.add_metric([name], manager.auto_create_refusals)
    writes = CounterMetricFamily("rocketmq_metadata_persists", "Completed writes of a config file.", labels=["file"])
    failures = CounterMetricFamily("rocketmq_metadata_persist_failures", "Failed writes of a config file.",
                                   labels=["file"])
    for f in files:
        writes.add_metric([f.path.name], f.writer.writes)
        failures.add_metric([f.path.name], f.writer.failures)
    return [entries, auto, limit, refusals, writes, failures]
