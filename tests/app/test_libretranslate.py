"""The LibreTranslate-compatible API (/libretranslate), driven by two of LibreTranslate's clients from PyPI, unmodified,
against live nmt-serve processes: libretranslatepy (urllib, form bodies) and deep-translator's LibreTranslator
(requests, the fields in the query string). Their translations equal our own /translate's for the same model."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

import httpx
import pytest
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException, ServerException
from libretranslatepy import LibreTranslateAPI

from app.engine import EngineFailure, EngineUnavailable, OutOfMemory, QueueFull
from app.jobs.intake import extensions
from app.settings import Settings
from tests.app.conftest import MODES, serve
from tests.app.libre import ours
from tests.app.live import start_server, wait_ready

ENGLISH = "A man is playing near the water."
GERMAN = "Ein alter Mann steht im Schnee und wartet auf den Bus."
KEY = "s3cret-key"
BEARER = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module", params=MODES)
def servers(trained_checkpoint, french, request):
    """Two live servers, started together: en-de and en-fr without a key (`open`), and en-de with NMT_API_KEY; one
    process each, or (front-end) an engine process and a front-end each (NMT_FRONTENDS=1)."""
    small = {"NMT_COMPILE": "off", "NMT_MAX_NEW_TOKENS": "40", "NMT_MAX_REQUEST_CHARS": "2000",
             "NMT_FRONTENDS": "1" if request.param == "front-end" else "0"}  # fmt: skip
    procs = {
        "open": start_server(trained_checkpoint, NMT_MODELS=f"en-de={trained_checkpoint},en-fr={french}", **small),
        "keyed": start_server(trained_checkpoint, NMT_API_KEY=KEY, **small),
    }
    try:
        for proc, base in procs.values():
            wait_ready(proc, base)
        yield {name: base for name, (_, base) in procs.items()}
    finally:
        for proc, _ in procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def base(servers) -> str:
    return servers["open"]


def lt(base: str, path: str, **kw) -> httpx.Response:
    return httpx.post(f"{base}/libretranslate/{path}", timeout=30, **kw)


def test_libretranslatepy_translates_lists_languages_and_detects(base):
    client = LibreTranslateAPI(f"{base}/libretranslate")
    assert client.translate(ENGLISH, "en", "de") == ours(base, ENGLISH, model="en-de")[0]["text"]
    assert client.translate(ENGLISH, "en", "fr") == ours(base, ENGLISH, model="en-fr")[0]["text"]
    assert client.translate(ENGLISH, "auto", "de") == ours(base, ENGLISH)[0]["text"]
    assert client.translate(f"{ENGLISH}\r\n{ENGLISH}", "en", "de") == ours(base, f"{ENGLISH}\n{ENGLISH}")[0]["text"]
    assert client.languages() == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": []},
        {"code": "fr", "name": "French", "targets": []},
    ]
    for text, language in ((ENGLISH, "en"), (GERMAN, "de")):
        ranked = client.detect(text)
        assert ranked[0]["language"] == language and ranked[0]["confidence"] > 90, ranked
        confidences = [d["confidence"] for d in ranked]
        assert confidences == sorted(confidences, reverse=True) and all(0 <= c <= 100 for c in confidences)


def test_deep_translators_libre_translator_translates_one_text_and_a_batch(base):
    texts = [ENGLISH, "Two dogs are running in the park.", "A young woman is eating at the beach."]
    to_german = LibreTranslator(source="en", target="de", api_key="any", custom_url=f"{base}/libretranslate/")
    assert to_german.translate(ENGLISH) == ours(base, ENGLISH, model="en-de")[0]["text"]
    assert to_german.translate_batch(texts) == [t["text"] for t in ours(base, texts, model="en-de")]
    by_name = LibreTranslator(source="English", target="French", api_key="any", custom_url=f"{base}/libretranslate/")
    assert by_name.translate(ENGLISH) == ours(base, ENGLISH, model="en-fr")[0]["text"]
    auto = LibreTranslator(source="auto", target="de", api_key="any", custom_url=f"{base}/libretranslate/")
    assert auto.translate(ENGLISH) == ours(base, ENGLISH, model="en-de")[0]["text"]
    backwards = LibreTranslator(source="de", target="en", api_key="any", custom_url=f"{base}/libretranslate/")
    with pytest.raises(ServerException, match="ERR_BAD_REQUEST"):  # no model translates de->en: a 400
        backwards.translate(GERMAN)


def test_a_server_with_a_key_answers_the_right_key_and_refuses_a_wrong_or_missing_one_as_clients_expect(servers):
    base = servers["keyed"]
    url = f"{base}/libretranslate"
    expected = ours(base, ENGLISH, headers={"Authorization": f"Bearer {KEY}"})[0]["text"]
    assert LibreTranslateAPI(url, api_key=KEY).translate(ENGLISH, "en", "de") == expected
    assert LibreTranslator(source="en", target="de", api_key=KEY, custom_url=f"{url}/").translate(ENGLISH) == expected
    assert LibreTranslateAPI(url, api_key=KEY).detect(ENGLISH)[0]["language"] == "en"
    for key, message in (("wrong", "Invalid API key"), (None, "Please contact the server operator to get an API key")):
        for call in (lambda c: c.translate(ENGLISH, "en", "de"), lambda c: c.detect(ENGLISH)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                call(LibreTranslateAPI(url, api_key=key))
            assert refused.value.code == 403 and json.loads(refused.value.read())["error"] == message
    with pytest.raises(AuthorizationException, match="Unauthorized access with the api key wrong"):
        LibreTranslator(source="en", target="de", api_key="wrong", custom_url=f"{url}/").translate(ENGLISH)
    bearer = lt(base, "translate", data={"q": ENGLISH, "source": "en", "target": "de"},
                headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert bearer.json()["translatedText"] == expected
    assert set(bearer.json()) == {"translatedText", "confidence", "flags"}  # nmt-serve's, which the clients ignore
    queried = httpx.post(f"{url}/translate", params={"api_key": KEY}, json={"q": ENGLISH, "source": "en",
                                                                             "target": "de"})  # fmt: skip
    assert queried.status_code == 200 and queried.json()["translatedText"] == expected, queried.text  # as documented
    # what a page reads before it has a key: open, and it says a key is needed
    assert LibreTranslateAPI(url).languages()[0] == {"code": "en", "name": "English", "targets": ["de"]}
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert settings["keyRequired"] is True and settings["apiKeys"] is True


def test_json_form_multipart_and_query_string_bodies_get_the_same_answers(base):
    fields = {"q": ENGLISH, "source": "auto", "target": "de", "alternatives": "2"}
    answers = [
        lt(base, "translate", json={**fields, "alternatives": 2}).json(),
        lt(base, "translate", data=fields).json(),
        lt(base, "translate", files={k: (None, v) for k, v in fields.items()}).json(),
        lt(base, "translate", params=fields).json(),
    ]
    assert all(a == answers[0] for a in answers), answers
    assert answers[0]["translatedText"] == ours(base, ENGLISH, beam_size=3, num_hypotheses=3)[0]["text"]
    detections = [
        lt(base, "detect", json={"q": GERMAN}).json(),
        lt(base, "detect", data={"q": GERMAN}).json(),
        lt(base, "detect", files={"q": (None, GERMAN)}).json(),
    ]
    assert all(d == detections[0] for d in detections) and detections[0][0]["language"] == "de", detections


def test_alternatives_are_the_other_hypotheses_of_a_beam_one_wider(base):
    r = lt(base, "translate", json={"q": ENGLISH, "source": "en", "target": "de", "alternatives": 3}).json()
    best, *others = [h["text"] for h in ours(base, ENGLISH, beam_size=4, num_hypotheses=4)[0]["hypotheses"]]
    assert r["translatedText"] == best
    assert r["alternatives"] == [h for h in dict.fromkeys(h.strip() for h in others) if h != best.strip()]
    assert len(r["alternatives"]) <= 3 and all(a == a.strip() for a in r["alternatives"])
    assert "alternatives" not in lt(base, "translate", json={"q": ENGLISH, "source": "en", "target": "de"}).json()


def test_a_list_q_answers_a_list_with_one_detected_language_each(base):
    texts = [ENGLISH, "Two dogs are running in the park.", ""]
    r = lt(base, "translate", json={"q": texts, "source": "auto", "target": "de", "alternatives": 1}).json()
    assert r["translatedText"] == [t["text"] for t in ours(base, texts, beam_size=2, num_hypotheses=2)]
    assert len(r["detectedLanguage"]) == 3 and all(d["language"] == "en" for d in r["detectedLanguage"])
    assert all(0 < d["confidence"] <= 100 for d in r["detectedLanguage"])
    assert len(r["alternatives"]) == 3 and all(isinstance(a, list) for a in r["alternatives"])
    plain = lt(base, "translate", json={"q": texts, "source": "en", "target": "fr"}).json()
    mine = ours(base, texts, model="en-fr")
    assert plain == {"translatedText": [t["text"] for t in mine], "confidence": [t.get("confidence") for t in mine],
                     "flags": [t["flags"] for t in mine]}  # fmt: skip


def test_frontend_settings_and_disabled_features_answer_as_libretranslate_does(base):
    settings = httpx.get(f"{base}/libretranslate/frontend/settings").json()
    assert settings["charLimit"] == 2000 and settings["keyRequired"] is False and settings["apiKeys"] is False
    assert settings["suggestions"] is False and settings["filesTranslation"] is True
    assert {".txt", ".srt"} <= set(settings["supportedFilesFormat"]) <= set(extensions())
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "de", "name": "German"}}  # fmt: skip
    suggest = lt(base, "suggest", data={"q": "A dog.", "s": "Ein Hund.", "source": "en", "target": "de"})
    assert (suggest.status_code, suggest.json()["error"]) == (403, "Suggestions are disabled on this server.")


def test_translate_file_answers_once_done_with_a_url_that_downloads_the_translated_file(servers):
    base = servers["open"]
    paragraphs = [ENGLISH, "Two dogs are running in the park."]
    french = [t["text"] for t in ours(base, paragraphs, model="en-fr")]
    # a name with a space, "#" and a letter outside ASCII: the URL has them percent-encoded, as the docs' urlopen needs
    spaced = ("my notes #2 für", "my%20notes%20%232%20f%C3%BCr")
    for source, (name, encoded) in (("en", ("notes", "notes")), ("auto", spaced)):
        r = lt(base, "translate_file", files={"file": (f"{name}.txt", "\n\n".join(paragraphs).encode())},
               data={"source": source, "target": "fr"})  # fmt: skip
        assert r.status_code == 200 and set(r.json()) == {"translatedFileUrl"}, r.text
        url = r.json()["translatedFileUrl"]
        assert re.fullmatch(rf"{base}/libretranslate/download_file/[0-9a-f]{{32}}\.{encoded}\.fr\.txt", url), url
        with urllib.request.urlopen(url) as download:
            assert f"filename*=UTF-8''{encoded}.fr.txt" in download.headers["content-disposition"]
            assert download.read().decode() == "\n\n".join(french)
        job_id = url.rsplit("/", 1)[1][:32]  # a job of LibreTranslate's API: not /files' to show or delete
        assert httpx.delete(f"{base}/files/{job_id}").status_code == 404 and httpx.get(url).status_code == 200
    keyed = servers["keyed"]
    file = {"file": ("a.txt", b"A dog.")}
    refused = lt(keyed, "translate_file", files=file, data={"source": "en", "target": "de"})
    assert (refused.status_code, refused.json()["error"]) == (403, "Please contact the server operator to get an API key")  # fmt: skip
    taken = lt(keyed, "translate_file", files=file, data={"source": "en", "target": "de", "api_key": KEY})
    assert httpx.get(taken.json()["translatedFileUrl"]).text == ours(keyed, "A dog.", headers=BEARER)[0]["text"]


@pytest.mark.parametrize(
    "files, data, status, message",
    [
        ({}, {"source": "en", "target": "de"}, 400, "Invalid request: missing file parameter"),
        ({"file": ("a.txt", b"A dog.")}, {"target": "de"}, 400, "Invalid request: missing source parameter"),
        ({"file": ("a.exe", b"MZ")}, {"source": "en", "target": "de"}, 400, "file format not supported"),
        ({"file": ("a.txt", b"\xff")}, {"source": "en", "target": "de"}, 400, "the text file is not UTF-8"),
        ({"file": ("a.txt", b"A dog.")}, {"source": "en", "target": "xx"}, 400, "xx is not supported"),
    ],
    ids=["no file", "no source", "unknown format", "not utf-8", "unknown target"],
)
def test_bad_files_get_libretranslates_400(base, files, data, status, message):
    r = lt(base, "translate_file", files=files or {"other": (None, "x")}, data=data)
    assert r.status_code == status and message in r.json()["error"], r.text


def test_download_file_of_an_unknown_name_is_a_404_and_a_malformed_one_a_400(base):
    r = httpx.get(f"{base}/libretranslate/download_file/{'0' * 32}.a.txt")
    assert r.status_code == 404 and "there is no translated file" in r.json()["error"], r.text
    r = httpx.get(f"{base}/libretranslate/download_file/x.txt")
    assert (r.status_code, r.json()["error"]) == (400, "Invalid filename")


OK = {"q": ENGLISH, "source": "en", "target": "de"}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({**OK, "q": ""}, "Invalid request: missing q parameter"),
        ({"q": ENGLISH, "target": "de"}, "Invalid request: missing source parameter"),
        ({"q": ENGLISH, "source": "en"}, "Invalid request: missing target parameter"),
        ({**OK, "q": 5}, "Invalid request: q parameter must be a string or a list of strings"),
        ({**OK, "q": ["a", None]}, "Invalid request: q parameter must be a string or a list of strings"),
        ({**OK, "source": 7}, "Invalid request: source parameter must be a string"),
        ({**OK, "source": " "}, "Invalid request: missing source parameter"),  # not every model's source
        ({**OK, "target": "xx"}, "xx is not supported"),
        ({**OK, "target": "x" * 100_000}, "x" * 37 + "... is not supported"),  # not the 100 KB name echoed
        ({**OK, "source": "xx"}, "xx is not supported"),
        ({**OK, "source": "de", "target": "fr"}, "French (fr) is not available as a target language from German (de)"),
        ({**OK, "format": "xml"}, "xml format is not supported"),
        ({**OK, "alternatives": "many"}, "Invalid request: alternatives parameter is not a number"),
        ({**OK, "alternatives": 1.5}, "Invalid request: alternatives parameter is not a number"),
        ({**OK, "alternatives": "--2"}, "Invalid request: alternatives parameter is not a number"),  # was a 500
        ({**OK, "alternatives": "\u00b2"}, "Invalid request: alternatives parameter is not a number"),  # "²" too
        ({**OK, "alternatives": 8}, "Invalid request: alternatives parameter must be <= 7"),
        ({**OK, "q": "a" * 2001}, "Invalid request: request (2001) exceeds text limit (2000)"),
        ({**OK, "q": ["a"] * 65}, "Invalid request: request (65) exceeds text limit (64)"),
        ([OK], "Invalid JSON format"),
    ],
)
def test_bad_translate_requests_get_a_400_in_libretranslates_shape(base, body, message):
    r = lt(base, "translate", json=body)
    assert r.status_code == 400 and message in r.json()["error"], r.text


def test_a_language_is_read_in_any_spelling_our_translate_reads(base):
    """`deu`, `de-DE`, `en-US` were "not supported" here with pair models, while /translate took them."""
    expected = ours(base, ENGLISH, source="en", target="de")[0]["text"]
    for source, target in (("en", "deu"), ("en", "de-DE"), ("en-US", "de"), ("eng", "DE"), ("en_GB", "de_AT")):
        assert ours(base, ENGLISH, source=source, target=target)[0]["text"] == expected
        r = lt(base, "translate", data={"q": ENGLISH, "source": source, "target": target})
        assert r.status_code == 200 and r.json()["translatedText"] == expected, (source, target, r.text)


def test_a_field_given_twice_is_read_by_its_first_value_and_alternatives_by_int(base):
    """As Flask's request.values, which LibreTranslate reads: the query string's, then the form's, each field's first
    value; `alternatives` as int() reads it ("+1", 1.0)."""
    form = urllib.parse.urlencode([("q", ENGLISH), ("q", "A cat."), ("source", "en"), ("target", "de")])
    first = lt(base, "translate", content=form, headers={"content-type": "application/x-www-form-urlencoded"})
    assert first.json()["translatedText"] == ours(base, ENGLISH)[0]["text"], first.text
    queried = httpx.post(f"{base}/libretranslate/translate?target=de&target=fr", data={"q": ENGLISH, "source": "en"})
    assert queried.json()["translatedText"] == ours(base, ENGLISH)[0]["text"], queried.text
    for n in ("+1", 1.0):
        r = lt(base, "translate", json={**OK, "alternatives": n})
        assert r.status_code == 200 and len(r.json()["alternatives"]) <= 1, r.text


def test_unreadable_bodies_and_a_bad_detect_get_a_400(base):
    broken = lt(base, "translate", content=b'{"q": ', headers={"content-type": "application/json"})
    assert (broken.status_code, broken.json()["error"]) == (400, "Invalid JSON format")
    multipart = lt(base, "translate", content=b"--x\r\nnonsense", headers={"content-type": "multipart/form-data"})
    assert multipart.status_code == 400 and multipart.json()["error"].startswith("Invalid request"), multipart.text
    missing = lt(base, "detect", data={})
    assert (missing.status_code, missing.json()["error"]) == (400, "Invalid request: missing q parameter")


def test_html_keeps_its_tags_around_the_translation_of_its_text(base):
    page = f"<p>{ENGLISH.replace('playing', '<b>playing</b>')}</p>"
    r = lt(base, "translate", json={**OK, "q": page, "format": "html"})
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    assert out.startswith("<p>") and out.endswith("</p>") and out.count("<b>") == out.count("</b>") == 1, out
    assert re.sub(r"<[^>]+>", "", out) == ours(base, ENGLISH)[0]["text"]


# ---- the engine's failures, in process (tests/app/conftest.py's serve) ------------------------------------------


@pytest.fixture(scope="module")
async def served(trained_checkpoint):
    async with serve(Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False)) as pair:
        yield pair


@pytest.mark.anyio
@pytest.mark.parametrize(
    "failure, status, message",
    [
        (QueueFull("the queue is full"), 429, "Slowdown: the queue is full"),
        (EngineFailure("the model raised"), 500, "the model raised"),
        (OutOfMemory("out of memory"), 503, "out of memory"),
        (EngineUnavailable("the server is shutting down"), 503, "the server is shutting down"),
    ],
)
async def test_engine_failures_answer_libretranslates_statuses(served, monkeypatch, failure, status, message):
    app, client = served

    async def failing(*args, **kwargs):
        raise failure

    monkeypatch.setattr(app.state.engine, "translate", failing)
    r = await client.post("/libretranslate/translate", json=OK)
    assert (r.status_code, r.json()["error"]) == (status, message)
    assert (r.headers.get("retry-after") is not None) == (status == 429)
