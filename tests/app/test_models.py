"""Several models in one server (NMT_MODELS): routing by name and by language, /models, /ready, /info and /metrics
per model, a busy model not holding up another, and a model that fails to load while the others serve."""

from __future__ import annotations

import asyncio

import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODES, StepGate, core_of, engine_side, serve_in
from tests.app.helpers import assert_error, scrape, value

pytestmark = pytest.mark.anyio
TEXT = "A man is riding a bike."


def two_models(trained_checkpoint, french, **overrides) -> Settings:
    spec = f"en-de={trained_checkpoint},en-fr={french}"
    return Settings(models=spec, max_new_tokens=40, compile=False, **overrides)


@pytest.fixture(scope="module", params=MODES)
async def served(trained_checkpoint, french, request):
    async with serve_in(request.param, two_models(trained_checkpoint, french)) as pair:
        yield pair


@pytest.fixture
def app(served):
    return served[0]


@pytest.fixture
def client(served):
    return served[1]


async def translated(client, **body) -> dict:
    r = await client.post("/translate", json={"text": TEXT, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_request_picks_its_model_by_name_or_by_language_and_the_first_is_the_default(app, client):
    engines = app.state.models.engines
    own = {name: (await e.translate(TEXT))[0].text for name, e in engines.items()}
    assert own["en-de"] != own["en-fr"]  # two different models
    for body, name in [
        ({}, "en-de"), ({"model": "en-fr"}, "en-fr"), ({"target": "fr"}, "en-fr"), ({"source": "en"}, "en-de"),
        ({"source": "en", "target": "de"}, "en-de"), ({"model": "en-fr", "target": "fr"}, "en-fr"),
        # the codes spelt otherwise (case, region, ISO 639-2), and "auto" for the source, as many-to-many models take them
        ({"target": "FR"}, "en-fr"), ({"target": "fr-FR"}, "en-fr"), ({"source": "EN", "target": "fra"}, "en-fr"),
        ({"source": "auto", "target": "fr"}, "en-fr"), ({"model": "en-fr", "source": "en_GB", "target": "Fr"}, "en-fr"),
    ]:  # fmt: skip
        out = await translated(client, **body)
        assert (out["model"], out["translations"][0]["text"]) == (name, own[name]), body
    stream = await client.post("/translate", json={"text": TEXT, "model": "en-fr", "stream": True})
    assert own["en-fr"] in stream.text
    tokens = await client.post("/tokenize", json={"text": TEXT, "model": "en-fr"})
    assert tokens.status_code == 200 and tokens.json()["results"][0]["count"] > 1


async def test_attention_and_tokenize_pick_a_pair_model_by_its_languages_as_translate_does(app, client):
    engines = app.state.models.engines
    for body, name in [({"target_language": "fr"}, "en-fr"), ({"source_language": "en"}, "en-de"),
                       ({"model": "en-fr", "source_language": "en", "target_language": "fr"}, "en-fr")]:  # fmt: skip
        r = await client.post("/attention", json={"text": TEXT, **body})
        assert r.status_code == 200, r.text
        assert r.json()["translation"] == (await engines[name].translate(TEXT))[0].text, body
    r = await client.post("/attention", json={"text": TEXT, "model": "en-de", "target_language": "fr"})
    assert_error(r, 422, "validation_error", "'en-de' translates en->de, not target 'fr'")
    r = await client.post("/attention", json={"text": TEXT, "source_language": "de"})
    assert_error(r, 422, "validation_error", "translates de->any", "en-de (en->de)")
    for side, language in (("source", "en"), ("target", "fr")):  # a pair model's tokens carry no language
        plain = await client.post("/tokenize", json={"text": TEXT, "model": "en-fr", "side": side})
        r = await client.post("/tokenize", json={"text": TEXT, "model": "en-fr", "side": side, "language": language})
        assert r.status_code == 200 and r.json() == plain.json()
    r = await client.post("/tokenize", json={"text": TEXT, "model": "en-de", "side": "target", "language": "fr"})
    assert_error(r, 422, "validation_error", "'en-de' translates en->de, not target 'fr'")
    r = await client.post("/tokenize", json={"text": TEXT, "language": "es"})
    assert_error(r, 422, "validation_error", "translates es->any")


async def test_auto_is_a_source_in_any_case_on_every_route_that_names_languages(app, client):
    """Codes match in any case, and LibreTranslate's and DeepL's routes took "AUTO"; the native ones once said "no
    model here translates AUTO->fr"."""
    engines = app.state.models.engines
    own = {name: (await e.translate(TEXT))[0].text for name, e in engines.items()}
    for auto in ("AUTO", "Auto", "auto"):
        out = await translated(client, source=auto, target="fr")
        assert (out["model"], out["translations"][0]["text"]) == ("en-fr", own["en-fr"]), auto
        r = await client.post("/attention", json={"text": TEXT, "source_language": auto, "target_language": "fr"})
        assert r.status_code == 200 and r.json()["translation"] == own["en-fr"], r.text
        plain = await client.post("/tokenize", json={"text": TEXT})
        r = await client.post("/tokenize", json={"text": TEXT, "language": auto})
        assert r.status_code == 200 and r.json() == plain.json(), r.text


async def test_iso_639_2_bibliographic_codes_name_their_languages(client):
    """`fre` and `ger` are ISO 639-2/B's French and German, as `fra` and `deu` are 639-2/T's; they were a 422."""
    for body, name in [({"target": "fre"}, "en-fr"), ({"target": "GER"}, "en-de"), ({"target": "fre-FR"}, "en-fr"),
                       ({"model": "en-de", "target": "ger"}, "en-de")]:  # fmt: skip
        assert (await translated(client, **body))["model"] == name, body
    french = (await translated(client, target="fr"))["translations"][0]["text"]
    r = await client.post("/attention", json={"text": TEXT, "target_language": "fre"})
    assert r.status_code == 200 and r.json()["translation"] == french, r.text
    r = await client.post("/translate", json={"text": TEXT, "model": "en-de", "target": "fre"})
    assert_error(r, 422, "validation_error", "'en-de' translates en->de, not target 'fre'")


@pytest.mark.parametrize(
    "path, field", [("/translate", "source"), ("/translate", "target"), ("/attention", "source_language"),
                    ("/attention", "target_language"), ("/tokenize", "language")],
)  # fmt: skip
async def test_an_empty_language_code_is_a_422_as_an_empty_model_is(client, path, field):
    """An empty `target` once meant the default model, while an empty `model` was a 422: a client's unset variable,
    sent as "", got a translation into a language it did not name."""
    for empty in ("", " "):
        r = await client.post(path, json={"text": TEXT, field: empty})
        assert_error(r, 422, "validation_error", f"{field} is", "send a language code", "or leave the field out")
    assert_error(await client.post(path, json={"text": TEXT, "model": ""}), 422, "validation_error", "no model ''")


async def test_a_model_or_a_pair_that_is_not_served_is_a_422_naming_what_is(client):
    r = await client.post("/translate", json={"text": TEXT, "model": "en-es"})
    assert_error(r, 422, "validation_error", "'en-es'", "en-de (en->de), en-fr (en->fr)", "GET /models")
    r = await client.post("/translate", json={"text": TEXT, "target": "es"})
    assert_error(r, 422, "validation_error", "translates any->es", "en-de (en->de)")
    r = await client.post("/translate", json={"text": TEXT, "model": "en-de", "target": "fr"})
    assert_error(r, 422, "validation_error", "'en-de' translates en->de, not target 'fr'")
    r = await client.post("/attention", json={"text": TEXT, "model": "nope"})
    assert_error(r, 422, "validation_error", "'nope'")


async def test_models_ready_and_info_describe_each_model(app, client):
    listed = (await client.get("/models")).json()["models"]
    assert [(m["name"], m["source"], m["target"], m["state"], m["default"]) for m in listed] == [
        ("en-de", "en", "de", "ready", True), ("en-fr", "en", "fr", "ready", False)
    ]  # fmt: skip
    assert all(m["limits"]["max_new_tokens"] == 40 and m["threads"] >= 1 for m in listed)
    assert listed[1]["metadata"]["name"] == "tiny-fr"
    assert (await client.get("/ready")).json() == {"status": "ready", "models": {"en-de": "ready", "en-fr": "ready"}}
    info = (await client.get("/info")).json()
    assert info["model"] == "en-de" and info["models"] == ["en-de", "en-fr"] and info["languages"]["target"] == "de"
    info = (await client.get("/info", params={"model": "en-fr"})).json()
    assert info["model"] == "en-fr" and info["languages"] == {"source": "en", "target": "fr"}
    assert_error(await client.get("/info", params={"model": "x"}), 422, "validation_error", "'x'")


async def test_the_cores_are_shared_out_among_the_models_unless_nmt_threads_says(app):
    models = engine_side(app)
    expected = max(1, models.cores // 2)
    assert [e.core.batcher.threads for e in models.engines.values()] == [expected, expected]


async def test_metrics_are_per_model(client):
    before = await scrape(client)
    fr = (await translated(client, model="en-fr"))["usage"]["output_tokens"]
    de = (await translated(client, model="en-de"))["usage"]["output_tokens"]
    after = await scrape(client)
    for name, tokens in (("en-fr", fr), ("en-de", de)):
        count = "nmt_generated_tokens_total"
        assert value(after, count, model=name) - value(before, count, model=name) == tokens


async def test_a_busy_model_does_not_hold_up_another(app, client, monkeypatch):
    """en-de's worker is held in the middle of a decoder step with a full batch waiting; en-fr still answers."""
    gate = StepGate(core_of(app, "en-de").model, monkeypatch)
    gate.hold(lambda sizes: len(sizes) == 2)
    busy = [asyncio.create_task(client.post("/translate", json={"text": f"{TEXT} {i}"})) for i in range(8)]
    try:
        assert await asyncio.to_thread(gate.paused.wait, 30)
        fr = await asyncio.wait_for(client.post("/translate", json={"text": TEXT, "model": "en-fr"}), 30)
        assert fr.status_code == 200 and fr.json()["model"] == "en-fr"
        assert gate.paused.is_set() and not any(t.done() for t in busy)  # en-de's requests still wait
    finally:
        gate.release()
    assert [r.status_code for r in await asyncio.gather(*busy)] == [200] * 8


@pytest.mark.parametrize("mode", MODES)
async def test_a_model_that_fails_to_load_is_reported_while_the_others_serve(trained_checkpoint, tmp_path, mode):
    """Behind a front-end too, with the engine process's reason (it said only that it does not serve the model)."""
    settings = Settings(models=f"en-de={trained_checkpoint},broken={tmp_path / 'nothing'}", compile=False)
    async with serve_in(mode, settings) as (_, client):
        ready = await client.get("/ready")
        assert ready.status_code == 200
        assert ready.json() == {"status": "partial", "models": {"en-de": "ready", "broken": "failed"}}
        broken = (await client.get("/models")).json()["models"][1]
        assert broken["state"] == "failed" and "does not exist" in broken["error"]
        r = await client.post("/translate", json={"text": TEXT, "model": "broken"})
        assert_error(r, 503, "not_ready", "'broken' failed to load", "does not exist")
        assert (await translated(client, model="en-de"))["model"] == "en-de"


async def test_the_server_stops_when_no_model_loads(tmp_path):
    failures = []
    settings = Settings(models=f"a={tmp_path / 'x'},b={tmp_path / 'y'}", compile=False)
    app = create_app(settings, on_load_failure=failures.append)
    from asgi_lifespan import LifespanManager

    async with LifespanManager(app):
        await app.state.loading
    assert len(failures) == 1 and "a: " in failures[0] and "b: " in failures[0]


@pytest.mark.parametrize(
    "spec, problem",
    [("en-de", "not name=directory"), ("a=x,a=y", "given twice"), ("=x", "not name=directory"), (",", "no model")],
)
def test_nmt_models_that_cannot_be_read_are_refused_with_the_reason(spec, problem):
    with pytest.raises(ValueError, match=problem):
        Settings(models=spec)
