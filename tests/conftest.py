"""Shared fixtures: a tokenizer, a tiny random model and a checkpoint directory, all built in seconds."""

from __future__ import annotations

import pytest
import torch

from model.checkpoint import save_checkpoint
from model.tokenizer import Tokenizer
from model.transformer import Transformer, TransformerConfig
from tests.synthetic import synthetic_pairs

torch.set_num_threads(1)  # tiny models: threads cost more than they give, and tests run side by side


@pytest.fixture(scope="session")
def pairs() -> list[tuple[str, str]]:
    return synthetic_pairs(400, seed=0)


@pytest.fixture(scope="session")
def tokenizer(pairs) -> Tokenizer:
    extra = ["Zwei junge weiße Männer sind im Freien.", "A café, 42 years old — naïve!"]
    return Tokenizer.train([s for p in pairs for s in p] + extra, vocab_size=600, min_frequency=1)


def tiny_config(tokenizer: Tokenizer, **overrides) -> TransformerConfig:
    V = tokenizer.vocab_size
    base = dict(
        src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=64, dropout=0.0, max_positions=512,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


@pytest.fixture(scope="session")
def tiny_model(tokenizer) -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config(tokenizer)).eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_model, tokenizer):
    """A checkpoint directory holding the tiny random model (its translations are gibberish)."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(path, tiny_model, tokenizer, {"name": "tiny", "note": "random weights, for tests"})
    return path
