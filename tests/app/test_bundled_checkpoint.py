"""The bundled checkpoint, served, translates simple sentences into recognisable German."""

from __future__ import annotations

import pytest
import sacrebleu

from app.settings import BUNDLED_MODEL_DIR, Settings
from tests.app.conftest import serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint yet"),
]
PAIRS = [
    ("A man is riding a bike.", "Ein Mann fährt Fahrrad."),
    ("Two dogs are playing in the snow.", "Zwei Hunde spielen im Schnee."),
    ("A woman is sitting on a bench.", "Eine Frau sitzt auf einer Bank."),
    ("A little girl is eating an apple.", "Ein kleines Mädchen isst einen Apfel."),
    ("Three men are standing on the street.", "Drei Männer stehen auf der Straße."),
]


async def test_bundled_checkpoint_translates_sensibly():
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, device="cpu")) as (_, client):
        r = await client.post("/translate", json={"text": [en for en, _ in PAIRS]})
        assert r.status_code == 200, r.text
        hyps = [t["text"] for t in r.json()["translations"]]
        chrf = sacrebleu.corpus_chrf(hyps, [[de for _, de in PAIRS]]).score
        assert chrf >= 40, f"chrF {chrf:.1f}: {hyps}"
        assert all(t["finish_reason"] == "eos" for t in r.json()["translations"])
