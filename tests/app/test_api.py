"""Every endpoint answers as documented, in-process over the ASGI transport on the tiny checkpoint."""

from __future__ import annotations

import asyncio

import pytest

from model.evaluate import translate_corpus

pytestmark = pytest.mark.anyio
SENTENCES = [
    "A man is riding a bike.",
    "Two girls are playing in the park.",
    "The cat sleeps.",
    "A dog runs near the water.",
]


async def test_health_and_ready(client):
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).json() == {"status": "ready"}


async def test_info_describes_model_device_and_limits(client, settings, tiny_model):
    info = (await client.get("/info")).json()
    assert info["model"] == "tiny"
    assert info["parameters"] == tiny_model.num_parameters()
    assert info["config"]["d_model"] == tiny_model.config.d_model
    assert info["vocab_size"] == {
        "source": tiny_model.config.src_vocab_size,
        "target": tiny_model.config.tgt_vocab_size,
    }
    assert (info["device"], info["dtype"]) == ("cpu", "float32")
    assert info["limits"]["max_input_tokens"] == settings.max_input_tokens
    assert info["limits"]["max_batch_texts"] == settings.max_batch_texts
    assert info["version"]


async def test_tokenize_gives_ids_pieces_and_offsets_per_text(client, tokenizer):
    texts = ["A man is riding a bike.", "Zwei Männer!"]
    r = await client.post("/tokenize", json={"text": texts})
    results = r.json()["results"]
    assert len(results) == 2
    for text, result in zip(texts, results):
        tokens = result["tokens"]
        assert result["count"] == len(tokens)
        assert [t["id"] for t in tokens] == tokenizer.encode(text)
        assert tokens[-1] == {
            "id": tokenizer.eos_id,
            "text": "</s>",
            "start": len(text),
            "end": len(text),
            "special": True,
        }
        starts = [t["start"] for t in tokens[:-1]]
        assert starts == sorted(starts) and all(0 <= t["start"] < t["end"] <= len(text) for t in tokens[:-1])
        for t in tokens[:-1]:
            if not t["text"].startswith("<0x"):  # byte pieces cover part of a character
                assert text[t["start"] : t["end"]].strip() == t["text"].replace("▁", " ").strip()


async def test_tokenize_target_side_and_without_specials(client, tokenizer):
    target = (await client.post("/tokenize", json={"text": "Ein Hund.", "side": "target"})).json()["results"][0]
    assert target["tokens"][0] == {"id": tokenizer.bos_id, "text": "<s>", "start": 0, "end": 0, "special": True}
    bare = (await client.post("/tokenize", json={"text": "Ein Hund.", "add_special_tokens": False})).json()
    assert [t["id"] for t in bare["results"][0]["tokens"]] == tokenizer.encode("Ein Hund.", add_special_tokens=False)


async def test_detokenize_round_trips_one_or_many_sequences(client, tokenizer):
    ids = [tokenizer.encode(t, side="target") for t in ("Ein Mann fährt.", "Zwei Hunde spielen im Schnee.")]
    many = (await client.post("/detokenize", json={"ids": ids})).json()
    assert many == {"results": [{"text": "Ein Mann fährt."}, {"text": "Zwei Hunde spielen im Schnee."}]}
    one = (await client.post("/detokenize", json={"ids": ids[0], "skip_special_tokens": False})).json()
    assert one["results"][0]["text"].startswith("<s>")


async def test_translate_batch_with_tokens_scores_and_usage(client, tokenizer):
    r = await client.post("/translate", json={"text": SENTENCES[:2], "return_tokens": True, "return_scores": True})
    body = r.json()
    assert r.status_code == 200 and body["model"] == "tiny"
    assert len(body["translations"]) == 2
    for t in body["translations"]:
        assert t["finish_reason"] in ("eos", "length")
        assert tokenizer.decode(t["token_ids"]) == t["text"]
        assert t["tokens"] == [tokenizer.id_to_token(i) for i in t["token_ids"]]
        assert t["score"] <= 0
    steps = [len(t["token_ids"]) + (t["finish_reason"] == "eos") for t in body["translations"]]
    assert body["usage"] == {
        "input_tokens": sum(len(tokenizer.encode(s)) for s in SENTENCES[:2]),
        "output_tokens": sum(steps),
    }


async def test_translate_plain_has_no_optional_fields_and_respects_max_new_tokens(client):
    t = (await client.post("/translate", json={"text": SENTENCES[0], "max_new_tokens": 3})).json()["translations"][0]
    assert set(t) == {"text", "finish_reason", "truncated"}
    short = (
        await client.post("/translate", json={"text": SENTENCES[0], "max_new_tokens": 3, "return_tokens": True})
    ).json()
    assert len(short["translations"][0]["token_ids"]) <= 3 and short["usage"]["output_tokens"] <= 3


async def test_empty_text_translates_to_empty_without_a_model_call(client, app):
    steps = app.state.engine.batcher.steps
    body = (await client.post("/translate", json={"text": ["", "  "]})).json()
    assert [t["text"] for t in body["translations"]] == ["", ""]
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert app.state.engine.batcher.steps == steps


