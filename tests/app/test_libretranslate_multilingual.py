"""LibreTranslate's clients from PyPI, unmodified, against a live nmt-serve process serving a many-to-many model (an
imported NLLB-layout model, tests/importers/multilingual_fixture.py): they translate between any two of its
languages, as our own /translate does, and list every language with every other as a target."""

from __future__ import annotations

import httpx
import pytest
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI

from app.settings import Settings
from tests.app.conftest import MODES, serve
from tests.app.libre import ours
from tests.app.live import start_server, wait_ready
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import import_all, model_directories

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    sources = model_directories(tmp_path_factory.mktemp("sources"), ("nllb",))
    return import_all(sources, tmp_path_factory.mktemp("imported"))["nllb"]


@pytest.fixture(scope="module", params=MODES)
def base(imported, request):
    """A live server of the imported NLLB-layout model: one process, or an engine process and a front-end."""
    proc, url = start_server(imported, NMT_COMPILE="off", NMT_MAX_NEW_TOKENS="16", NMT_MAX_INPUT_TOKENS="64",
                             NMT_FRONTENDS="1" if request.param == "front-end" else "0")  # fmt: skip
    try:
        wait_ready(proc, url)
        yield url
    finally:
        proc.kill()
        proc.wait()


def test_libretranslatepy_translates_between_any_two_languages_and_lists_them(base):
    client = LibreTranslateAPI(f"{base}/libretranslate")
    for source, target in (("de", "fr"), ("fr", "en"), ("en", "de"), ("de", "ja")):
        text = held_out_sentences(source if source != "ja" else "en")[3]
        assert client.translate(text, source, target) == ours(base, text, source=source, target=target)[0]["text"]
    languages = {x["code"]: x for x in client.languages()}
    assert len(languages) == 202 and {"de", "fr", "en", "ja", "zh", "zh-Hant"} <= set(languages)
    assert languages["de"]["name"] == "German" and len(languages["de"]["targets"]) == 201
    # every language by its name, as LibreTranslate's clients show them (they were named by code: "hne", "af")
    assert (languages["af"]["name"], languages["hne"]["name"], languages["zh-Hant"]["name"]) == (
        "Afrikaans", "Chhattisgarhi", "Chinese (Traditional)")  # fmt: skip
    assert languages["ace-Arab"]["name"] == "Acehnese (Arabic)" and languages["ace"]["name"] == "Acehnese"
    assert not [x for x in languages.values() if x["name"] == x["code"]]
    assert "de" not in languages["de"]["targets"] and "fr" in languages["de"]["targets"]
    settings = httpx.get(f"{base}/libretranslate/frontend/settings", timeout=10).json()
    assert settings["language"]["target"] == {"code": "fr", "name": "French"}  # the model's saved target language


def test_deep_translators_libre_translator_translates_between_two_languages(base):
    texts = held_out_sentences("fr")[:3]
    to_german = LibreTranslator(source="fr", target="de", api_key="any", custom_url=f"{base}/libretranslate/")
    assert to_german.translate_batch(texts) == [t["text"] for t in ours(base, texts, source="fr", target="de")]
    by_name = LibreTranslator(source="German", target="English", api_key="any", custom_url=f"{base}/libretranslate/")
    german = held_out_sentences("de")[0]
    assert by_name.translate(german) == ours(base, german, source="de", target="en")[0]["text"]


