"""The app around the routes: readiness, auth, body limit, and a JSON error with a clear message for every failure."""

from __future__ import annotations

import asyncio
import gc
import json
import threading

import httpx
import pytest
import torch

from app import models
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODES, StepGate, core_of, failing_on_step, serve, serve_in, served_in
from tests.app.helpers import assert_error, sse, until

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)


@pytest.mark.parametrize(
    "body, words",
    [
        ({}, ["'text' is required"]),
        ({"text": 5}, ["text", "string or a list of strings"]),
        ({"text": ["ok", None]}, ["text", "item 1", "string"]),
        ({"text": []}, ["text", "empty list", "1 and 8"]),
        ({"text": ["a"] * 9}, ["9 items", "limit is 8"]),
        ({"text": "a", "max_new_tokens": 0}, ["max_new_tokens", "between 1 and 40", "got 0"]),
        ({"text": "a", "max_new_tokens": 41}, ["between 1 and 40", "got 41"]),
        ({"text": "a", "max_new_tokens": "5"}, ["max_new_tokens", "integer"]),
        ({"text": "a", "return_tokens": "yes"}, ["return_tokens", "boolean"]),
        ({"text": "a", "max_tokens": 5}, ["unknown field 'max_tokens'", "max_new_tokens"]),
    ],
)
async def test_translate_rejects_bad_bodies_with_422(client, body, words):
    assert_error(await client.post("/translate", json=body), 422, "validation_error", *words)


async def test_malformed_json_and_non_objects_get_422(client):
    r = await client.post("/translate", content=b'{"text": "a",', headers={"content-type": "application/json"})
    assert_error(r, 422, "validation_error", "not valid JSON")
    r = await client.post("/translate", content=b'["a"]', headers={"content-type": "application/json"})
    assert_error(r, 422, "validation_error", "JSON object")
    assert_error(await client.post("/translate"), 422, "validation_error", "JSON object")
    for number in (b"NaN", b"Infinity", b"-Infinity"):  # Python's json reads them; no field takes one
        r = await client.post("/translate", content=b'{"text": "a", "length_penalty": %s}' % number,
                              headers={"content-type": "application/json"})  # fmt: skip
        assert_error(r, 422, "validation_error", "length_penalty: input should be a finite number")
    r = await client.post("/translate", content=b'{"text": "a"}')  # a JSON object, but not said to be one
    assert_error(r, 422, "validation_error", "Content-Type: application/json (this request has none)")
    r = await client.post("/translate", content=b'{"text": "a"}', headers={"content-type": "text/plain"})
    assert_error(r, 422, "validation_error", "Content-Type: application/json (this request's is 'text/plain')")


@pytest.mark.parametrize(
    "body, words",
    [
        ({"ids": []}, ["empty list"]),
        ({"ids": [1, [2]]}, ["integer"]),
        ({"ids": [1.5]}, ["integer"]),
        ({"ids": [True]}, ["integer"]),
        ({"ids": "1 2 3"}, ["list of token ids"]),
        ({"ids": [[1]] * 9}, ["9 items", "limit is 8"]),
        ({"ids": [1], "side": "middle"}, ["side", "'source' or 'target'"]),
    ],
)
async def test_detokenize_rejects_malformed_ids_with_422(client, body, words):
    assert_error(await client.post("/detokenize", json=body), 422, "validation_error", *words)


async def test_detokenize_names_ids_outside_the_vocabulary(client, tokenizer):
    V = tokenizer.vocab_size
    r = await client.post("/detokenize", json={"ids": [1, V, 2]})
    assert_error(r, 422, "validation_error", f"ids[1] = {V} is not a token id", f"0..{V - 1}")
    r = await client.post("/detokenize", json={"ids": [[1, 2], [-1]]})
    assert_error(r, 422, "validation_error", "ids[1][0] = -1", f"0..{V - 1}")


