"""/translate's decoding fields over HTTP: beam search, n-best lists, prefixes, sampling and alignments."""

from __future__ import annotations

import asyncio

import pytest

from app.settings import BUNDLED_MODEL_DIR, Settings
from model.search import DecodingOptions, beam_search_reference
from tests.app.conftest import MODES, core_of, serve, served_in
from tests.app.helpers import SENTENCES, sse

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end


async def post(client, **body) -> dict:
    r = await client.post("/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["translations"]


async def test_beam_search_over_http_equals_the_reference_with_an_n_best_list(client, app):
    engine = app.state.engine
    for text in SENTENCES:
        (t,) = await post(client, text=text, beam_size=4, num_hypotheses=3, length_penalty=0.6, max_new_tokens=20,
                          return_tokens=True, return_scores=True)  # fmt: skip
        src = engine.tokenizer.encode(text, "source")
        ref = beam_search_reference(
            core_of(app).model, src, 20, DecodingOptions(beam_size=4, num_hypotheses=3, length_penalty=0.6)
        )
        assert [h["token_ids"] for h in t["hypotheses"]] == [h.tokens for h in ref]
        assert [h["score"] for h in t["hypotheses"]] == pytest.approx([h.score for h in ref], abs=1e-3)
        assert (t["text"], t["score"], t["token_ids"]) == (t["hypotheses"][0]["text"], t["hypotheses"][0]["score"],
                                                            t["hypotheses"][0]["token_ids"])  # fmt: skip


async def test_beam_size_1_is_the_greedy_answer(client):
    greedy = await post(client, text=SENTENCES, return_tokens=True, return_scores=True)
    assert await post(client, text=SENTENCES, beam_size=1, return_tokens=True, return_scores=True) == greedy
    assert all("hypotheses" not in t for t in greedy)


async def test_length_penalty_scores_greedy_and_sampled_translations_as_beams(client):
    """The score is the summed log-probabilities over length ** length_penalty however it was decoded (greedy and
    sampling left it out: their scores were always the mean)."""
    for kind in ({}, {"sampling_topk": 0, "seed": 4, "num_hypotheses": 2}, {"target_prefix": "Ein"}):
        body = {"text": SENTENCES[0], "return_scores": True, "max_new_tokens": 8, **kind}
        mean, summed, halved = [(await post(client, **body, length_penalty=p))[0] for p in (1.0, 0.0, 0.5)]
        n = (await post(client, **body, return_tokens=True))[0]
        steps = len(n["token_ids"]) + (n["finish_reason"] == "eos")
        assert summed["text"] == mean["text"] == halved["text"], kind
        assert summed["score"] == pytest.approx(mean["score"] * steps, abs=1e-3), kind
        assert halved["score"] == pytest.approx(mean["score"] * steps**0.5, abs=1e-3), kind


async def test_sampling_at_the_smallest_temperature_is_the_greedy_answer(client):
    """5e-324, the smallest positive float (found by the fuzzer): the scores do not overflow into a NaN, and the
    sample is the most likely token each step."""
    body = {"text": ["A man is riding a bike.", "Hi"], "return_tokens": True}
    greedy = (await client.post("/translate", json=body)).json()["translations"]
    for topk in (0, 5):
        sampled = {**body, "sampling_topk": topk, "sampling_temperature": 5e-324, "num_hypotheses": 2, "seed": 2}
        r = await client.post("/translate", json=sampled)
        assert r.status_code == 200, r.text
        for g, s in zip(greedy, r.json()["translations"], strict=True):
            assert [h["token_ids"] for h in s["hypotheses"]] == [g["token_ids"]] * 2


async def test_every_kind_of_request_in_one_busy_batch_equals_its_answer_alone(client):
    kinds = [
        {}, {"beam_size": 3, "num_hypotheses": 2}, {"beam_size": 2, "length_penalty": 0},
        {"sampling_topk": 8, "seed": 11, "num_hypotheses": 2}, {"target_prefix": SENTENCES[0][:6]},
        {"sampling_topk": 0, "sampling_temperature": 0.7, "seed": 5},
    ]  # fmt: skip
    requests = [{"text": SENTENCES[i % len(SENTENCES)], "max_new_tokens": 6 + i % 9, "return_tokens": True,
                 "return_scores": True, **kinds[i % len(kinds)]} for i in range(36)]  # fmt: skip
    alone = [await post(client, **r) for r in requests]
    together = await asyncio.gather(*(post(client, **r) for r in requests))
    assert together == alone


async def test_a_target_prefix_starts_the_translation(client, app):
    tok = app.state.engine.tokenizer
    forced = tok.encode("Zwei Hunde", "target", False)
    for kind in ({}, {"beam_size": 3}, {"sampling_topk": 5, "seed": 1}):
        (t,) = await post(client, text=SENTENCES[1], target_prefix="Zwei Hunde", return_tokens=True, **kind)
        assert t["token_ids"][: len(forced)] == forced and t["text"].startswith("Zwei Hunde")
    (plain,) = await post(client, text=SENTENCES[1], return_tokens=True, max_new_tokens=20)
    prefix = tok.decode(plain["token_ids"][:3])
    if tok.encode(prefix, "target", False) == plain["token_ids"][:3]:  # the prefix's text gives back its tokens
        (t,) = await post(client, text=SENTENCES[1], target_prefix=prefix, return_tokens=True, max_new_tokens=20)
        assert t["token_ids"] == plain["token_ids"]


async def test_a_target_prefix_ending_in_a_space_goes_on_with_a_word_of_its_own(client):
    """A prefix of a word and a space ("Zwei "): the translation goes on with a new word after one space, not the
    space as a token of its own and another before the next word."""
    for kind in ({}, {"beam_size": 3}, {"sampling_topk": 5, "seed": 1}, {"glossary": {"dog": "Hund"}, "beam_size": 2}):
        (t,) = await post(client, text=SENTENCES[1], target_prefix="Zwei ", return_tokens=True, **kind)
        assert t["text"].startswith("Zwei ") and "  " not in t["text"], (kind, t)
        assert t["tokens"][0] == "▁Zwei" and t["tokens"][1].startswith("▁"), (kind, t["tokens"])
    events = sse(await client.post("/translate", json={"text": SENTENCES[1], "target_prefix": "Zwei ", "stream": True}))
    assert events[-1]["text"].startswith("Zwei ") and "  " not in events[-1]["text"]


async def test_a_seed_gives_the_same_sample_and_a_stream_streams_it(client):
    body = {"text": SENTENCES[2], "sampling_topk": 0, "seed": 42, "return_tokens": True, "max_new_tokens": 15}
    first, again = await post(client, **body), await post(client, **body)
    assert first == again
    others = [await post(client, **{**body, "seed": s}) for s in range(5)]
    assert any(o != first for o in others)
    events = sse(await client.post("/translate", json={**body, "stream": True}))
    assert events[-1]["text"] == first[0]["text"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"beam_size": 0}, "beam_size: input should be greater than or equal to 1"),
        ({"beam_size": 9}, "beam_size: input should be less than or equal to 8"),
        ({"beam_size": 2, "num_hypotheses": 3}, "num_hypotheses must be between 1 and 2"),
        ({"num_hypotheses": 9}, "num_hypotheses: input should be less than or equal to 8"),
        ({"length_penalty": -1}, "length_penalty: input should be greater than or equal to 0"),
        ({"sampling_topk": -1}, "sampling_topk: input should be greater than or equal to 0"),
        ({"sampling_topk": 100000}, "sampling_topk must be between 0 (the whole vocabulary) and"),
        ({"sampling_temperature": 0}, "sampling_temperature: input should be greater than 0"),
        ({"seed": -3}, "seed: input should be greater than or equal to 0"),
        ({"sampling_topk": 5, "beam_size": 2}, "sampling_topk other than 1 needs beam_size 1"),
        ({"beam_size": 2, "stream": True}, "stream needs beam_size 1"),
        ({"return_alignment": True, "stream": True}, "got return_alignment (a stream's events carry tokens and text"),
        # sampling several: no beam search to blame (it said a beam search knows its best hypothesis only at its end)
        ({"num_hypotheses": 2, "sampling_topk": 0, "stream": True}, "got num_hypotheses (a stream carries one"),
        ({"target_prefix": "Ein Hund " * 20, "max_new_tokens": 5}, "target_prefix has"),
    ],
)  # fmt: skip
async def test_out_of_range_decoding_fields_get_a_422_that_says_what_is_allowed(client, body, message):
    r = await client.post("/translate", json={"text": SENTENCES[0], **body})
    assert r.status_code == 422, r.text
    assert r.json()["type"] == "validation_error" and message in r.json()["error"], r.json()


