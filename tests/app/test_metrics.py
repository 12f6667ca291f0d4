"""GET /metrics: every series in Prometheus text format, with values that add up after some traffic."""

from __future__ import annotations

import asyncio

import pytest

from app.metrics import Metrics
from tests.app.conftest import MODES, served_in
from tests.app.helpers import scrape, sse, value

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end


async def test_metrics_expose_every_series_with_sensible_values_after_traffic(app, client):
    before = await scrape(client)
    bodies = [{"text": "A man is riding a bike."}, {"text": ["Two dogs.", "A cat sleeps."]}, {"text": "Hi"}]
    plain = await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))
    stream = await client.post("/translate", json={"text": "A dog runs.", "stream": True, "max_new_tokens": 5})
    assert [r.status_code for r in (*plain, stream)] == [200] * 4
    assert (await client.post("/translate", json={"text": 5})).status_code == 422
    assert (await client.get("/nowhere/42")).status_code == 404
    deepl = {"text": "A dog.", "target_lang": "DE"}  # DeepL's routes at /deepl/v2 and at /v2: each its own label
    statuses = [(await client.post(p, data=deepl)).status_code for p in ("/deepl/v2/translate", "/v2/translate") * 2]
    after = await scrape(client)

    def delta(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    model = {"model": app.state.engine.name}  # the engine series are the model's
    for path, status in zip(("/deepl/v2/translate", "/v2/translate"), statuses, strict=False):
        assert delta("nmt_requests_total", endpoint=path, status=str(status)) == 2, (path, status)

    assert delta("nmt_requests_total", endpoint="/translate", status="200") == 4
    assert delta("nmt_requests_total", endpoint="/translate", status="422") == 1
    assert delta("nmt_requests_total", endpoint="unmatched", status="404") == 1  # not one label per unknown path
    assert value(after, "nmt_requests_total", endpoint="/metrics", status="200") >= 1
    assert delta("nmt_request_duration_seconds_count", endpoint="/translate") == 5
    assert delta("nmt_request_duration_seconds_sum", endpoint="/translate") > 0
    assert delta("nmt_request_duration_seconds_bucket", endpoint="/translate", le="+Inf") == 5

    sequences = 5  # four texts and one stream
    output_tokens = sum(r.json()["usage"]["output_tokens"] for r in plain) + sse(stream)[-1]["usage"]["output_tokens"]
    assert delta("nmt_generated_tokens_total", **model) == output_tokens
    assert delta("nmt_time_to_first_token_seconds_count", **model) == sequences
    steps = delta("nmt_decoder_steps_total", **model)  # every step makes a token for each of its rows
    assert 5 <= steps <= output_tokens  # the stream alone took 5
    assert delta("nmt_decoder_step_duration_seconds_count", **model) == steps
    assert delta("nmt_decoder_step_duration_seconds_sum", **model) > 0
    assert delta("nmt_time_to_first_token_seconds_sum", **model) > 0
    assert delta("nmt_prefilled_sequences_total", **model) == sequences  # each encoded once, alone or with others
    assert 1 <= delta("nmt_prefill_duration_seconds_count", **model) <= sequences
    assert delta("nmt_prefill_duration_seconds_sum", **model) > 0
    assert 1 <= delta("nmt_time_per_output_token_seconds_count", **model) <= sequences
    assert delta("nmt_time_per_output_token_seconds_sum", **model) > 0
    assert value(after, "nmt_queue_length", **model) == 0 and value(after, "nmt_running_batch_size", **model) == 0
    assert value(after, "nmt_oom_retries_total", **model) == 0


def test_each_app_has_its_own_registry():
    a, b = Metrics().engine("m"), Metrics().engine("m")
    a.generated_tokens.inc(3)
    assert a.sample("nmt_generated_tokens_total") == 3
    assert b.sample("nmt_generated_tokens_total") == 0
