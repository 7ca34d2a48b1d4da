"""bench.scaling end to end on one tiny point: real nameserver, master, slave, producer and consumer processes; the
JSON has every figure a reader of the cost curve needs and the chart is a PNG. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_one_point_writes_the_json_and_a_png_chart(tmp_path):
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench.scaling", "--sweep", "senders=4", "--roles", "async", "--seconds", "0.5",
         "--warmup", "0.2", "--workdir", str(tmp_path), "--out-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    doc = json.loads((out / "scaling.json").read_text())
    assert doc["name"] == "scaling" and doc["machine"]["cpu_count"] >= 1
    [point] = doc["points"]
    assert "failed" not in point, point
    assert (point["sweep"], point["value"], point["role"]) == ("senders", 4, "async")
    assert point["knobs"] == {"senders": 4, "body": 1024, "groups": 1, "topics": 1}
    assert point["messages"] > 0 and point["msg_per_s"] > 0 and point["statuses"].get("SEND_OK", 0) > 0
    assert 0 < point["ack_p50_ms"] <= point["ack_p99_ms"]
    assert set(point["cpu_us_per_msg"]) == {"namesrv", "master", "slave", "producer", "consumer"}
    assert point["cpu_us_per_msg"]["master"] > 0
    assert point["rss_mib"]["master"] > 0 and point["rss_mib"]["slave"] > 0
    assert doc["cost_growth"] == [{"sweep": "senders", "role": "async", "work_unit": "message",
                                   "cost_per_work": {"4": 1.0}}]

    assert doc["charts"] == {"senders": "scaling_senders.png"}
    assert (out / "scaling_senders.png").read_bytes()[:8] == PNG_MAGIC
