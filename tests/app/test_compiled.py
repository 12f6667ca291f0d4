"""NMT_COMPILE and NMT_SCREEN_LOGITS serve the same translations as the plain eager model, through HTTP."""

import pytest
import torch

from app.settings import Settings
from tests.app.conftest import serve

pytestmark = pytest.mark.anyio
TEXTS = ["A man is riding a bike.", "Two girls are playing in the park.", "The cat sleeps.", "Hi", ""]


async def translate(settings: Settings, startup_timeout: float = 60) -> tuple[dict, list[dict]]:
    async with serve(settings, startup_timeout) as (_, client):
        info = (await client.get("/info")).json()
        r = await client.post("/translate", json={"text": TEXTS, "return_scores": True})
        assert r.status_code == 200, r.text
        stream = await client.post("/translate", json={"text": TEXTS[0], "stream": True})
        assert stream.status_code == 200 and TEXTS and r.json()["translations"][0]["text"] in stream.text
        return info, r.json()["translations"]


async def test_compiled_server_translates_exactly_like_the_eager_one(trained_checkpoint, pairs):
    # One row at a time: a single compiled graph of the step keeps the warm-up short.
    base = dict(model_dir=trained_checkpoint, max_new_tokens=30, max_input_tokens=32, max_batch_size=1)
    info, compiled = await translate(Settings(**base, compile=True), startup_timeout=600)
    eager_info, eager = await translate(Settings(**base, compile=False))
    assert info["compiled"] is True and eager_info["compiled"] is False
    assert [t["text"] for t in compiled] == [t["text"] for t in eager]
    assert [t["score"] for t in compiled] == pytest.approx([t["score"] for t in eager], abs=1e-4)


async def test_a_screened_server_translates_exactly_like_a_float32_one(trained_checkpoint):
    """NMT_SCREEN_LOGITS (model/screen.py) changes no token; on a CPU without bfloat16 matmuls it stays off."""
    from model.screen import supported

    base = dict(model_dir=trained_checkpoint, max_new_tokens=30, max_input_tokens=32, max_batch_size=8, compile=False)
    info, screened = await translate(Settings(**base, screen_logits=True))
    plain_info, plain = await translate(Settings(**base, screen_logits=False))
    assert plain_info["screened_logits"] is False
    assert info["screened_logits"] is supported(torch.zeros(1))
    assert [t["text"] for t in screened] == [t["text"] for t in plain]
    assert [t["score"] for t in screened] == pytest.approx([t["score"] for t in plain], abs=1e-2)
