"""Plain /translate requests skip the framework and answer exactly as the full app does; the rest go to the app."""

from __future__ import annotations

import json

import pytest

from app.fastpath import FastTranslate
from app.settings import Settings
from tests.app.conftest import MODES, serve, served_in
from tests.app.helpers import assert_error, full_app_only

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end
LONG = "A man in a red shirt rides a bike down the hill. " * 20  # over the tiny settings' 64 source tokens


@pytest.fixture
def taken(monkeypatch) -> list[dict]:
    """The requests the fast path answered (their parsed bodies)."""
    seen, real = [], FastTranslate.translate

    async def translate(self, scope, receive, send, request, engine):
        seen.append(request.model_dump(exclude_defaults=True))
        await real(self, scope, receive, send, request, engine)

    monkeypatch.setattr(FastTranslate, "translate", translate)
    return seen


PLAIN = [
    {"text": "A man is riding a bike."},
    {"text": ["Two dogs play in the snow.", "  ", "The cat sleeps."]},
    {"text": "A dog runs.", "return_tokens": True, "return_scores": True},
    {"text": "Two girls are playing in the park.", "max_new_tokens": 3},
    {"text": LONG, "truncate": True},
    {"text": ""},
    {"text": LONG},  # 413 from the engine: the fast path answers it as the route's exception handler does
    {"text": "A dog.", "max_new_tokens": 10_000},  # 422 from the engine's budget check
]


@pytest.mark.parametrize("body", PLAIN)
async def test_a_plain_request_takes_the_fast_path_and_gets_the_full_apps_answer(client, taken, monkeypatch, body):
    fast = await client.post("/translate", json=body)
    assert taken == [body]
    full_app_only(monkeypatch)
    full = await client.post("/translate", json=body)
    assert len(taken) == 1  # this one went through FastAPI's route
    assert (fast.status_code, fast.headers["content-type"], fast.content) == (
        full.status_code,
        full.headers["content-type"],
        full.content,
    )
    assert fast.headers.get("retry-after") == full.headers.get("retry-after")


@pytest.mark.parametrize(
    "content, headers, status, words",
    [
        (b'{"text": "A dog.", "colour": 1}', {}, 422, ["unknown field 'colour'"]),
        (b'{"text": 5}', {}, 422, ["string or a list of strings"]),
        (b'{"text": "A dog.", "max_new_tokens": "5"}', {}, 422, ["max_new_tokens"]),
        (b'{"text": "A dog."', {}, 422, ["not valid JSON"]),
        (b"\xff\xfe", {}, 422, ["not valid JSON"]),
        (b'["A dog."]', {}, 422, ["JSON object"]),
        (b'{"text": "A dog."}', {"content-type": "text/plain"}, 422, ["this request's is 'text/plain'"]),
    ],
)
async def test_a_request_the_model_refuses_goes_to_the_full_app(client, taken, monkeypatch, content, headers, status,
                                                                 words):  # fmt: skip
    headers = {"content-type": "application/json", **headers}
    r = await client.post("/translate", content=content, headers=headers)
    assert taken == []
    message = assert_error(r, status, "validation_error", *words)
    full_app_only(monkeypatch)
    assert (await client.post("/translate", content=content, headers=headers)).json()["error"] == message


async def test_a_streamed_request_is_replayed_to_the_full_app(client, taken):
    async with client.stream("POST", "/translate", json={"text": "A dog runs.", "stream": True}) as r:
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert taken == []
    assert r.headers["content-type"].startswith("text/event-stream")
    plain = (await client.post("/translate", json={"text": "A dog runs."})).json()
    assert events[-1]["text"] == plain["translations"][0]["text"]


async def test_requests_are_counted_under_the_route_whichever_way_they_went(client, app, taken):
    def count(status: str) -> float:
        value = app.state.metrics.registry.get_sample_value(
            "nmt_requests_total", {"endpoint": "/translate", "status": status}
        )
        return value or 0.0

    before = count("200"), count("422")
    await client.post("/translate", json={"text": "A dog."})
    await client.post("/translate", json={"text": 5})
    assert len(taken) == 1
    assert (count("200"), count("422")) == (before[0] + 1, before[1] + 1)


async def test_with_an_api_key_only_the_right_key_takes_the_fast_path(settings, taken):
    async with serve(Settings(**{**settings.model_dump(), "api_key": "s3cret"})) as (_, client):
        r = await client.post("/translate", json={"text": "A dog."}, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200 and len(taken) == 1
        for headers in ({}, {"Authorization": "Bearer s3cre"}, {"Authorization": "Bearer s3cret2"}):
            assert_error(await client.post("/translate", json={"text": "A dog."}, headers=headers), 401, "unauthorized")
        r = await client.post("/translate", json={"text": "A dog."}, headers={"Authorization": "bearer s3cret"})
        assert r.status_code == 200 and len(taken) == 1  # the scheme's other spelling: the full app lets it in


async def test_an_unexpected_failure_on_the_fast_path_is_a_json_500_as_on_the_route(client, app, taken, monkeypatch):
    async def broken(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr(app.state.engine, "translate", broken)
    assert_error(await client.post("/translate", json={"text": "A dog."}), 500, "internal_error", "KeyError")
    assert len(taken) == 1
    monkeypatch.undo()
    assert (await client.post("/translate", json={"text": "A dog."})).status_code == 200
