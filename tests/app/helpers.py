"""Helpers the app tests share: sentences to translate, waiting for a condition, a slow model, and what a response
must look like (its stream, its error, its metrics)."""

from __future__ import annotations

import asyncio
import copy
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.fastpath import FastTranslate
from app.schemas.stream import STREAM_EVENT

TEXTS = [
    "A man is riding a bike.", "Two girls are playing in the park.", "The cat sleeps.", "A dog runs near the water.",
    "An old man is standing in the snow.", "Three people eat.", "Hi", "The boy is jumping at the beach near the water.",
]  # fmt: skip

SENTENCES = [
    "A man is riding a bike.",
    "Two girls are playing in the park.",
    "The cat sleeps.",
    "A dog runs near the water.",
]


def slow(tiny_model, seconds: float = 0.002):
    """A copy of the tiny model whose decoder step takes a little while, so a test can act mid-sequence."""
    m = copy.deepcopy(tiny_model)
    real = m.decode_greedy

    def decode_greedy(tokens, cache):
        time.sleep(seconds)
        return real(tokens, cache)

    m.decode_greedy = decode_greedy
    return m


async def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


def sse(r: httpx.Response) -> list[dict]:
    """The events of a text/event-stream response."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    chunks = r.text.split("\n\n")
    assert chunks[-1] == "" and all(c.startswith("data: ") for c in chunks[:-1]), r.text
    events = [json.loads(c.removeprefix("data: ")) for c in chunks[:-1]]
    for event in events:  # each as the API's schema says (app/schemas/stream.py: no field more or less)
        STREAM_EVENT.validate_python(event)
    return events


def assert_stream_matches(events: list[dict], plain: dict) -> None:
    """One event per generated token, text_so_far growing by each token's text, then the plain translation."""
    *tokens, last = events
    t = plain["translations"][0]
    assert [e["index"] for e in tokens] == list(range(len(t["token_ids"])))
    assert [e["token"]["id"] for e in tokens] == t["token_ids"]
    shown = ""
    for e in tokens:
        assert set(e) == {"index", "token", "text_so_far"} and e["text_so_far"] == shown + e["token"]["text"]
        shown = e["text_so_far"]
    assert last["text"] == shown  # the tokens add up to the whole translation
    assert last == {"text": t["text"], "finish_reason": t["finish_reason"], "usage": plain["usage"], "truncated": False,
                    "calibrated": plain["calibrated"], "confidence": pytest.approx(t["confidence"], abs=1.5e-3),
                    "flags": t["flags"]}  # fmt: skip


async def stream_and_plain(client, body: dict) -> tuple[list[dict], dict]:
    plain = (await client.post("/translate", json={**body, "return_tokens": True})).json()
    return sse(await client.post("/translate", json={**body, "stream": True})), plain


async def assert_attention_of_the_served_translation(client, config, tokenizer, text: str) -> None:
    """/attention on `text`: its tokens, the served translation, every layer's (heads, queries, keys) weights with
    rows summing to one, and <s> seeing no later token."""
    c = config
    body = (await client.post("/attention", json={"text": text})).json()
    S, T = len(body["encoder_tokens"]), len(body["decoder_tokens"])
    assert body["encoder_tokens"] == [tokenizer.id_to_token(i) for i in tokenizer.encode(text)]
    assert body["decoder_tokens"][0] == "<s>" and "</s>" not in body["decoder_tokens"]
    served = (await client.post("/translate", json={"text": text})).json()["translations"][0]["text"]
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


def assert_error(r: httpx.Response, status: int, kind: str, *words: str) -> str:
    body = r.json()
    assert (r.status_code, set(body), body["type"]) == (status, {"error", "type"}, kind), body
    for w in words:
        assert w in body["error"], body["error"]
    return body["error"]


def assert_handled(r, path: str = "") -> None:
    """No 5xx, and an error is `{"error", "type"}`, or DeepL's `{"message", "type"}` on its API."""
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        body = r.json()
        message = body["message"] if path.startswith(("/deepl/", "/v2/")) else body["error"]
        assert isinstance(message, str) and message and isinstance(body["type"], str), body


async def scrape(client) -> dict[tuple[str, tuple], float]:
    r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def full_app_only(monkeypatch) -> None:
    monkeypatch.setattr(FastTranslate, "_plain", lambda self, scope: False)
