"""Every endpoint answers as documented, in-process over the ASGI transport on the tiny checkpoint."""

from __future__ import annotations

import asyncio

import jsonschema
import pytest
import torch

from app.settings import Settings
from model.evaluate import translate_corpus
from tests.app.conftest import MODES, StepGate, core_of, serve, served_in
from tests.app.helpers import (
    SENTENCES,
    assert_attention_of_the_served_translation,
    assert_stream_matches,
    sse,
    stream_and_plain,
    until,
)

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end


async def test_health_and_ready(app, client):
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).json() == {"status": "ready", "models": {app.state.engine.name: "ready"}}
    for path in ("/health", "/ready"):  # as load balancers' probes may ask (it was a 405)
        r = await client.head(path)
        assert r.status_code == 200 and r.content == b"", (path, r.status_code)


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
    assert info["device_name"].strip()  # the CPU model here; the GPU's name on CUDA
    assert info["limits"]["max_input_tokens"] == settings.max_input_tokens
    assert info["limits"]["max_batch_texts"] == settings.max_batch_texts
    assert info["limits"]["max_queue"] == (settings.max_queue or 256)
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
    assert set(t) == {"text", "finish_reason", "truncated", "confidence", "flags"}
    short = (
        await client.post("/translate", json={"text": SENTENCES[0], "max_new_tokens": 3, "return_tokens": True})
    ).json()
    assert len(short["translations"][0]["token_ids"]) <= 3 and short["usage"]["output_tokens"] <= 3


async def test_empty_text_translates_to_empty_without_a_model_call(client, app):
    steps = core_of(app).batcher.steps
    body = (await client.post("/translate", json={"text": ["", "  "]})).json()
    assert [t["text"] for t in body["translations"]] == ["", ""]
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert core_of(app).batcher.steps == steps


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


async def test_64_concurrent_requests_are_all_admitted_batched_and_equal_to_alone(client, app):
    texts = [*SENTENCES, "A café, 42 years old — naïve!", "Hi", "The boy is jumping at the beach near the water."]
    requests = [{"text": texts[i % len(texts)], "max_new_tokens": 2 + 5 * (i % 8)} for i in range(56)]
    requests += [{"text": texts[i % 3 : i % 3 + 3]} for i in range(4)]  # several texts per request
    requests += [{"text": t} for t in texts[:4]]  # the default budget: 2 x source tokens + 10
    assert len(requests) == 64
    alone = [(await client.post("/translate", json=r)).json()["translations"] for r in requests]
    core_of(app).batcher.peak_rows = 0
    together = await asyncio.gather(*(client.post("/translate", json=r) for r in requests))
    assert [r.status_code for r in together] == [200] * 64
    # the same translations; their confidence within rounding (a batch's sums run in another order)
    batched = [r.json()["translations"] for r in together]
    confidences = [[t.pop("confidence") for t in r] for r in alone]
    assert [[t.pop("confidence") for t in r] for r in batched] == [pytest.approx(c, abs=1.5e-3) for c in confidences]
    assert batched == alone
    assert core_of(app).batcher.peak_rows > 1


LONG = {"text": "Two girls are playing in the park.", "max_new_tokens": 40, "return_tokens": True}


async def test_a_short_request_joins_a_long_one_mid_decode_and_leaves_first(client, app, monkeypatch):
    alone = (await client.post("/translate", json=LONG)).json()
    assert alone["translations"][0]["finish_reason"] == "length"  # the random model does not stop early
    gate, batcher = StepGate(core_of(app).model, monkeypatch), core_of(app).batcher
    gate.hold(lambda sizes: len(sizes) == 5)  # the long one is 5 tokens in
    long = asyncio.create_task(client.post("/translate", json=LONG))
    try:
        await until(gate.paused.is_set)
        gate.hold(lambda sizes: sizes[-1] == 1 and 2 in sizes)  # hold the long one again once the short one left
        short = asyncio.create_task(client.post("/translate", json={"text": "A dog.", "max_new_tokens": 2}))
        await until(lambda: batcher.load == 2)
        gate.release()
        assert (await short).status_code == 200
        await until(gate.paused.is_set)  # the long one is held at its next step
        assert not long.done()
    finally:
        gate.hold(None)
        gate.release()
    assert (await long).json() == alone
    joined, together = gate.sizes.index(2), gate.sizes.count(2)  # the short one decoded 1 or 2 steps in the batch
    assert joined >= 5 and together in (1, 2)
    assert gate.sizes == [1] * joined + [2] * together + [1] * (40 - joined - together)  # then the long one went on


