"""bench/compare_models.py: two checkpoints taking turns, through the script's command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.bench.helpers import SENTENCES

BENCH = Path(__file__).resolve().parents[2] / "bench"


def compare(tmp_path, new, baseline, *extra):
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("".join(s + "\n" for s in SENTENCES))
    ref.write_text("".join(s + "\n" for s in SENTENCES))
    done = subprocess.run(
        [sys.executable, str(BENCH / "compare_models.py"), "--model-dir", str(new), "--baseline", str(baseline),
         "--src", str(src), "--ref", str(ref), "--batch-sizes", "1,4", "--threads", "1", *extra],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_both_models_decode_every_sentence_at_each_batch_size_and_the_ratio_comes_from_the_rounds(
    tmp_path, tiny_checkpoint
):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_checkpoint, copy)
    out = compare(tmp_path, copy, tiny_checkpoint, "--engine", "ours_eager", "--rounds", "3")
    report = json.loads(out.strip().splitlines()[-1])
    assert report["engine"] == "ours_eager" and report["rounds"] == 3
    assert "CPU: " in out and "new: " in out and "baseline: " in out
    for bs in ("1", "4"):
        row = report["results"][bs]
        for label in ("new", "baseline"):
            assert row[label]["sentences_per_s"] > 0
            assert abs(row[label]["ms_per_sentence"] * row[label]["sentences_per_s"] - 1000) < 10
        # the same weights decode the same tokens: the same BLEU
        assert row["new"]["bleu_lc"] == row["baseline"]["bleu_lc"]
        ratio = row["new/baseline"]
        assert ratio["min"] <= ratio["median"] <= ratio["max"]
        assert f"batch {bs}: new " in out


def test_rounds_below_one_are_refused(tmp_path, tiny_checkpoint):
    done = subprocess.run(
        [sys.executable, str(BENCH / "compare_models.py"), "--model-dir", str(tiny_checkpoint), "--baseline",
         str(tiny_checkpoint), "--src", str(tmp_path / "none"), "--rounds", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--rounds must be at least 1" in done.stderr


def test_a_baseline_source_or_reference_that_is_not_there_is_refused_before_any_work(tmp_path, tiny_checkpoint):
    src = tmp_path / "src.en"
    src.write_text("".join(s + "\n" for s in SENTENCES))
    base = [sys.executable, str(BENCH / "compare_models.py"), "--model-dir", str(tiny_checkpoint)]
    cases = [
        (["--baseline", str(tmp_path / "old"), "--src", str(src)], f"--baseline {tmp_path / 'old'}: no such directory"),
        (["--baseline", str(tiny_checkpoint), "--src", str(tmp_path / "none")],
         f"--src {tmp_path / 'none'}: no such file"),
        (["--baseline", str(tiny_checkpoint), "--src", str(src), "--ref", str(tmp_path / "ref")],
         f"--ref {tmp_path / 'ref'}: no such file"),
    ]  # fmt: skip
    for args, message in cases:
        done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not done.stdout
