"""LibreTranslate's clients from PyPI, unmodified, against a live nmt-serve process serving a many-to-many model (an
imported NLLB-layout model, tests/importers/multilingual_fixture.py): they translate between any two of its
languages, as our own /translate does, and list every language with every other as a target."""

from __future__ import annotations

import httpx
import pytest
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI

from tests.app.conftest import MODES
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
    assert languages["ace_Arab"]["name"] == "Acehnese (Arabic)" and languages["ace"]["name"] == "Acehnese"
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
