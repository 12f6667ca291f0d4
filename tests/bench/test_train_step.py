"""bench/train_step.py: float32 and bfloat16-autocast updates taking turns, through its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "train_step.py"
TINY = ["--rows", "4", "--length", "6", "--vocab-size", "100", "--d-model", "32", "--heads", "4", "--d-ff", "64",
        "--encoder-layers", "1", "--decoder-layers", "1", "--threads", "1"]  # fmt: skip


def test_each_precision_is_timed_every_round_and_the_ratio_is_their_median():
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--rounds", "3", "--steps", "2"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    seconds = report["seconds_per_update"]
    assert sorted(seconds) == ["bf16", "float32"] and all(len(v) == 3 and min(v) > 0 for v in seconds.values())
    per_round = sorted(f / b for f, b in zip(seconds["float32"], seconds["bf16"]))
    ratio = report["bf16_speedup"]
    assert abs(ratio["median"] - per_round[1]) < 0.06 and ratio["min"] <= ratio["median"] <= ratio["max"]
    assert done.stdout.startswith("CPU: ") and "bf16 speed-up" in done.stdout


def test_no_rounds_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--rounds", "0"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and "must be at least 1" in done.stderr
