"""Fixtures the model tests share."""

from __future__ import annotations

import pytest

from model.checkpoint import load_checkpoint


@pytest.fixture(scope="module")
def trained(trained_checkpoint):
    """A briefly trained tiny model (it ends its outputs with </s>) and its tokenizer."""
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    return model, tokenizer


@pytest.fixture(scope="module")
def eos_model(trained_checkpoint):
    """A briefly trained tiny model: it ends its outputs with </s>, at different steps for different rows."""
    return load_checkpoint(trained_checkpoint)[0]