async def test_a_stream_sends_each_token_then_the_plain_translation_byte_pieces_included(client, tokenizer):
    pieces = []
    for text in [*SENTENCES, "A café, 42 years old — naïve!", "Zwei Männer!"]:
        events, plain = await stream_and_plain(client, {"text": text})
        assert_stream_matches(events, plain)
        pieces += [tokenizer.id_to_token(e["token"]["id"]) for e in events[:-1]]
    assert any(p.startswith("<0x") for p in pieces)  # the random model emits byte-fallback pieces


async def test_a_character_of_bytes_that_ends_the_translation_is_streamed_and_aligned_with_its_last_byte(client):
    """It came only in the final event (the tokens' texts added up to "Ein " for "Ein ❤"), and no token's span held it."""
    for seed in range(100):  # a draw that the budget ends on a byte-fallback piece
        body = {"text": "A heart.", "max_new_tokens": 6, "sampling_topk": 0, "seed": seed}
        plain = (await client.post("/translate", json={**body, "return_tokens": True})).json()["translations"][0]
        if plain["tokens"][-1].startswith("<0x") and not plain["tokens"][-2].startswith("<0x"):
            break
    else:
        pytest.fail("no draw ended on a byte")
    events, plain = await stream_and_plain(client, body)
    assert_stream_matches(events, plain)
    text = plain["translations"][0]["text"]
    assert events[-2]["text_so_far"] == events[-1]["text"] == text and events[-2]["token"]["text"] != ""
    aligned = await client.post("/translate", json={**body, "return_alignment": True})
    spans = [a["target_span"] for a in aligned.json()["translations"][0]["alignment"]]
    assert spans[-1][1] == len(text) > spans[-1][0] and spans[-2][1] < len(text)  # its character: the byte's own


async def test_a_stream_on_a_trained_model_ends_at_eos_with_the_plain_translation(trained_checkpoint, pairs):
    async with serve(Settings(model_dir=trained_checkpoint, max_new_tokens=60)) as (_, client):
        finishes = []
        for en, _ in pairs[:6]:
            events, plain = await stream_and_plain(client, {"text": en})
            assert_stream_matches(events, plain)
            finishes.append(events[-1]["finish_reason"])
    assert "eos" in finishes


async def test_a_stream_can_carry_the_score_and_a_blank_text_streams_only_the_end(client):
    plain = (await client.post("/translate", json={"text": SENTENCES[0], "return_scores": True})).json()
    events = sse(await client.post("/translate", json={"text": SENTENCES[0], "stream": True, "return_scores": True}))
    assert events[-1]["score"] == plain["translations"][0]["score"]
    blank = (await client.post("/translate", json={"text": " "})).json()
    assert sse(await client.post("/translate", json={"text": " ", "stream": True})) == [
        {"text": "", "finish_reason": "eos", "usage": {"input_tokens": 0, "output_tokens": 0}, "truncated": False,
         "calibrated": False, "flags": []}  # as the JSON answer has them: no confidence, no flag
    ]  # fmt: skip
    assert "confidence" not in blank["translations"][0] and blank["translations"][0]["flags"] == []
    scored = {"text": " ", "return_scores": True}  # the score too, as the JSON answer has it
    (end,) = sse(await client.post("/translate", json={**scored, "stream": True}))
    assert end["score"] == (await client.post("/translate", json=scored)).json()["translations"][0]["score"] == 0.0


