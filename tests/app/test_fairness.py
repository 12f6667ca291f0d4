"""One request of many sentences does not hold the server: a later small request takes the next free row, and a
request may hold only its share of the queue."""

import asyncio
import threading

import pytest

from app.settings import Settings
from tests.app.conftest import MODES, StepGate, core_of, serve_in
from tests.app.helpers import until
from tests.synthetic import synthetic_pairs

pytestmark = pytest.mark.anyio
SENTENCE = synthetic_pairs(1, seed=11)[0][0]
ROWS, QUEUE = 4, 128  # each request may have 64 sequences waiting or decoding: half of the queue, by default


@pytest.fixture(scope="module", params=MODES)
async def few_rows(trained_checkpoint, request):
    """A server of few rows on a model whose translations do not hang on near-ties (the same in any batch), in one
    process or behind a front-end (whose share of the queue is the whole of it)."""
    settings = Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False, max_batch_size=ROWS,
                        max_queue=QUEUE, max_batch_texts=8)  # fmt: skip
    async with serve_in(request.param, settings) as pair:
        yield pair


def dogs(n: int) -> dict:
    return {"text": " ".join(["A dog runs."] * n)}


def waiting(metrics: str) -> float:
    """nmt_queue_length from a /metrics page: sequences submitted and not yet in the batch."""
    (line,) = [x for x in metrics.splitlines() if x.startswith("nmt_queue_length{")]
    return float(line.rsplit(" ", 1)[1])


async def test_a_one_sentence_request_is_answered_while_a_big_one_still_waits_for_rows(few_rows, monkeypatch):
    app, client = few_rows
    (alone,) = (await client.post("/translate", json={"text": SENTENCE})).json()["translations"]
    gate = StepGate(core_of(app).model, monkeypatch)
    gate.hold(lambda sizes: True)  # the big request's first rows, at their first step
    answered = threading.Event()
    try:
        big = asyncio.create_task(client.post("/translate", json=dogs(64)))
        await until(gate.paused.is_set)
        small = asyncio.create_task(client.post("/translate", json={"text": SENTENCE}))
        await until(lambda: core_of(app).batcher.load == 65)
        gate.hold(lambda sizes: answered.is_set())  # stop the worker at its first step once the small one is back
        gate.release()
        r = await small
        answered.set()
        await until(lambda: gate.paused.is_set() or big.done())
        assert gate.paused.is_set() and not big.done(), "the big request finished before the small one's answer"
        assert waiting((await client.get("/metrics")).text) >= ROWS, "the big request's sentences still wait for rows"
    finally:
        gate.release()
    assert r.status_code == 200 and r.json()["translations"] == [alone]
    assert (await big).status_code == 200


async def test_a_request_holds_at_most_its_share_of_the_queue_and_a_second_client_gets_the_rest(few_rows, monkeypatch):
    app, client = few_rows
    info = (await client.get("/info")).json()["limits"]
    assert (info["max_queue"], info["max_request_sequences"]) == (QUEUE, QUEUE // 2)
    r = await client.post("/translate", json=dogs(QUEUE // 2 + 1))
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert "65 sentences" in error and "at most 64" in error and "NMT_MAX_REQUEST_SEQUENCES" in error
    gate = StepGate(core_of(app).model, monkeypatch)
    gate.hold(lambda sizes: True)
    try:
        first = asyncio.create_task(client.post("/translate", json=dogs(QUEUE // 2)))
        await until(gate.paused.is_set)
        second = asyncio.create_task(client.post("/translate", json=dogs(QUEUE // 2)))  # another client, same size
        await until(lambda: core_of(app).batcher.load == QUEUE)
    finally:
        gate.release()
    assert [(await first).status_code, (await second).status_code] == [200, 200]
