"""bench/ceiling.py at a tiny size: one process and one front-end apart from its engine, every request answered and
its CPU put down to the processes that spent it, through its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two servers started and driven: about 12 s
def test_a_tiny_run_reports_one_process_and_a_front_end_side_by_side():
    done = subprocess.run(
        [sys.executable, "bench/ceiling.py", "--frontends", "0,1", "--requests", "60", "--rounds", "1",
         "--warmup", "8", "--concurrency", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout.splitlines()
    assert out[0].startswith("CPU: ") and "cores, flags:" in out[0]
    assert any(x.strip().startswith("one process:") for x in out) and any("1 front-ends:" in x for x in out)
    report = json.loads(out[-1])
    single, split = report["results"]
    assert (single["frontends"], split["frontends"], report["ratio_to_frontends"]) == (0, 1, 0)
    assert single["over_first"] == 1.0 and split["over_first"] > 0
    assert set(single["us_per_request"]) == {"front", "engine", "client"}
    assert set(split["us_per_request"]) == {"front", "engine", "engine_loop", "parent", "client"}
    for r in (single, split):
        assert r["errors"] == 0 and r["req_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["us_per_request"]["front"] + r["us_per_request"]["engine"] > 0
