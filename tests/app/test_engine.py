"""The engine: limits, devices, and a many-text request coming back whole and in order."""

from __future__ import annotations

import pytest
import torch

from app.engine import Engine, InputTooLong, InvalidRequest, resolve_device
from model.evaluate import max_new_tokens_for, translate_corpus
from tests.app.test_batcher import TEXTS

pytestmark = pytest.mark.anyio


@pytest.fixture
async def engine(tiny_model, tokenizer):
    e = Engine(tiny_model, tokenizer, max_input_tokens=32, max_new_tokens=40, max_batch_texts=10, max_batch_size=3)
    await e.start()
    yield e
    e.stop()


async def test_many_texts_come_back_in_order_as_each_translates_alone(engine, tiny_model, tokenizer):
    texts = [*TEXTS, "", "  "]
    out = await engine.translate(texts)
    for text, t in zip(texts, out):  # the default budget is nmt-eval's, capped at max_new_tokens
        budget = max_new_tokens_for(len(tokenizer.encode(text)), limit=40)
        expected = translate_corpus(tiny_model, tokenizer, [text], max_new_tokens=budget)
        assert [t.text] == expected
    assert [t.output_tokens for t in out[-2:]] == [0, 0]
    assert engine.ready and engine.batcher.peak_rows == 3


async def test_limits_are_checked_before_any_model_work(engine):
    steps = engine.batcher.steps
    with pytest.raises(InvalidRequest, match="11 items; the limit is 10"):
        await engine.translate(["a"] * 11)
    with pytest.raises(InputTooLong, match=r"text\[1\] has \d+ tokens; the limit is 32"):
        await engine.translate(["a", "a dog " * 40])
    with pytest.raises(InvalidRequest, match="between 1 and 40"):
        await engine.translate("a", max_new_tokens=41)
    assert engine.batcher.steps == steps
    (t,) = await engine.translate("a dog " * 40, truncate=True, max_new_tokens=1)
    assert t.truncated and t.input_tokens == 32


def test_limits_must_fit_the_model(tiny_model, tokenizer):
    with pytest.raises(ValueError, match="max_positions=512"):
        Engine(tiny_model, tokenizer, max_new_tokens=512)


def test_resolve_device():
    expected = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("auto", "float32") == (expected, torch.float32)
    assert resolve_device("cpu", "float32") == (torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_device("cpu", "float16")
    with pytest.raises(ValueError, match="not a torch device"):
        resolve_device("banana", "float32")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda", "bfloat16")