@pytest.mark.parametrize(
    "body, words",
    [
        ({"text": "A man.", "layers": [2]}, ["layers [2] out of range", "0..1"]),
        ({"text": "A man.", "heads": [0, 4, -1]}, ["heads [4, -1] out of range", "0..3"]),
        ({"text": "A man.", "heads": []}, ["heads is an empty list"]),
        ({"text": ["A man."]}, ["text", "string"]),
    ],
)
async def test_attention_rejects_bad_selections_with_422(client, body, words):
    assert_error(await client.post("/attention", json=body), 422, "validation_error", *words)


async def test_too_many_tokens_is_413_naming_the_text_and_count(client, tokenizer):
    long = "a man is running " * 20
    n = len(tokenizer.encode(long.strip()))  # what the model would read: the text without its trailing space
    assert_error(
        await client.post("/translate", json={"text": long}), 413, "input_too_long", f"text has {n} tokens", "64"
    )
    r = await client.post("/translate", json={"text": ["fine", long]})
    assert_error(r, 413, "input_too_long", f"text[1] has {n} tokens", "limit is 64", "truncate")
    r = await client.post("/attention", json={"text": long})  # read as /translate reads it
    assert_error(r, 413, "input_too_long", f"has {n} tokens")
    assert "truncate" not in r.json()["error"]  # it advised a field /attention does not take
    r = await client.post("/attention", json={"text": "a", "target": "ein Mann " * 40})
    assert_error(r, 413, "input_too_long", "target has", "limit is 40")


async def test_body_over_1mb_is_413_by_length_and_by_stream(client):
    big = b'{"text": "' + b"a" * (1 << 20) + b'"}'
    r = await client.post("/translate", content=big, headers={"content-type": "application/json"})
    assert_error(r, 413, "body_too_large", f"{len(big)} bytes", "1 MB")

    async def chunks():  # no Content-Length: the limit counts what arrives
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    r = await client.post("/tokenize", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "body_too_large", "over the limit", "1 MB")


async def test_unknown_path_and_wrong_method(client):
    assert_error(await client.get("/translations"), 404, "not_found", "/translations", "/docs")
    assert_error(await client.get("/translate"), 405, "method_not_allowed", "GET", "POST")
    for path in ("/files/0", "/glossaries/0", "/deepl/v2/glossaries/0"):  # a path of two routes: both methods named
        r = await client.put(path)
        assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET", (path, r.headers)
        assert "use DELETE, GET" in r.text, r.text


@pytest.mark.parametrize("mode", MODES)
async def test_api_key_guards_everything_but_health_and_ready(settings, mode):
    async with serve_in(mode, Settings(**{**settings.model_dump(), "api_key": "s3cret"})) as (_, client):
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/ready")).status_code == 200
        for method, path, body in [("GET", "/info", None), ("POST", "/translate", {"text": "A dog."})]:
            r = await client.request(method, path, json=body)
            assert_error(r, 401, "unauthorized", "missing", "Bearer")
            assert r.headers["www-authenticate"] == "Bearer"
            r = await client.request(method, path, json=body, headers={"Authorization": "Bearer s3cre"})
            assert_error(r, 401, "unauthorized", "wrong")
            r = await client.request(method, path, json=body, headers={"Authorization": "Bearer s3cret"})
            assert r.status_code == 200


async def test_ready_and_requests_are_503_until_the_model_is_loaded_and_warmed(settings, monkeypatch):
    release, real = threading.Event(), models.load_engine

    def slow_load(s, *args, **kwargs):
        release.wait(30)
        return real(s, *args, **kwargs)

    monkeypatch.setattr(models, "load_engine", slow_load)
    app = create_app(settings)
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://nmt") as client:
        assert_error(await client.get("/ready"), 503, "not_ready", "loading")  # before the lifespan ran
        from asgi_lifespan import LifespanManager

        async with LifespanManager(app):
            assert (await client.get("/health")).json() == {"status": "ok"}
            assert_error(await client.get("/ready"), 503, "not_ready", "loading")
            assert_error(await client.post("/translate", json={"text": "a"}), 503, "not_ready", "loading")
            # naming languages: not yet a 422 ("no model translates en->de"), the model loading may be the one
            named = await client.post("/translate", json={"text": "a", "source": "en", "target": "de"})
            assert_error(named, 503, "not_ready", "no loaded model translates en->de yet", "loading")
            release.set()
            await app.state.loading
            assert (await client.get("/ready")).json()["status"] == "ready"
        assert_error(await client.get("/ready"), 503, "not_ready", "shutting down")


