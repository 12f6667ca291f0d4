"""bench/gpu_step.py without a GPU: its refusal, its buckets and sources, and the timed loop on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import gpu_step
from model.decoding import KVCache
from model.importers.marian import model_config

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no CUDA device")
def test_it_refuses_with_a_clear_message_where_there_is_no_gpu():
    done = subprocess.run([sys.executable, str(BENCH / "gpu_step.py")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no CUDA device: PyTorch finds none here" in done.stderr and not done.stdout


def test_unknown_models_and_dtypes_are_refused_by_name():
    for args, message in ((["--models", "opus"], "unknown models ['opus']"), (["--dtypes", "fp8"], "unknown dtypes")):
        done = subprocess.run([sys.executable, str(BENCH / "gpu_step.py"), *args], capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr


def test_buckets_are_the_powers_of_two_and_the_largest_batch():
    assert gpu_step.buckets(512) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert gpu_step.buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    assert gpu_step.buckets(1) == [1]
    from model.cuda_graphs import row_buckets

    assert gpu_step.buckets(100) == row_buckets(100)  # the row counts the graphs are captured for


def test_the_opus_shape_is_opus_mt_en_de_as_nmt_import_reads_it():
    c = model_config(gpu_step.OPUS_SHAPE)
    assert (c.d_model, c.n_encoder_layers, c.n_decoder_layers, c.n_heads, c.d_ff) == (512, 6, 6, 8, 2048)
    assert (c.src_vocab_size, c.tgt_vocab_size, c.share_embeddings, c.tie_output) == (58101, 58101, True, True)
    assert c.activation == "silu" and not c.norm_first and c.force_eos and c.suppress_ids == [58100]


def test_random_sources_have_the_lengths_given_and_no_special_ids_inside(tiny_model):
    c = tiny_model.config
    sources = gpu_step.sources_for(tiny_model, [4, 9, 2], None, 7)
    assert list(map(len, sources)) == [4, 9, 2, 4, 9, 2, 4]
    special = {c.source_pad_id, c.eos_id, c.bos_id}
    assert all(s[-1] == c.eos_id and not special & set(s[:-1]) for s in sources)
    real = [[5, 6, c.eos_id], [7, c.eos_id]]
    assert gpu_step.sources_for(tiny_model, [], real, 3) == [real[0], real[1], real[0]]


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "emulated-graphs"])
def test_timed_steps_run_on_eager_and_graphed_steps_and_leave_the_cache_empty(tiny_model, graphs):
    from bench.common import pad_batch
    from model.compile import uncompile
    from model.cuda_graphs import capture_model

    sources = gpu_step.sources_for(tiny_model, [5, 8, 3], None, 4)
    src = pad_batch(sources, tiny_model.config.source_pad_id)
    cache = KVCache(tiny_model, 4, 40, src.size(1))
    if graphs:
        capture_model(tiny_model, cache, emulate=True)
    try:
        times = gpu_step.time_steps(tiny_model, cache, src, past=3, steps=2, repeats=5)
        assert len(times) == 5 and all(t > 0 for t in times)
        assert cache.n == 0  # the next bucket starts on an empty cache
        again = gpu_step.time_steps(tiny_model, cache, src[:1], past=1, steps=1, repeats=2)
        assert len(again) == 2 and cache.n == 0
    finally:
        uncompile(tiny_model)


def test_a_row_is_the_median_of_each_and_their_ratio():
    r = gpu_step.row("m", "fp16", 8, [0.004, 0.001, 0.002], [0.0005, 0.0004, 0.0009])
    assert (r["eager_ms"], r["graphs_ms"], r["speedup"]) == (2.0, 0.5, 4.0)
    assert r["eager_range_ms"] == [1.0, 4.0] and r["graphs_range_ms"] == [0.4, 0.9]
    assert (r["model"], r["dtype"], r["rows"]) == ("m", "fp16", 8)
