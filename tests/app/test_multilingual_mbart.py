"""An mBART-50 model (a tiny random MBartForConditionalGeneration with MBart50Tokenizer, built by transformers and
imported by nmt-import) served over HTTP beside an NLLB-layout one: any direction per request, named by ISO codes or
mBART's own (`de_DE`), directions mixed in one running batch, every answer generate(forced_bos_token_id=...)'s."""

from __future__ import annotations

import asyncio

import pytest

from app.settings import Settings
from tests.app.conftest import MODES, core_of, serve_in
from tests.app.helpers import sse
from tests.app.multilingual import BUDGET, PER_DIRECTION, generate
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import import_all, model_directories

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
pytestmark = pytest.mark.anyio
# (source as the request names it, its mBART code, target as the request names it, its code, the sentences' language)
DIRECTIONS = [("de", "de_DE", "fr", "fr_XX", "de"), ("en_XX", "en_XX", "deu", "de_DE", "en"),
              ("fr-FR", "fr_XX", "EN", "en_XX", "fr")]  # fmt: skip


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    sources = model_directories(tmp_path_factory.mktemp("sources"), ("mbart50", "nllb"))
    return sources, import_all(sources, tmp_path_factory.mktemp("imported"))


@pytest.fixture(scope="module", params=MODES)
async def served(dirs, request):
    _, imported = dirs
    models = f"mbart={imported['mbart50']},nllb={imported['nllb']}"
    settings = Settings(models=models, compile=False, max_new_tokens=BUDGET, max_input_tokens=64)
    async with serve_in(request.param, settings) as pair:
        yield pair


@pytest.fixture
def client(served):
    return served[1]


async def test_three_directions_at_once_give_generates_tokens_and_text(served, client, dirs):
    sources, _ = dirs
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(sources["mbart50"]).eval()
    core = core_of(served[0], "mbart")
    core.batcher.peak_rows = 0
    cases = [(src, tgt, held_out_sentences(lang)[:PER_DIRECTION]) for src, _, tgt, _, lang in DIRECTIONS]
    answers = await asyncio.gather(*(
        client.post("/translate", json={"text": texts, "source": src, "target": tgt, "model": "mbart",
                                        "return_tokens": True})
        for src, tgt, texts in cases
    ))  # fmt: skip
    assert core.batcher.peak_rows > PER_DIRECTION  # rows of more than one direction stepped together
    for (_, src, _, tgt, _), (_, _, texts), r in zip(DIRECTIONS, cases, answers):
        assert r.status_code == 200, r.text
        ids, wanted = generate(hf, (sources["mbart50"],), src, tgt, texts, num_beams=1)
        got = r.json()["translations"]
        assert [t["token_ids"] for t in got] == ids
        assert [t["text"] for t in got] == wanted


async def test_models_lists_mbarts_languages_and_a_code_it_lacks_is_a_422(client):
    models = {m["name"]: m for m in (await client.get("/models")).json()["models"]}
    languages = {x["code"]: x for x in models["mbart"]["languages"]}
    assert len(languages) == 52 and languages["de_DE"]["name"] == "de" and languages["zh_CN"]["name"] == "zh"
    r = await client.post("/translate", json={"text": "Hallo", "source": "de", "target": "zh-TW", "model": "mbart"})
    assert r.status_code == 422 and "does not write target 'zh-TW' in the Hant script" in r.text
    assert "it has zh_CN" in r.text  # the Chinese it has
    for name, script in (("az-IR", "Arab"), ("mn-Mong", "Mong")):  # its az_AZ, mn_MN: Latin, Cyrillic (CLDR)
        r = await client.post("/translate", json={"text": "Hallo", "source": "de", "target": name, "model": "mbart"})
        assert r.status_code == 422 and f"does not write target {name!r} in the {script} script" in r.text, r.text
    r = await client.post("/translate", json={"text": "Hallo", "source": "de", "target": "ms", "model": "mbart"})
    assert r.status_code == 422


async def test_libretranslate_translates_with_mbart_between_two_of_its_languages(client, dirs):
    r = await client.post("/libretranslate/translate", json={"q": "Ein Hund.", "source": "de", "target": "fr"})
    plain = await client.post(
        "/translate", json={"text": "Ein Hund.", "source": "de", "target": "fr", "model": "mbart"}
    )  # fmt: skip
    assert r.status_code == 200 and plain.status_code == 200
    served_by = {
        (await client.post("/translate", json={"text": "Ein Hund.", "source": "de", "target": "fr", "model": m}))
        .json()["translations"][0]["text"]: m
        for m in ("mbart", "nllb")
    }  # fmt: skip
    assert r.json()["translatedText"] in served_by  # one of the two many-to-many models answered, whole


async def test_auto_goes_to_the_first_model_that_translates_from_the_detected_language(client):
    """Several models translating into the target: "auto" (or no source) picks among them by the detected language,
    as LibreTranslate's and DeepL's routes do; it went to the first into the target, which read Norwegian (a language
    mBART-50 lacks) as one of its own."""
    norwegian = (
        "Norge er et land i Nord-Europa. Hovedstaden heter Oslo, og landet har omtrent fem millioner innbyggere."
    )
    german = "Zwei junge Männer spielen auf einer Wiese Fußball."
    for source in ({}, {"source": "auto"}):
        for text, model, detected in ((norwegian, "nllb", "nb"), (german, "mbart", "de")):
            for stream in (False, True):
                body = {"text": text, "target": "fr", "stream": stream, **source}
                r = await client.post("/translate", json=body)
                assert r.status_code == 200, r.text
                if stream:
                    assert sse(r)[-1]["detected_source"] == detected, r.text
                else:
                    assert (r.json()["model"], r.json()["translations"][0]["detected_source"]) == (model, detected)
