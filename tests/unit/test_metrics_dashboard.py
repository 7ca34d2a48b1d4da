"""Deployment files for metrics: the Grafana dashboard is current, provisioned, and scrapes every compose server."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana"
COMPOSE_SERVERS = ("namesrv", "broker-a", "broker-a-s", "broker-b", "broker-b-s")


def load_builder():
    spec = importlib.util.spec_from_file_location("build_dashboard", GRAFANA / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_dashboard_is_what_the_builder_writes():
    builder = load_builder()
    committed = (GRAFANA / "dashboards" / "cluster.json").read_text()
    assert committed == builder.render(), "run: python deploy/grafana/build_dashboard.py"


def test_every_panel_queries_the_provisioned_datasource():
    dashboard = json.loads((GRAFANA / "dashboards" / "cluster.json").read_text())
    datasource = (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    uid = re.search(r"^\s*uid:\s*(\S+)", datasource, re.MULTILINE).group(1)
    assert "url: http://prometheus:9090" in datasource
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert p["datasource"]["uid"] == uid, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"]["uid"] == uid, p["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("brokers", "produce", "consume", "consumer lag", "replication lag", "sync-wait", "send results",
                  "commitlog growth", "disk use"):
        assert topic in titles, f"no panel about {topic}"


def test_the_dashboard_provider_loads_the_mounted_dashboards_folder():
    provider = (GRAFANA / "provisioning" / "dashboards" / "pyrmq.yml").read_text()
    assert "path: /etc/grafana/dashboards" in provider


def test_prometheus_scrapes_every_compose_server_every_5_seconds():
    config = (REPO / "deploy" / "prometheus" / "prometheus.yml").read_text()
    assert re.search(r"scrape_interval:\s*5s", config)
    for server in COMPOSE_SERVERS:
        assert f'"{server}:5557"' in config, server