async def test_what_startup_loaded_is_frozen_out_of_the_cyclic_collector(settings):
    gc.unfreeze()
    async with serve(settings) as (app, client):
        model = core_of(app).model
        collected = {id(o) for o in gc.get_objects()}  # every generation but the permanent (frozen) one
        assert gc.is_tracked(model) and id(model) not in collected
        assert gc.get_freeze_count() > 10_000  # torch, the model, the tokenizer
        assert (await client.post("/translate", json={"text": "a dog"})).status_code == 200


async def test_a_checkpoint_that_fails_to_load_is_reported(tmp_path, settings):
    failures = []
    app = create_app(
        Settings(**{**settings.model_dump(), "model_dir": tmp_path / "nothing"}), on_load_failure=failures.append
    )
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    from asgi_lifespan import LifespanManager

    async with LifespanManager(app), httpx.AsyncClient(transport=transport, base_url="http://nmt") as client:
        await app.state.loading
        assert failures and "does not exist" in failures[0]
        assert_error(await client.get("/ready"), 503, "load_failed", "failed to load", "does not exist")
        assert (await client.get("/health")).status_code == 200


async def test_a_failing_step_fails_only_its_requests_and_the_next_one_succeeds(client, app, monkeypatch):
    model = core_of(app).model
    monkeypatch.setattr(model, "decode_greedy", failing_on_step(model.decode_greedy, 1))
    r = await client.post("/translate", json={"text": ["A dog.", "A cat."]})
    assert_error(r, 500, "model_error", "injected fault", "other requests were not affected")
    ok = await client.post("/translate", json={"text": "A dog."})
    assert ok.status_code == 200 and ok.json()["translations"][0]["text"]


async def test_an_unexpected_error_is_a_json_500(client, app, monkeypatch):
    def broken():
        raise KeyError("boom")

    monkeypatch.setattr(app.state.engine, "info", broken)
    assert_error(await client.get("/info"), 500, "internal_error", "internal server error", "KeyError")


# ---- backpressure, timeouts, disconnects, device memory ---------------------------------------------------------

LONG = {"text": "Two girls are playing in the park.", "max_new_tokens": 40}


async def test_a_full_queue_answers_429_with_retry_after(client, app, monkeypatch):
    batcher = core_of(app).batcher
    monkeypatch.setattr(batcher, "max_queue", 3)
    gate = StepGate(core_of(app).model, monkeypatch)
    gate.hold(lambda sizes: True)
    first = asyncio.create_task(client.post("/translate", json={**LONG, "text": ["A dog.", "A cat."]}))
    try:
        await until(gate.paused.is_set)
        for body in ({"text": ["A dog.", "A cat."]}, {"text": ["A dog.", "", "A cat."]}):
            r = await client.post("/translate", json=body)
            assert_error(r, 429, "queue_full", "busy", "2 sequences are waiting or decoding", "limit is 3")
            assert r.headers["retry-after"] == "1"
        fits = asyncio.create_task(client.post("/translate", json={"text": "A bird.", "stream": True}))
        await until(lambda: batcher.load == 3)
        assert_error(await client.post("/translate", json={"text": "A bird.", "stream": True}), 429, "queue_full")
    finally:
        gate.release()
    assert (await first).status_code == 200
    assert sse(await fits)[-1]["finish_reason"] in ("eos", "length")
    assert (await client.post("/translate", json={"text": ["A dog.", "A cat."]})).status_code == 200


