"""The decoder rows: NMT_MAX_BATCH_SIZE, the CPU's default, or as many as a share of the GPU's memory holds."""

import pytest
import torch

from app.engine.memory import LIBRARY_RESERVE, MAX_GPU_ROWS, decoder_rows, gpu_rows, prefill_bytes, row_bytes
from app.loading import load_engine
from app.settings import Settings
from model.decoding import KVCache
from model.transformer import Transformer, TransformerConfig

GiB = 1 << 30
OPUS = TransformerConfig(src_vocab_size=58101, tgt_vocab_size=58101, d_model=512, n_heads=8, n_encoder_layers=6,
                         n_decoder_layers=6, d_ff=2048, share_embeddings=True)  # fmt: skip


def test_a_rows_bytes_count_the_kv_cache_it_allocates(tiny_model):
    c = tiny_model.config
    one, two = KVCache(tiny_model, 1, 40, 30), KVCache(tiny_model, 2, 40, 30)
    per_row = sum(b.numel() * b.element_size() for b in (two.kv, two.cross_kv, two.src_keep)) - sum(
        b.numel() * b.element_size() for b in (one.kv, one.cross_kv, one.src_keep)
    )
    assert (
        row_bytes(c, 40, 30, 4) - per_row
        == 3 * c.tgt_vocab_size * 4 + 3 * c.n_heads * 41 * 4 + (8 * c.d_model + 2 * c.d_ff) * 4
    )  # the rest is the step's work for the row


def test_gpu_rows_fill_the_fraction_after_what_is_in_use():
    per_row, total = row_bytes(OPUS, 257, 256, 2), 80 * GiB
    with pytest.raises(ValueError, match=r"NMT_GPU_MEMORY_FRACTION=0.1 .* leaves no room for one decoder row"):
        gpu_rows(OPUS, 257, 256, 2, 70 * GiB, total, 0.1, 2048)  # 8 GiB allowed, 10 GiB in use already
    sizing = gpu_rows(OPUS, 257, 256, 2, 78 * GiB, total, 0.1, 2048)
    budget = int(0.1 * total) - 2 * GiB - prefill_bytes(OPUS, 2048, 256) - LIBRARY_RESERVE
    assert (sizing.rows, sizing.how, sizing.budget) == (budget // per_row, "gpu memory", budget)
    assert 100 < sizing.rows < MAX_GPU_ROWS  # hundreds of rows in 6 GB of an 80 GB GPU
    assert gpu_rows(OPUS, 257, 256, 2, 78 * GiB, total, 0.9, 2048).rows == MAX_GPU_ROWS
    half = gpu_rows(OPUS, 257, 256, 4, 78 * GiB, total, 0.1, 2048).rows  # float32 rows take about twice the bytes
    assert sizing.rows / 2.2 < half < sizing.rows / 1.5


def test_a_worker_counts_only_its_own_memory_as_in_use(monkeypatch):
    """NMT_WORKERS: the others' caches, which the GPU reports in use or not depending on who loaded first, must not
    shrink this worker's share (8 workers x 0.1125 of 140 GiB, with 20 GiB in use by the others, sized no row)."""
    total, own = 140 * GiB, 1 * GiB
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (total - 21 * GiB, total))  # 20 GiB the others'
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: own)
    cuda = torch.device("cuda")
    with pytest.raises(ValueError, match="leaves no room"):
        decoder_rows(OPUS, cuda, torch.float16, 257, 256, None, 0.9 / 8, 2048)
    sizing = decoder_rows(OPUS, cuda, torch.float16, 257, 256, None, 0.9 / 8, 2048, shared=True)
    assert sizing.rows == gpu_rows(OPUS, 257, 256, 2, total - own, total, 0.9 / 8, 2048).rows
    assert sizing.budget <= 0.9 / 8 * total - own  # eight of them stay within 0.9 of the GPU


def test_the_setting_wins_and_a_cpu_gets_its_default(tiny_model):
    c, cpu = tiny_model.config, torch.device("cpu")
    assert decoder_rows(c, cpu, torch.float32, 257, 256, 7, 0.9, 2048).rows == 7
    sizing = decoder_rows(c, cpu, torch.float32, 257, 256, None, 0.9, 2048)
    assert (sizing.rows, sizing.how) == (32, "cpu")


def test_info_reports_the_rows_and_bytes_chosen(tiny_checkpoint):
    e = load_engine(Settings(model_dir=tiny_checkpoint, device="cpu", max_new_tokens=40, compile="off"))
    memory = e.info()["memory"]
    c = e.core.model.config
    kv = 2 * c.n_decoder_layers * (32 + 1) * c.d_model * ((40 + 1) + (256 + 1)) * 4 + (32 + 1) * (256 + 1)
    assert memory == {"rows": 32, "max_len": 40, "max_src_len": 256, "kv_cache_bytes": kv, "rows_from": "cpu",
                      "gpu_memory_fraction": None}  # fmt: skip
    assert e.info()["limits"]["max_queue"] == 256


def test_the_queue_grows_with_the_rows(tiny_checkpoint):
    e = load_engine(Settings(model_dir=tiny_checkpoint, device="cpu", max_batch_size=300, compile="off"))
    assert (e.core.batcher.cache.max_batch, e.core.batcher.max_queue) == (300, 300)
    assert isinstance(e.core.model, Transformer)
