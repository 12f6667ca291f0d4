"""bench/shape_cost.py: shapes decode the bundled model's work, through the script's command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from tests.bench.helpers import SENTENCES

BENCH = Path(__file__).resolve().parents[2] / "bench"


def shape_cost(tmp_path, model_dir, *extra) -> subprocess.CompletedProcess:
    src = tmp_path / "src.en"
    src.write_text("".join(s + "\n" for s in SENTENCES * 3))
    return subprocess.run(
        [sys.executable, str(BENCH / "shape_cost.py"), "--model-dir", str(model_dir), "--src", str(src),
         "--batch-sizes", "1,4", "--threads", "1", *extra],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_every_shape_steps_as_many_rows_as_the_models_own_translations_took(tmp_path, trained_checkpoint):
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    wanted = 0
    for sentence in SENTENCES * 3:
        (h,) = greedy_decode(model, torch.tensor([tokenizer.encode(sentence, "source")]), 256)
        wanted += len(h.tokens) + (h.finish_reason == "eos")
    done = shape_cost(tmp_path, trained_checkpoint, "--eager", "--rounds", "2",
                      "--shapes", "d48-e1-d2-f96-v500,d32-e2-d2-f64-v300-h2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    c = model.config
    baseline = f"d{c.d_model}-e{c.n_encoder_layers}-d{c.n_decoder_layers}-f{c.d_ff}-v{c.tgt_vocab_size}"
    assert report["baseline"] == baseline and report["row_steps"] == wanted and report["sources"] == 15
    assert list(report["results"]) == [baseline, "d48-e1-d2-f96-v500", "d32-e2-d2-f64-v300-h2"]
    for shape, row in report["results"].items():
        assert row["row_steps"] == {"1": wanted, "4": wanted}, f"{shape} did other work than the model's"
        for b in ("1", "4"):
            low, high = row[b]["range"]
            assert row[b]["sentences_per_s"] > 0 and low <= row[b]["speed_vs_baseline"] <= high
    assert report["results"][baseline]["1"]["speed_vs_baseline"] == 1.0
    assert report["results"]["d32-e2-d2-f64-v300-h2"]["parameters"] < report["results"][baseline]["parameters"]
    assert "CPU: " in done.stdout and "| d48-e1-d2-f96-v500 | " in done.stdout


def test_a_shape_it_cannot_read_is_refused_with_the_form_it_takes(tmp_path, tiny_checkpoint):
    done = shape_cost(tmp_path, tiny_checkpoint, "--eager", "--shapes", "d256-e3-d3")
    assert done.returncode == 1 and "'d256-e3-d3' is not a shape: write d256-e3-d3-f1024-v8000[-h4]" in done.stderr
