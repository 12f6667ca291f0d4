"""bench/fairness.py at a tiny size: both servers, both conditions, every request counted, through its command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_tiny_run_reports_both_admissions_alone_and_beside_the_big_client(tiny_checkpoint, tmp_path):
    env = {**os.environ, "NMT_MAX_BATCH_SIZE": "4", "NMT_MAX_QUEUE": "16", "NMT_MAX_BATCH_TEXTS": "4",
           "NMT_MAX_NEW_TOKENS": "12", "TMPDIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(BENCH / "fairness.py"), "--model-dir", str(tiny_checkpoint), "--requests", "6",
         "--clients", "2", "--rounds", "2", "--threads", "1", "--fifo", "--timeout", "300"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(report["results"]) == ["turns", "fifo"]
    for result in report["results"].values():
        assert result["limits"]["max_request_sequences"] == result["big_sentences"] == 8  # half of the queue
        for condition in ("alone", "beside"):
            row = result[condition]
            assert (row["requests"], row["ok"], row["429"], row["other_errors"]) == (6, 6, 0, 0)
            assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert result["beside"]["big_429"] == 0 and result["p99_beside_over_alone"] > 0
        assert len(result["round_p99_ratios"]) == 2 and result["median_round_p99_ratio"] > 0
    assert "p99 beside / alone: requests taking turns" in done.stdout and "CPU: " in done.stdout
    assert list(tmp_path.glob("nmt-serve-bench-*")) == []  # the servers' logs go with their clean exits