async def test_translate_equals_nmt_eval(client, tiny_checkpoint):
    from model.checkpoint import load_checkpoint

    model, tokenizer, _ = load_checkpoint(tiny_checkpoint)
    for sentence in SENTENCES[:2]:
        (expected,) = translate_corpus(model, tokenizer, [sentence])
        served = (await client.post("/translate", json={"text": sentence})).json()["translations"][0]["text"]
        assert served == expected


async def test_truncate_cuts_long_texts_to_the_limit(client, settings):
    long = "a man " * 100
    body = (
        await client.post("/translate", json={"text": [long, "A dog."], "truncate": True, "max_new_tokens": 2})
    ).json()
    assert [t["truncated"] for t in body["translations"]] == [True, False]
    assert body["usage"]["input_tokens"] == settings.max_input_tokens + len(await tokens_of(client, "A dog."))


async def tokens_of(client, text: str) -> list[int]:
    return [t["id"] for t in (await client.post("/tokenize", json={"text": text})).json()["results"][0]["tokens"]]


async def test_concurrent_requests_are_batched_and_equal_to_alone(client, app):
    requests = [{"text": s, "max_new_tokens": 10 + 7 * i} for i, s in enumerate(SENTENCES)] * 3
    requests += [{"text": SENTENCES[:3]}, {"text": SENTENCES[1:]}]
    alone = [(await client.post("/translate", json=r)).json()["translations"] for r in requests]
    app.state.engine.batcher.peak_rows = 0
    together = await asyncio.gather(*(client.post("/translate", json=r) for r in requests))
    assert [r.json()["translations"] for r in together] == alone
    assert app.state.engine.batcher.peak_rows > 1


async def test_attention_shapes_rows_and_tokens(client, tiny_model, tokenizer):
    c = tiny_model.config
    body = (await client.post("/attention", json={"text": SENTENCES[0]})).json()
    S, T = len(body["encoder_tokens"]), len(body["decoder_tokens"])
    assert body["encoder_tokens"] == [tokenizer.id_to_token(i) for i in tokenizer.encode(SENTENCES[0])]
    assert body["decoder_tokens"][0] == "<s>" and "</s>" not in body["decoder_tokens"]
    served = (await client.post("/translate", json={"text": SENTENCES[0]})).json()["translations"][0]["text"]
    assert body["translation"] == served
    for key, (L, Q, K) in {
        "encoder_attention": (c.n_encoder_layers, S, S),
        "decoder_attention": (c.n_decoder_layers, T, T),
        "cross_attention": (c.n_decoder_layers, T, S),
    }.items():
        w = body[key]
        assert (len(w), len(w[0]), len(w[0][0]), len(w[0][0][0])) == (L, c.n_heads, Q, K)
        for layer in w:
            for head in layer:
                assert all(abs(sum(row) - 1) < 1e-3 for row in head)
    future = body["decoder_attention"][0][0][0][1:]
    assert all(x == 0 for x in future)  # <s> cannot see later tokens


async def test_attention_teacher_forces_target_and_selects_layers_heads(client, tokenizer):
    target = "Ein Mann fährt Fahrrad."
    body = (
        await client.post("/attention", json={"text": SENTENCES[0], "target": target, "layers": [1], "heads": [3, 0]})
    ).json()
    pieces = [tokenizer.id_to_token(i) for i in tokenizer.encode(target, side="target")[:-1]]
    assert body["decoder_tokens"] == pieces and body["translation"] == target
    assert (body["layers"], body["heads"]) == ([1], [3, 0])
    assert len(body["cross_attention"]) == 1 and len(body["cross_attention"][0]) == 2
    full = (await client.post("/attention", json={"text": SENTENCES[0], "target": target})).json()
    assert body["cross_attention"][0][0] == full["cross_attention"][1][3]
    avg = (await client.post("/attention", json={"text": SENTENCES[0], "target": target, "average_heads": True})).json()
    assert [len(layer) for layer in avg["encoder_attention"]] == [1, 1]
    expected = sum(full["encoder_attention"][0][h][0][0] for h in range(4)) / 4
    assert avg["encoder_attention"][0][0][0][0] == pytest.approx(expected, abs=1e-3)


async def test_attention_is_accepted_by_bertviz(client):
    bertviz = pytest.importorskip("bertviz")
    torch = pytest.importorskip("torch")
    body = (await client.post("/attention", json={"text": SENTENCES[1]})).json()
    views = {
        k: [torch.tensor(layer)[None] for layer in body[k]]  # L x (1, H, Q, K)
        for k in ("encoder_attention", "decoder_attention", "cross_attention")
    }
    tokens = {"encoder_tokens": body["encoder_tokens"], "decoder_tokens": body["decoder_tokens"]}
    for view in (bertviz.head_view, bertviz.model_view):
        html = view(**views, **tokens, html_action="return")
        assert "bertviz" in html.data


async def test_openapi_lists_every_endpoint(client):
    spec = (await client.get("/openapi.json")).json()
    paths = {(p, m) for p, ops in spec["paths"].items() for m in ops}
    assert paths >= {
        ("/health", "get"), ("/ready", "get"), ("/info", "get"), ("/tokenize", "post"),
        ("/detokenize", "post"), ("/translate", "post"), ("/attention", "post"),
    }  # fmt: skip
    assert (await client.get("/docs")).status_code == 200
