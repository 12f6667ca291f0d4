"""bench/files.py: a tiny run translates its DOCX and text jobs through a live server and prints its ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.calibration_fixture import DATA, needs_data

ROOT = Path(__file__).resolve().parents[2]


@needs_data
def test_a_tiny_run_translates_both_files_and_measures_requests_beside_a_job():
    out = subprocess.run(
        [sys.executable, "bench/files.py", "--src", str(DATA / "val.en.gz"), "--pages", "1", "--rounds", "1",
         "--requests", "8", "--clients", "2", "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert "cores, flags:" in out[0]
    size, speed, latency = json.loads(out[1]), json.loads(out[-2]), json.loads(out[-1])
    assert size["paragraphs"] == 13 and size["docx_bytes"] > 0
    assert speed["docx_speed_over_text"] > 0 and len(speed["rounds"]) == 1
    assert latency["alone"]["p99_ms"] > 0 and latency["beside_job"]["p99_ms"] > 0 and latency["p99_ratio"] > 0
