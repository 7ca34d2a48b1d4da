"""A server's /metrics page as tests and benches read it: every sample now, or the value of one series. One
scrape per call (no caching: a caller waiting for a counter polls)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def scrape_samples(metrics_port: int, timeout_s: float = 10) -> list[Sample]:
    """Every sample of the /metrics page at 127.0.0.1:``metrics_port`` now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=timeout_s) as resp:
        text = resp.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _matching(samples: list[Sample], name: str, labels: dict[str, str]) -> list[Sample]:
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def sample_value(metrics_port: int, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` with ``labels`` (0 when the page has none)."""
    return sum(s.value for s in _matching(scrape_samples(metrics_port), name, labels))


def first_sample(metrics_port: int, name: str, *, timeout_s: float = 10, **labels: str) -> float | None:
    """The value of the first sample ``name`` with ``labels``; None when the page has none (a test that asserts
    on it then fails instead of reading a missing series as 0)."""
    found = _matching(scrape_samples(metrics_port, timeout_s), name, labels)
    return found[0].value if found else None