async def test_a_text_or_sentence_without_a_letter_comes_back_as_written_on_every_path(client):
    """A number, a date, a price, symbols: kept as written, not given to the model (which writes words in their place),
    whole or as a sentence of a text, plain or streamed, protected spans or not, in HTML too."""
    kept = ["42", "1,299.00", "2024-01-01", "♪♪", "--", "]>", "3. 4."]
    r = await client.post("/translate", json={"text": kept, "return_scores": True, "return_tokens": True})
    assert [t["text"] for t in r.json()["translations"]] == kept
    assert all(t["token_ids"] == [] and "confidence" not in t for t in r.json()["translations"])
    for protect in (False, True):
        body = {"text": "A dog runs. 42.", "protect": protect}
        plain = (await client.post("/translate", json=body)).json()["translations"][0]["text"]
        assert plain.endswith(" 42.") and len(plain) > len(" 42."), plain
        assert sse(await client.post("/translate", json={**body, "stream": True}))[-1]["text"] == plain
        for text in ("42", "{n} 42") if protect else ("42",):  # the whole text, spans and all
            streamed = sse(await client.post("/translate", json={"text": text, "stream": True, "protect": protect}))
            assert streamed[-1]["text"] == text
    page = (await client.post("/translate", json={"text": "<p>1,299.00 <b>€</b></p>", "format": "html"})).json()
    assert page["translations"][0]["text"] == "<p>1,299.00 <b>€</b></p>"
    # its words stay where they were: a sentence kept as written took the alignment of its text's others with it, and
    # the inline tags went anywhere ("<p><b>1. Ein Hund rennt.</b></p>")
    page = (await client.post("/translate", json={"text": "<p><b>1.</b> A dog runs.</p>", "format": "html"})).json()
    assert (
        page["translations"][0]["text"].startswith("<p><b>1.</b> ")
        and page["translations"][0]["text"].count("<b>") == 1
    )
    # an n-best list: each of its hypotheses has the sentence as written (a text with one had no list at all)
    for decoding in ({"beam_size": 3}, {"sampling_topk": 0, "seed": 1}):
        body = {"text": ["A dog runs. 42.", "A dog runs.\n--\nA cat."], "num_hypotheses": 3, **decoding}
        for t in (await client.post("/translate", json=body)).json()["translations"]:
            assert len(t["hypotheses"]) == 3 and t["hypotheses"][0]["text"] == t["text"], (decoding, t)
            assert all(h["text"].endswith(" 42.") or "\n--\n" in h["text"] for h in t["hypotheses"]), t
    body = {"text": ["A dog runs. 42.", "42"], "return_alignment": True, "return_word_confidence": True}
    aligned, kept = (await client.post("/translate", json=body)).json()["translations"]
    assert aligned["alignment"] and all(a["source_span"][1] <= len("A dog runs.") for a in aligned["alignment"])
    assert (kept["alignment"], kept["words"]) == ([], [])  # asked for, and none
    # a glossary's term in it is still written in (it came back "42": no model sees it)
    body = {"text": ["42", "A dog runs. 42.", "42 / 43"], "glossary": {"42": "zweiundvierzig"}}
    termed = [t["text"] for t in (await client.post("/translate", json=body)).json()["translations"]]
    assert (
        termed[0] == "zweiundvierzig" and termed[1].endswith(" zweiundvierzig.") and termed[2] == "zweiundvierzig / 43"
    )
    for text in ("42", "A dog runs. 42.", "A dog runs. 42", "A dog runs. 42. 43 \n"):
        streamed = sse(await client.post("/translate", json={**body, "text": text, "stream": True}))
        assert streamed[-1]["text"].endswith(("zweiundvierzig", "zweiundvierzig.", "43 \n")), streamed[-1]
        # the tokens add up to it: a term in what follows the last sentence the model translates came as written
        if text != "42":  # (a text no model sees has no token events)
            tokens = "".join(e["token"]["text"] for e in streamed[:-1])
            assert tokens == streamed[-2]["text_so_far"] == streamed[-1]["text"]


@pytest.mark.parametrize("protect", [False, True])
async def test_a_streams_tokens_add_up_to_its_final_text_trailing_whitespace_included(client, protect):
    """The text after the last sentence goes with the last token, protected spans or not (it once came only in the
    final event unless `protect` was on)."""
    for text in ("A dog runs.\n", "A dog runs.  \n\n", "A dog runs. A cat sits.\n", "  A dog runs."):
        events = sse(await client.post("/translate", json={"text": text, "stream": True, "protect": protect}))
        assert "".join(e["token"]["text"] for e in events[:-1]) == events[-1]["text"], (text, events)
        assert events[-2]["text_so_far"] == events[-1]["text"]


async def test_a_stream_of_a_list_is_refused(client):
    r = await client.post("/translate", json={"text": ["A dog.", "A cat."], "stream": True})
    body = r.json()
    assert (r.status_code, body["type"]) == (422, "validation_error")
    assert "stream needs a single text, got a list of 2" in body["error"]


@pytest.mark.parametrize("field", ["return_signals", "return_segments"])
async def test_a_stream_asked_for_what_its_events_do_not_carry_is_refused(client, field):
    """As return_alignment is: a field the stream would ignore (it once did) is a 422 saying so."""
    r = await client.post("/translate", json={"text": "A dog.", "stream": True, field: True})
    body = r.json()
    assert (r.status_code, body["type"]) == (422, "validation_error"), r.text
    assert f"stream gives no {field.removeprefix('return_')}" in body["error"]


async def test_attention_shapes_rows_and_tokens(client, tiny_model, tokenizer):
    await assert_attention_of_the_served_translation(client, tiny_model.config, tokenizer, SENTENCES[0])


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


async def test_attention_of_a_blank_text_translates_nothing_as_translate_does(client):
    """Zero-width spaces and direction marks are whitespace to /translate; /attention once had the model make up a
    translation of them."""
    empty = (await client.post("/attention", json={"text": ""})).json()
    assert empty["encoder_tokens"] == ["</s>"]
    for text in ("\u200b\u200b", "\u200e \ufeff", "  "):
        body = (await client.post("/attention", json={"text": text})).json()
        translated = (await client.post("/translate", json={"text": text})).json()["translations"][0]["text"]
        assert body["translation"] == "" and len(body["decoder_tokens"]) == 1, (text, body)  # the start token alone
        assert translated == ""
        assert body == empty, text  # read without its blank, as /translate reads it: it once had "▁" tokens of them


