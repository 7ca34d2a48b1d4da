"""Fixtures for metrics tests: a Prometheus binary (installed from Debian's package when missing) and the
dashboard's queries ready to send to Prometheus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.metrics.prom import find_or_install

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "cluster.json"
# Grafana's interval variables, replaced for 1 s scrapes in tests.
GRAFANA_VARS = {"$__rate_interval": "10s", "$__interval": "1s", "$__range": "5m"}


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    path, why = find_or_install()
    if path is None:
        pytest.skip(f"no Prometheus for the metrics tests: {why}")
    return path


CONTROLLER_ROW = "Controller mode"  # its series exist only on controller-mode clusters


def dashboard_queries(dashboard_path: Path = DASHBOARD, skip_rows: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target, with template variables replaced by their All value and
    Grafana's interval variables by test values; plus each query variable as a plain series selector. Panels of
    the rows named in ``skip_rows`` are left out (a classic cluster has no controller-mode series)."""
    dashboard = json.loads(dashboard_path.read_text())
    variables = {}
    out = []
    for var in dashboard.get("templating", {}).get("list", []):
        variables[f"${var['name']}"] = var.get("allValue") or ".*"
        query = var.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        if text.startswith("label_values(") and "," in text:
            metric = text[len("label_values("):].rsplit(",", 1)[0].strip()
            out.append((f"variable {var['name']}", metric))
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        if row in skip_rows:
            continue
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in {**GRAFANA_VARS, **variables}.items():
                expr = expr.replace(name, value)
            out.append((panel["title"], expr))
    return out
