"""Prometheus text exposition (format 0.0.4) for the ``/metrics`` server thread: cheap per scrape, and polite to
the event loop that shares the GIL.

Why not ``prometheus_client.generate_latest``: it validates and escapes every label name and value of every
sample on every scrape, about 23 us per sample, so a broker's 600-series page cost 18 to 20 ms of CPU in the
server thread, and each GIL switch interval (5 ms) the thread held delayed the event loop's next wake-up (sends
during back-to-back scrapes: p99 41 ms, against 9 ms without; issue 22 item 7). Here the text before the value,
``name{label="value",...} ``, is built once per series and kept (``TextRenderer``, bounded), so a scrape is a
dictionary lookup and a float format per sample; the output is byte for byte ``generate_latest``'s (labels sorted
by name, the same escaping and number format, ``_created``/``_gsum``/``_gcount`` in their own families), which
``tests/unit/common/test_exposition.py`` checks.

``Labelled`` is a family plus constant labels to merge into every sample (``common.metrics.ConstLabels`` returns
them in a snapshot instead of copying each sample with the labels added). ``render`` calls ``pause()`` every
``PAUSE_EVERY`` samples: the server thread passes ``time.sleep(0)``, which hands the GIL to a waiting event loop
at once instead of at the end of a switch interval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.utils import floatToGoString

CACHE_MAX = 100_000  # series prefixes kept; beyond it the cache starts over (label sets that come and go)
PAUSE_EVERY = 200  # samples between two pause() calls (about 0.2 ms of work)
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
          "unknown": "untyped"}


class Labelled(NamedTuple):
    """``metric`` whose samples all get ``labels`` too (a sample's own label of the same name wins)."""

    metric: Metric
    labels: Mapping[str, str]


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help(name: str, documentation: str) -> str:
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {escape_metric_name(name)} {doc}\n"


class TextRenderer:
    """Renders families to exposition text, remembering each series' ``name{labels} `` prefix.

    Not thread-safe: one renderer per server, used by one scrape at a time."""

    def __init__(self, cache_max: int = CACHE_MAX) -> None:
        self.cache_max = cache_max
        self._prefixes: dict[tuple, str] = {}

    @property
    def cached_series(self) -> int:
        return len(self._prefixes)

    def render(self, items: Iterable[Metric | Labelled], pause: Callable[[], None] | None = None) -> bytes:
        out: list[str] = []
        prefixes = self._prefixes
        if len(prefixes) > self.cache_max:
            prefixes.clear()
        fmt = floatToGoString
        countdown = PAUSE_EVERY
        for item in items:
            if isinstance(item, Labelled):
                metric, const = item.metric, item.labels
                const_key = tuple(const.items())
            else:
                metric, const, const_key = item, None, ()
            mname, mtype = metric.name, metric.type
            if mtype == "counter":
                mname += "_total"
            elif mtype == "info":
                mname += "_info"
            out.append(_help(mname, metric.documentation))
            out.append(f"# TYPE {escape_metric_name(mname)} {_TYPES.get(mtype, mtype)}\n")
            om: dict[str, list[str]] = {}
            for s in metric.samples:
                key = (s.name, tuple(s.labels.items()), const_key)
                prefix = prefixes.get(key)
                if prefix is None:
                    prefix = prefixes[key] = _prefix(s.name, s.labels if const is None else {**const, **s.labels})
                line = prefix + fmt(s.value)
                if s.timestamp is not None:
                    line += f" {int(float(s.timestamp) * 1000):d}"
                line += "\n"
                for suffix in _OM_SUFFIXES:
                    if s.name == metric.name + suffix:
                        om.setdefault(suffix, []).append(line)
                        break
                else:
                    out.append(line)
                countdown -= 1
                if countdown <= 0 and pause is not None:
                    pause()
                    countdown = PAUSE_EVERY
            for suffix, lines in sorted(om.items()):
                out.append(_help(metric.name + suffix, metric.documentation))
                out.append(f"# TYPE {escape_metric_name(metric.name + suffix)} gauge\n")
                out.extend(lines)
        return "".join(out).encode("utf-8")


def _prefix(name: str, labels: Mapping[str, str]) -> str:
    """``name{k="v",...} `` with the labels sorted by name, or ``name `` without labels."""
    if not labels:
        return f"{escape_metric_name(name)} "
    pairs = ",".join(f'{escape_label_name(k)}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
    return f"{escape_metric_name(name)}{{{pairs}}} "
