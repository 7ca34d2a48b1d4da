"""Build deploy/grafana/dashboards/cluster.json (the pyrmq cluster dashboard) from the panel list below.

Run ``python deploy/grafana/build_dashboard.py`` after editing; tests/unit/test_metrics_dashboard.py fails when the
committed JSON differs from what this script writes, and tests/integration/metrics checks that every query
returns series on a running cluster. Queries use ``$cluster`` (a regex, ``.*`` for All) and Grafana's
``$__rate_interval``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATASOURCE = {"type": "prometheus", "uid": "pyrmq-prometheus"}
OUT = Path(__file__).resolve().parent / "dashboards" / "cluster.json"
C = 'cluster=~"$cluster"'
RI = "$__rate_interval"

# (row title, [(panel title, kind, unit, [(expr, legend), ...], description), ...])
ROWS = [
    ("Cluster overview", [
        ("Scrape targets up", "stat", "none",
         [('sum by (job) (up{job=~"pyrmq-.*"})', "{{job}} up"),
          ('count by (job) (up{job=~"pyrmq-.*"})', "{{job}} targets")],
         "Prometheus scrape health of every pyrmq server."),
        ("Live brokers by role (nameserver view)", "stat", "none",
         [('sum by (role) (max by (broker_cluster, role) (rocketmq_namesrv_live_brokers{broker_cluster=~"$cluster"}))',
           "{{role}}")],
         "Brokers registered and alive in the nameserver's route table."),
        ("Brokers", "table", "none",
         [(f'max by (node_id, broker_id, role, broker_addr, instance) (rocketmq_broker_info{{{C}}})', "")],
         "Every broker that exports metrics: group, id, role, address."),
        ("Slaves connected / in sync per master", "timeseries", "none",
         [(f"rocketmq_ha_connections{{{C}}}", "{{node_id}} connected"),
          (f"rocketmq_ha_in_sync_slaves{{{C}}}", "{{node_id}} in sync")],
         "HA connections on each master and how many are in sync."),
    ]),
    ("Throughput", [
        ("Produce rate (messages/s) by topic", "timeseries", "short",
         [(f'sum by (topic) (rate(rocketmq_messages_in_total{{{C},is_system="false"}}[{RI}]))', "{{topic}}")],
         "Messages stored per second (rocketmq_messages_in_total)."),
        ("Produce throughput (bytes/s) by broker", "timeseries", "Bps",
         [(f"sum by (node_id) (rate(rocketmq_throughput_in_total{{{C}}}[{RI}]))", "{{node_id}}")],
         "Message body bytes stored per second."),
        ("Consume rate (messages/s) by group", "timeseries", "short",
         [(f"sum by (consumer_group, topic) (rate(rocketmq_messages_out_total{{{C}}}[{RI}]))",
           "{{consumer_group}} / {{topic}}")],
         "Messages delivered by pulls, masters and slaves together."),
        ("Consume throughput (bytes/s) by broker and role", "timeseries", "Bps",
         [(f"sum by (node_id, role) (rate(rocketmq_throughput_out_total{{{C}}}[{RI}]))", "{{node_id}} {{role}}")],
         "Bytes delivered by pulls; a SLAVE line means consumers read from the slave."),
        ("Message size (p50 / p99)", "timeseries", "bytes",
         [(f"histogram_quantile(0.5, sum by (le) (rate(rocketmq_message_size_bucket{{{C}}}[{RI}])))", "p50"),
          (f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_message_size_bucket{{{C}}}[{RI}])))", "p99")],
         "Stored message body sizes (RocketMQ 5 buckets: 1K 4K 512K 1M 2M 4M)."),
    ]),
    ("Consumers", [
        ("Consumer lag (messages) per group", "timeseries", "short",
         [((f'sum by (topic, consumer_group) (max by (node_id, topic, consumer_group) '
            f'(rocketmq_consumer_lag_messages{{{C},is_system="false"}}))'), "{{consumer_group}} / {{topic}}")],
         "Queue max offset minus committed offset, summed over broker groups (the larger of master and slave)."),
        ("Consumer lag latency per group", "timeseries", "ms",
         [(f'max by (topic, consumer_group) (rocketmq_consumer_lag_latency_milliseconds{{{C},is_system="false"}})',
           "{{consumer_group}} / {{topic}}")],
         "Age of the oldest unconsumed message."),
        ("Pulls answered with a slave suggestion", "timeseries", "short",
         [(f"sum by (node_id) (rate(rocketmq_pull_slave_suggestions_total{{{C}}}[{RI}]))", "{{node_id}}")],
         "Pull responses that told the consumer to read this queue from a slave (backlog beyond memory)."),
    ]),
    ("Replication", [
        ("Replication lag per slave (bytes)", "timeseries", "bytes",
         [(f"rocketmq_ha_slave_fall_behind_bytes{{{C}}}", "{{node_id}} -> {{slave_addr}}")],
         "Master max offset minus the slave's acked offset (haStatus #Diff)."),
        ("Replication throughput (bytes/s)", "timeseries", "Bps",
         [(f"sum by (node_id, slave_addr) (rate(rocketmq_ha_transfer_bytes_total{{{C}}}[{RI}]))",
           "{{node_id}} -> {{slave_addr}}")],
         "Commitlog bytes each master sends to each slave."),
        ("Sync-wait latency (SYNC_MASTER)", "timeseries", "s",
         [(f"histogram_quantile(0.5, sum by (node_id, le) (rate(rocketmq_ha_sync_wait_seconds_bucket{{{C}}}[{RI}])))",
           "{{node_id}} p50"),
          (f"histogram_quantile(0.99, sum by (node_id, le) (rate(rocketmq_ha_sync_wait_seconds_bucket{{{C}}}[{RI}])))",
           "{{node_id}} p99")],
         "Time a SYNC_MASTER batch waits for a slave ack (empty quantiles mean no synchronous sends)."),
        ("Send results by status", "timeseries", "short",
         [(f"sum by (status) (rate(rocketmq_send_results_total{{{C}}}[{RI}]))", "{{status}}")],
         ("Messages answered per second by put status: FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are stored "
          "on the master but not replicated.")),
        ("Sync timeouts", "timeseries", "short",
         [(f"sum by (node_id) (increase(rocketmq_ha_sync_timeouts_total{{{C}}}[{RI}]))", "{{node_id}}")],
         "Batches answered FLUSH_SLAVE_TIMEOUT."),
        ("Slave: connected and last frame age", "timeseries", "s",
         [(f"rocketmq_ha_master_last_read_age_seconds{{{C}}}", "{{node_id}}-{{broker_id}} last frame age"),
          (f"rocketmq_ha_connected{{{C}}}", "{{node_id}}-{{broker_id}} connected")],
         "Seconds since each slave read a frame from its master (heartbeats every 5 s), and the HA link state."),
        ("Slave metadata sync age", "timeseries", "s",
         [(f'time() - (rocketmq_slave_sync_last_success_timestamp_seconds{{{C},role="SLAVE"}} > 0)',
           "{{node_id}}-{{broker_id}}")],
         "Seconds since the slave last copied topics, groups and offsets from its master (every 10 s)."),
    ]),
    ("Storage", [
        ("Commitlog growth (bytes/s)", "timeseries", "Bps",
         [(f"rate(rocketmq_commitlog_max_offset_bytes{{{C}}}[{RI}])", "{{node_id}}-{{broker_id}}")],
         "Commitlog write rate on masters and slaves."),
        ("Commitlog size (max - min offset)", "timeseries", "bytes",
         [(f"rocketmq_commitlog_max_offset_bytes{{{C}}} - rocketmq_commitlog_min_offset_bytes{{{C}}}",
           "{{node_id}}-{{broker_id}}")],
         "Bytes of commitlog kept."),
        ("Disk use", "timeseries", "percentunit",
         [(f"rocketmq_storage_size{{{C}}} / rocketmq_storage_capacity_bytes{{{C}}}", "{{node_id}}-{{broker_id}}")],
         "Used fraction of each store's filesystem."),
        ("Flush and dispatch backlog", "timeseries", "bytes",
         [(f"rocketmq_storage_flush_behind_bytes{{{C}}}", "{{node_id}}-{{broker_id}} flush"),
          (f"rocketmq_storage_dispatch_behind_bytes{{{C}}}", "{{node_id}}-{{broker_id}} dispatch")],
         "Commitlog bytes not yet flushed to disk / not yet in consume queues."),
    ]),
    ("Controller mode", [
        ("Master epoch per group", "timeseries", "none",
         [(f'max by (node_id) (rocketmq_controller_master_epoch{{{C},node_type="broker"}})', "{{node_id}}")],
         "The masterEpoch each group's brokers follow: a step is a failover or a switchover (controller mode)."),
        ("SyncStateSet size", "timeseries", "none",
         [(f'rocketmq_sync_state_set_size{{{C},role!="SLAVE"}}', "{{node_id}}-{{broker_id}}")],
         "Members of each group's SyncStateSet as its master counts acks against (SEND_OK needs all of them)."),
        ("Time without a master", "timeseries", "s",
         [("max by (broker_name) (rocketmq_controller_seconds_without_master)", "{{broker_name}}")],
         "Seconds since the controller last knew the group's master alive; 0 while the group has one."),
        ("Elections by result", "timeseries", "short",
         [("sum by (broker_name, result) (increase(rocketmq_controller_elections_total[5m]))",
           "{{broker_name}} {{result}} / 5m")],
         "Controller elections: elected (new master), no_candidate (nobody eligible), refused (ineligible broker)."),
        ("Fenced sends and role changes", "timeseries", "short",
         [(f"sum by (node_id) (rate(rocketmq_fenced_sends_total{{{C}}}[{RI}]))", "{{node_id}} fenced/s"),
          (f"sum by (node_id, to_role) (increase(rocketmq_role_changes_total{{{C}}}[5m]))",
           "{{node_id}} to {{to_role}} / 5m")],
         "Sends refused by a master whose role lease lapsed, and brokers switching role."),
    ]),
    ("Nameserver", [
        ("Registrations and expiries", "timeseries", "short",
         [("sum by (role) (rate(rocketmq_namesrv_registrations_total[$__rate_interval]))", "register {{role}}"),
          ("sum by (reason) (increase(rocketmq_namesrv_broker_expiries_total[5m]))", "expired ({{reason}}) / 5m")],
         "Broker registrations per second and brokers dropped without unregistering."),
        ("Route queries by result", "timeseries", "short",
         [("sum by (result) (rate(rocketmq_namesrv_route_queries_total[$__rate_interval]))", "{{result}}")],
         "GetRouteInfoByTopic calls per second."),
    ]),
]


def panel(pid: int, title: str, kind: str, unit: str, targets, description: str, x: int, y: int) -> dict:
    width = 8 if kind == "stat" else 12
    p = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend or "__auto",
                "range": kind != "table",
                "instant": kind == "table",
                **({"format": "table"} if kind == "table" else {}),
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return p


def build() -> dict:
    panels, pid, y = [], 1, 0
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y, x = pid + 1, y + 1, 0
        for title, kind, unit, targets, description in row_panels:
            width = 8 if kind == "stat" else 12
            if x + width > 24:
                x, y = 0, y + 8
            panels.append(panel(pid, title, kind, unit, targets, description, x, y))
            pid, x = pid + 1, x + width
        y += 8
    return {
        "uid": "pyrmq-cluster",
        "title": "pyrmq cluster",
        "description": "Brokers, throughput, consumer lag, replication and storage of a pyrmq cluster.",
        "tags": ["pyrmq", "rocketmq"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "cluster",
                    "label": "Cluster",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": "label_values(rocketmq_broker_info, cluster)",
                    "query": {"query": "label_values(rocketmq_broker_info, cluster)", "refId": "cluster"},
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                    "sort": 1,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