def test_languages_are_listed_as_bcp_47_tags_and_libretranslates_own_codes_are_read(base):
    """Every language by a hyphenated tag, as LibreTranslate writes them (`ace-Arab` as `az-Arab`: NLLB's `ace_Arab`
    was listed as it is), each of them translating; `zt` and `pb`, which LibreTranslate's clients send for
    Traditional Chinese and Brazilian Portuguese, are read as `zh-Hant` and `pt-BR`."""
    languages = httpx.get(f"{base}/libretranslate/languages", timeout=10).json()
    codes = [x["code"] for x in languages]
    assert not [c for c in codes if "_" in c] and {"ace-Arab", "bjn-Arab", "taq-Tfng", "az-Arab"} <= set(codes)
    tagged = [c for c in codes if "-" in c]
    for code in tagged:
        r = httpx.post(f"{base}/libretranslate/translate", json={"q": "A dog.", "source": "en", "target": code},
                       timeout=30)  # fmt: skip
        assert r.status_code == 200, (code, r.text)
        assert r.json()["translatedText"] == ours(base, "A dog.", source="en", target=code)[0]["text"], code
    for sent, meant in (("zt", "zh-Hant"), ("pb", "pt-BR")):
        r = httpx.post(f"{base}/libretranslate/translate", json={"q": "A dog.", "source": "en", "target": sent},
                       timeout=30)  # fmt: skip
        assert r.status_code == 200, (sent, r.text)
        assert r.json()["translatedText"] == ours(base, "A dog.", source="en", target=meant)[0]["text"], sent
        back = httpx.post(f"{base}/libretranslate/translate", json={"q": "A dog.", "source": sent, "target": "en"},
                          timeout=30)  # fmt: skip
        assert back.json()["translatedText"] == ours(base, "A dog.", source=meant, target="en")[0]["text"], sent


TEXT = "A dog runs."


@pytest.mark.anyio
@pytest.mark.parametrize("pair_first", [True, False], ids=["en-de first", "nllb first"])
async def test_every_api_gives_a_pair_to_the_first_model_in_nmt_models_order_that_translates_it(
    imported, german, pair_first
):
    """LibreTranslate's routes took an exact pair model's pair first whatever the order, and any other spelling
    (`deu`, `de-DE`, `en-US`) to a many-to-many model: /translate and DeepL's routes gave it to the first model."""
    order = [f"en-de={german}", f"nllb={imported}"]
    settings = Settings(models=",".join(order if pair_first else order[::-1]), compile=False, max_new_tokens=8,
                        max_input_tokens=64)  # fmt: skip
    async with serve(settings) as (_, client):
        by_model = {}
        for model in ("en-de", "nllb"):
            r = await client.post("/translate", json={"text": TEXT, "model": model, "source": "en", "target": "de"})
            by_model[model] = r.json()["translations"][0]["text"]
        assert by_model["en-de"] != by_model["nllb"], by_model
        first = by_model["en-de" if pair_first else "nllb"]
        for source, target in (("en", "de"), ("en", "deu"), ("en", "de-DE"), ("eng", "de"), ("en-US", "DE")):
            ours_ = await client.post("/translate", json={"text": TEXT, "source": source, "target": target})
            libre = await client.post("/libretranslate/translate", data={"q": TEXT, "source": source, "target": target})
            assert libre.status_code == 200, (source, target, libre.text)
            said = (ours_.json()["translations"][0]["text"], libre.json()["translatedText"])
            assert said == (first, first), (source, target, said)
        for source, target in (("EN", "DE"), ("en", "deu"), ("eng", "DE"), ("EN-US", "de")):
            fields = {"text": TEXT, "source_lang": source, "target_lang": target}
            deepl = await client.post("/v2/translate", data=fields)
            assert deepl.status_code == 200, (source, target, deepl.text)
            assert deepl.json()["translations"] == [{"detected_source_language": "EN", "text": first}], (source, target)
        # DeepL's form of a language named by its ISO 639-3 code (it said DEU), and no "auto" source, as DeepL's
        r = await client.post("/v2/translate", data={"text": "Ein Hund.", "source_lang": "deu", "target_lang": "FR"})
        assert r.json()["translations"][0]["detected_source_language"] == "DE", r.text
        r = await client.post("/v2/translate", data={"text": TEXT, "source_lang": "auto", "target_lang": "DE"})
        assert r.status_code == 400 and r.json()["message"].startswith("Value for 'source_lang' not supported: auto")
