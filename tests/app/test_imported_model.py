"""An imported Marian model served over HTTP: every endpoint works with it, and answers as transformers does."""

from __future__ import annotations

import json

import pytest

from app.settings import Settings
from tests.app.conftest import MODES, serve_in

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.anyio
TEXTS = ["A man in a blue shirt is riding a bicycle.", "Two dogs play in the snow.", "A café, 42 years old — naïve!"]


@pytest.fixture(scope="module")
def hf(marian_models):
    hf_dir, _ = marian_models["separate"]
    model = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    return model, transformers.MarianTokenizer.from_pretrained(hf_dir)


@pytest.fixture(scope="module", params=MODES)
async def client(marian_models, request):
    settings = Settings(model_dir=marian_models["separate"][1], compile=False, max_new_tokens=40, max_input_tokens=64)
    async with serve_in(request.param, settings) as (_, client):
        yield client


async def test_translations_are_transformers_greedy_ones(client, hf):
    import torch

    model, tok = hf
    r = await client.post("/translate", json={"text": TEXTS, "max_new_tokens": 20, "return_tokens": True})
    assert r.status_code == 200, r.text
    for text, out in zip(TEXTS, r.json()["translations"]):
        with torch.no_grad():
            ids = model.generate(torch.tensor([tok(text).input_ids]), num_beams=1, do_sample=False, max_new_tokens=20)
        expected = [i for i in ids[0].tolist()[1:] if i != model.config.eos_token_id]
        assert out["token_ids"] == expected
        assert out["text"] == tok.decode(expected, skip_special_tokens=True)
        assert out["tokens"] == tok.convert_ids_to_tokens(expected)


async def test_a_stream_ends_with_the_same_text_and_its_pieces_add_up(client):
    plain = (await client.post("/translate", json={"text": TEXTS[0], "max_new_tokens": 20})).json()
    async with client.stream("POST", "/translate", json={"text": TEXTS[0], "max_new_tokens": 20, "stream": True}) as r:
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["text"] == plain["translations"][0]["text"]
    assert "".join(e["token"]["text"] for e in events[:-1]) == events[-2]["text_so_far"] == events[-1]["text"]


async def test_tokenize_and_detokenize_use_the_model_s_own_vocabularies(client, hf):
    _, tok = hf
    r = await client.post("/tokenize", json={"text": TEXTS, "side": "source"})
    for text, result in zip(TEXTS, r.json()["results"]):
        assert [t["id"] for t in result["tokens"]] == tok(text).input_ids
        for t in result["tokens"][:-1]:  # each piece covers its own characters (▁ is the space before a word)
            assert t["text"].lstrip("▁") in (text[t["start"] : t["end"]], "<unk>") or t["text"] == "▁"
    r = await client.post("/tokenize", json={"text": "Zwei Hunde spielen im Schnee.", "side": "target"})
    target = tok(text_target="Zwei Hunde spielen im Schnee.").input_ids
    assert [t["id"] for t in r.json()["results"][0]["tokens"]] == target
    r = await client.post("/detokenize", json={"ids": [target]})
    assert r.json()["results"][0]["text"] == tok.decode(target, skip_special_tokens=True)
    # source ids (a vocabulary of their own here) decode with the source vocabulary and SentencePiece model
    r = await client.post("/detokenize", json={"ids": tok(TEXTS[:2]).input_ids, "side": "source"})
    assert [x["text"] for x in r.json()["results"]] == TEXTS[:2]


async def test_attention_and_info_describe_the_imported_model(client, marian_models):
    r = await client.post("/attention", json={"text": TEXTS[1]})
    a = r.json()
    assert r.status_code == 200 and a["decoder_tokens"][0] == "<pad>"  # Marian's decoder starts from <pad>
    layers, heads = len(a["cross_attention"]), len(a["cross_attention"][0])
    assert (layers, heads) == (2, 4)
    assert len(a["cross_attention"][0][0]) == len(a["decoder_tokens"])
    assert len(a["cross_attention"][0][0][0]) == len(a["encoder_tokens"])
    info = (await client.get("/info")).json()
    assert info["languages"] == {"source": "en", "target": "de"}
    assert info["metadata"]["architecture"] == "marian"
    assert info["metadata"]["imported_from"]["path"] == str(marian_models["separate"][0])
    assert info["config"]["positions"] == "halves"