async def test_alignment_spans_lie_inside_both_texts(client):
    texts = [*SENTENCES, "A café, 42 years old — naïve!"]
    out = await post(client, text=texts, return_alignment=True, beam_size=2, num_hypotheses=2, return_tokens=True)
    for t, text in zip(out, texts):
        for hyp in t["hypotheses"]:
            assert len(hyp["alignment"]) == len(hyp["token_ids"])
            for a in hyp["alignment"]:
                assert 0 <= a["source_span"][0] <= a["source_span"][1] <= len(text)
                assert 0 <= a["target_span"][0] <= a["target_span"][1] <= len(hyp["text"])
        assert [a["target_token"] for a in t["alignment"]] == list(range(len(t["alignment"])))


async def test_alignments_come_from_the_decoding_without_a_second_pass(client, monkeypatch):
    """Each step's most attended source token is kept as the hypothesis is decoded: the alignment a teacher-forced
    pass over the tokens finds, at no pass's cost."""
    import app.engine.core as core
    import app.text.engine as engine

    texts = [*SENTENCES, "A café, 42 years old — naïve!"]
    body = {"text": texts, "return_alignment": True, "beam_size": 2, "num_hypotheses": 2}
    passes, real = [], core.alignments
    monkeypatch.setattr(core, "alignments", lambda *a: passes.append(a) or real(*a))
    with monkeypatch.context() as m:
        m.setattr(engine, "as_decoded", lambda hyps: None)  # as if the decoding kept none: the pass
        by_pass = await post(client, **body)
    assert len(passes) == 1
    assert await post(client, **body) == by_pass and len(passes) == 1


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_the_bundled_model_aligns_words_with_their_translations():
    pairs = {
        "A dog runs on the grass.": [("Hund", "dog"), ("Gras", "grass")],
        "Two young men are playing soccer in a park.": [
            ("Zwei", "Two"),
            ("junge", "young"),
            ("Männer", "men"),
            ("Park", "park"),
            ("Fußball", "soccer"),
        ],  # fmt: skip
        "A woman in a red dress is singing.": [("Frau", "woman"), ("roten", "red"), ("Kleid", "dress")],
    }
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, device="cpu")) as (_, client):
        out = await post(client, text=list(pairs), return_alignment=True)
    for (source, expected), t in zip(pairs.items(), out):
        links = {(t["text"][slice(*a["target_span"])], source[slice(*a["source_span"])]) for a in t["alignment"]}
        assert set(expected) <= links, (t["text"], sorted(links))