async def test_attention_of_a_text_without_a_letter_is_of_the_text_as_translate_gives_it(client, settings, tokenizer):
    """/translate gives back a number or an emoji as written, not given to the model; /attention once showed the model
    writing words in its place ("Zwei 24.") beside it. Its default target is /translate's: the text itself."""
    for text in ("42", " 1,299.00\n", "\U0001f600", "\u266a\u266a"):
        body = (await client.post("/attention", json={"text": text})).json()
        translated = (await client.post("/translate", json={"text": text})).json()["translations"][0]["text"]
        forced = (await client.post("/attention", json={"text": text, "target": text.strip()})).json()
        assert body["translation"] == translated.strip() == text.strip() and body == forced, (text, body["translation"])
        pieces = [tokenizer.id_to_token(i) for i in tokenizer.encode(text.strip(), side="target")[:-1]]
        assert body["decoder_tokens"] == pieces, text  # the start token and the text's pieces, as the docs say
    long = " ".join(map(str, range(20)))  # within NMT_MAX_INPUT_TOKENS, over NMT_MAX_NEW_TOKENS: cut as a translation
    body = (await client.post("/attention", json={"text": long})).json()
    assert len(body["decoder_tokens"]) == 1 + settings.max_new_tokens and long.startswith(body["translation"]), body


async def test_attention_is_of_the_translation_translate_gives_whatever_the_text_s_ends(client):
    """Outer whitespace and invisible characters are not the model's to read in /translate; /attention once read them
    and showed the attention of another translation (the viewer's heatmap beside /translate's text)."""
    for text in (SENTENCES[0] + "\n", "\u200b" + SENTENCES[0], "\t\ufeff" + SENTENCES[0] + "\u200b  "):
        body = (await client.post("/attention", json={"text": text})).json()
        plain = (await client.post("/attention", json={"text": SENTENCES[0]})).json()
        translated = (await client.post("/translate", json={"text": text})).json()["translations"][0]["text"]
        alone = (await client.post("/translate", json={"text": SENTENCES[0]})).json()["translations"][0]["text"]
        assert body == plain and body["translation"] == alone and alone in translated, (text, body["translation"])
    r = await client.post("/attention", json={"text": "a" * 20_001})
    assert r.status_code == 413 and "20001 characters" in r.json()["error"], r.text  # before it is tokenized


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


async def test_openapi_describes_the_events_a_stream_sends(client):
    spec = (await client.get("/openapi.json")).json()
    content = spec["paths"]["/translate"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    schema = content["schema"]["properties"]["data"]["contentSchema"]
    assert {"TokenEvent", "EndEvent", "ErrorEvent"} <= set(schema["$defs"])
    body = {"text": f"{SENTENCES[0]} {SENTENCES[1]}", "stream": True, "return_scores": True, "min_confidence": 1.0}
    events = sse(await client.post("/translate", json=body))
    assert {"score", "withheld", "confidence", "flags"} <= set(events[-1])  # every optional field of the last event
    for event in events:
        jsonschema.validate(event, schema)
    with pytest.raises(jsonschema.ValidationError):  # the schema binds: a field it does not name is refused
        jsonschema.validate({**events[0], "logprob": -0.1}, schema)


async def test_model_work_runs_on_the_configured_number_of_threads(settings):
    async with serve(settings.model_copy(update={"threads": 1})) as (app, client):
        info = (await client.get("/info")).json()
        engine = app.state.engine
        assert info["threads"] == 1
        assert await engine.core.batcher.call(torch.get_num_threads) == 1
        r = await client.post("/translate", json={"text": "A dog runs."})
        assert r.status_code == 200
    async with serve(settings.model_copy(update={"threads": 2})) as (app, client):
        assert (await client.get("/info")).json()["threads"] == 2
        assert await app.state.engine.core.batcher.call(torch.get_num_threads) == 2


async def test_min_confidence_leaves_out_the_alternatives_below_it(client):
    """They stayed in `hypotheses` (and LibreTranslate's `alternatives`) whatever their confidence."""
    body = {"text": "A man is riding a bike.", "beam_size": 4, "num_hypotheses": 4}
    (t,) = (await client.post("/translate", json=body)).json()["translations"]
    others = sorted(h["confidence"] for h in t["hypotheses"][1:])
    assert len(others) == 3 and others[0] < others[-1] and t["confidence"] > others[0], t  # something to leave out
    floor = (others[0] + min(others[1], t["confidence"])) / 2
    (kept,) = (await client.post("/translate", json={**body, "min_confidence": floor})).json()["translations"]
    assert kept["text"] == t["text"] and "withheld" not in kept, kept
    assert [h["text"] for h in kept["hypotheses"]] == [h["text"] for h in t["hypotheses"] if h["confidence"] >= floor]