async def test_a_request_past_its_timeout_gets_504_and_leaves_the_batch(client, app, monkeypatch):
    engine = app.state.engine
    monkeypatch.setattr(engine, "request_timeout_s", 0.2)
    gate = StepGate(core_of(app).model, monkeypatch)
    gate.hold(lambda sizes: len(sizes) == 3)
    try:
        r = await client.post("/translate", json=LONG)
        assert_error(r, 504, "timeout", "not answered within 0.2 s", "NMT_REQUEST_TIMEOUT_S")
        await until(lambda: core_of(app).batcher.load == 0)  # given up (behind a front-end: once its cancel arrived)
    finally:
        gate.release()
    await until(lambda: core_of(app).batcher.cache.n == 0)
    assert gate.sizes == [1, 1, 1]  # dropped before the step after the one it was waiting on
    gate.hold(lambda sizes: len(sizes) == 6)  # a stream times out after it started: its last event says so
    try:
        events = sse(await client.post("/translate", json={**LONG, "stream": True}))
    finally:
        gate.release()
    assert [e["index"] for e in events[:-1]] == [0, 1] and events[-1]["type"] == "timeout"
    assert "not answered within 0.2 s" in events[-1]["error"]
    monkeypatch.undo()
    assert (await client.post("/translate", json=LONG)).status_code == 200


async def asgi_request(app, body: dict, gone: asyncio.Event, messages: list[dict] | None = None) -> list[dict]:
    """POST /translate straight to the ASGI app, as uvicorn would; the client disconnects when `gone` is set. The
    messages sent, into `messages` as they come (a caller may watch them)."""
    payload, sent, messages = json.dumps(body).encode(), False, [] if messages is None else messages

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        messages.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/translate", "raw_path": b"/translate", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"nmt"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    return messages


def running(app) -> float:
    return core_of(app).batcher.metrics.sample("nmt_running_batch_size")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_client_that_disconnects_frees_its_row_at_the_next_step(client, app, monkeypatch, stream):
    gate, gone = StepGate(core_of(app).model, monkeypatch), asyncio.Event()
    gate.hold(lambda sizes: len(sizes) == 3)
    sent: list[dict] = []
    request = asyncio.create_task(asgi_request(app, {**LONG, "stream": stream}, gone, sent))
    try:
        await until(gate.paused.is_set)
        assert running(app) == 1
        if stream:  # its first event sent before the client goes (behind a front-end, the tokens travel there first)
            await until(lambda: len(sent) > 1)
        gone.set()
        await until(lambda: core_of(app).batcher.load == 0)  # the caller gave up
    finally:
        gate.release()
    messages = await request
    await until(lambda: running(app) == 0)
    assert gate.sizes == [1, 1, 1]  # the step it was paused in, then it left
    assert f'nmt_running_batch_size{{model="{app.state.engine.name}"}} 0.0' in (await client.get("/metrics")).text
    if stream:
        assert messages[0]["status"] == 200 and b'"index": 0' in messages[1]["body"]
    else:
        assert messages[0]["status"] == 499
    assert (await client.post("/translate", json={"text": "A dog."})).status_code == 200


async def test_a_failing_step_ends_a_stream_with_an_error_event_and_the_next_one_succeeds(client, app, monkeypatch):
    model = core_of(app).model
    monkeypatch.setattr(model, "decode_greedy", failing_on_step(model.decode_greedy, 3))
    events = sse(await client.post("/translate", json={**LONG, "stream": True}))
    assert [e.get("index") for e in events[:-1]] == [0, 1]
    assert events[-1]["type"] == "model_error" and "injected fault" in events[-1]["error"]
    assert sse(await client.post("/translate", json={**LONG, "stream": True}))[-1]["finish_reason"] == "length"


async def test_device_memory_that_never_suffices_is_a_503_and_the_worker_keeps_serving(client, app, monkeypatch):
    def add(model, src):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(core_of(app).batcher.cache, "add", add)
    r = await client.post("/translate", json={"text": "A dog."})
    assert_error(r, 503, "out_of_memory", "ran out of memory", "smaller batch", "retry later")
    monkeypatch.undo()
    assert (await client.post("/translate", json={"text": "A dog."})).status_code == 200
