"""The DeepL-compatible API's own behaviour (tests/app/test_deepl_clients.py drives it with DeepL's clients): JSON and
form bodies alike, DeepL's codes and statuses for what it refuses, the key as DeepL sends it, the glossaries shared
with our /glossaries, and calls from other origins (CORS, preflight included) on every API."""

from __future__ import annotations

import pytest

from app import glossaries as g
from app.settings import Settings
from tests.app.conftest import MODES, english_to, serve, serve_in

pytestmark = pytest.mark.anyio
TEXT = "A man is riding a bike."


@pytest.fixture(scope="module", params=MODES)
async def served(german, french, tmp_path_factory, request):
    settings = Settings(
        models=f"en-de={german},en-fr={french}", max_new_tokens=8, max_batch_texts=4, max_request_chars=200,
        compile=False, glossary_dir=tmp_path_factory.mktemp("glossaries"),
    )  # fmt: skip
    async with serve_in(request.param, settings) as pair:
        yield pair


@pytest.fixture
def client(served):
    return served[1]


async def ours(client, text, **body) -> list[str]:
    r = await client.post("/translate", json={"text": text, **body})
    assert r.status_code == 200, r.text
    return [t["text"] for t in r.json()["translations"]]


async def test_a_form_of_raw_utf_8_is_read_as_utf_8_as_deepl_and_libretranslate_read_it(client):
    """Found by black-box testing: `curl -d 'text=ßßßß'` sends the text's UTF-8 bytes as they are (not percent-encoded),
    and Starlette's form parser read them as Latin-1: 8 billed characters and a translation of "ÃÃÃÃ"."""
    raw = {"content-type": "application/x-www-form-urlencoded"}
    text = "A naïve dog — ßß, 狗."
    fields = {"text": text, "target_lang": "DE", "show_billed_characters": "1"}
    encoded = (await client.post("/v2/translate", data=fields)).json()
    r = await client.post(
        "/v2/translate", content="&".join(f"{k}={v}" for k, v in fields.items()).encode(), headers=raw
    )
    assert r.json() == encoded and encoded["translations"][0]["billed_characters"] == len(text), r.text
    fields = {"q": text, "source": "en", "target": "de"}
    encoded = (await client.post("/libretranslate/translate", data=fields)).json()
    r = await client.post(
        "/libretranslate/translate", content="&".join(f"{k}={v}" for k, v in fields.items()).encode(), headers=raw
    )
    assert r.json() == encoded and "translatedText" in encoded, r.text
    bad = await client.post("/v2/translate", content=b"text=A dog \xff runs.&target_lang=DE", headers=raw)
    assert bad.status_code == 200, bad.text  # a byte that is not UTF-8: replaced, as Flask does, not a 500


async def test_json_form_and_the_root_mount_get_the_same_answer_as_our_api(client):
    texts = ["Two dogs play.", TEXT]
    expected = {
        "translations": [
            {"detected_source_language": "EN", "text": t, "billed_characters": len(s)}
            for s, t in zip(texts, await ours(client, texts), strict=True)
        ]
    }
    fields = {"text": texts, "target_lang": "DE", "show_billed_characters": True}
    assert (await client.post("/deepl/v2/translate", json=fields)).json() == expected
    form = {**fields, "show_billed_characters": "1", "source_lang": "EN"}
    assert (await client.post("/deepl/v2/translate", data=form)).json() == expected
    assert (await client.post("/v2/translate", data=form, files={"x": b""})).json() == expected  # multipart too
    r = await client.post("/deepl/v2/translate", data={"text": TEXT, "target_lang": "fr"})
    assert r.json() == {
        "translations": [{"detected_source_language": "EN", "text": (await ours(client, TEXT, model="en-fr"))[0]}]
    }
    unsplit = {"text": f"{TEXT} {TEXT}", "target_lang": "DE", "split_sentences": "0"}
    assert (await client.post("/deepl/v2/translate", data=unsplit)).json()["translations"][0]["text"] == (
        await ours(client, f"{TEXT} {TEXT}", split="none")
    )[0]
    # nonewlines: a sentence wrapped over lines is one sentence, read as if the line break were a space
    wrapped = {"text": "A man is riding\na bike. Two dogs\r\nplay.", "target_lang": "DE"}
    wrapped["split_sentences"] = "nonewlines"
    sentences = await ours(client, ["A man is riding a bike.", "Two dogs  play."])
    out = (await client.post("/deepl/v2/translate", data=wrapped)).json()["translations"][0]["text"]
    assert out == " ".join(sentences), out


async def test_ignored_tags_keep_their_text_and_come_back_as_written(client):
    page = '<p>A man rides a <b>bike</b> and <i translate="yes">a horse</i>.</p><div>Two <code>dogs</code>.</div>'
    fields = {"text": [page], "target_lang": "DE", "tag_handling": "html"}
    plain = (await client.post("/deepl/v2/translate", json=fields)).json()["translations"][0]["text"]
    assert plain == (await ours(client, page, format="html"))[0] and "<b>bike</b>" not in plain
    for ignored in (["b", "I", "div"], "b,i,div"):
        r = await client.post("/deepl/v2/translate", json={**fields, "ignore_tags": ignored})
        out = r.json()["translations"][0]["text"]
        assert "<b>bike</b>" in out and "<div>Two <code>dogs</code>.</div>" in out, out
        assert '<i translate="yes">a horse</i>' not in out  # its own attribute wins: translated
        assert "data-nmt-ignored" not in out and out.count("translate=") == 1
    # XML: <script> and <style> are elements like any other, and an ignored one inside keeps its text (it was
    # translated: the marking read their content as raw text, as HTML's)
    xml = {"text": ["<doc><script><b>A man.</b></script><style><b>A dog.</b></style></doc>"], "target_lang": "DE",
           "tag_handling": "xml", "ignore_tags": "b"}  # fmt: skip
    out = (await client.post("/deepl/v2/translate", json=xml)).json()["translations"][0]["text"]
    assert out == xml["text"][0], out
    broken = {**fields, "text": ["<p>A man is <keep>riding</p>"]}  # said where it is in the text as sent
    plain = await client.post("/deepl/v2/translate", json=broken)
    r = await client.post("/deepl/v2/translate", json={**broken, "ignore_tags": "keep"})
    assert r.status_code == 400 and r.json() == plain.json() and "1:25" in r.json()["message"], r.text


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"target_lang": "DE"}, 400, "Parameter 'text' not specified."),
        ({"text": TEXT}, 400, "Parameter 'target_lang' not specified."),
        ({"text": TEXT, "target_lang": "ES"}, 400, "Value for 'target_lang' not supported: ES"),
        ({"text": TEXT, "target_lang": "DE", "source_lang": "FR"}, 400, "no model here translates FR into DE"),
        # DeepL has no "auto": it was taken as any source by a pair model, and said "AUTO" was detected
        ({"text": TEXT, "target_lang": "DE", "source_lang": "auto"}, 400, "'source_lang' not supported: auto"),
        ({"text": TEXT, "target_lang": "DE", "source_lang": "EN-FOO"}, 400, "Value for 'source_lang' not supported"),
        ({"text": TEXT, "target_lang": "DE", "tag_handling": "md"}, 400, "Value for 'tag_handling' not supported"),
        ({"text": TEXT, "target_lang": "DE", "split_sentences": "2"}, 400, "Value for 'split_sentences' not supported"),
        ({"text": TEXT, "target_lang": "DE", "preserve_formatting": "x"}, 400, "send 0 or 1 (true or false)"),
        ({"text": TEXT, "target_lang": "DE", "formality": "more"}, 400, "'formality' is not supported for given"),
        ({"text": TEXT, "target_lang": "DE", "style_id": "x"}, 400, "style_id: style rules and translation memories"),
        ({"text": [TEXT] * 5, "target_lang": "DE"}, 413, "the request has 5 texts; the limit is 4 a request"),
        ({"text": "a" * 201, "target_lang": "DE"}, 413, "the texts have 201 characters in all; the limit is 200"),
        ({"text": TEXT, "target_lang": "DE", "glossary_id": "x"}, 400, "requires the source_lang parameter"),
        ({"text": TEXT, "target_lang": "DE", "glossary_id": "x", "source_lang": "EN"}, 404, "there is no glossary 'x'"),
        (
            {"text": TEXT, "target_lang": "DE", "glossary_ids": "a,b,c,d,e,f", "source_lang": "EN"},
            400,
            "the limit is 5",
        ),
    ],
)
async def test_what_deepl_refuses_gets_its_status_and_a_message(client, fields, status, message):
    for r in (await client.post("/deepl/v2/translate", data=fields), await client.post("/v2/translate", json=fields)):
        assert r.status_code == status and message in r.json()["message"], r.text
        assert set(r.json()) == {"message", "type"}


async def test_a_body_that_is_not_a_json_object_is_a_bad_request(client):
    r = await client.post("/deepl/v2/translate", content=b"[1]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not a JSON object" in r.json()["message"]


async def test_target_languages_are_listed_as_deepl_lists_them_and_a_pair_model_is_kept_to_its_script(
    tmp_path_factory, tiny_model, tokenizer
):
    """Spanish also as Latin American Spanish (ES-419, which /v2/translate took but no list named), Chinese as ZH and
    ZH-HANS, and ZH-HANT only where a model writes Traditional Chinese (a pair model's `zh` is Simplified: CLDR)."""
    models = ",".join(f"en-{t}={english_to(t, tmp_path_factory, tiny_model, tokenizer)}" for t in ("es", "zh"))
    async with serve(Settings(models=models, max_new_tokens=4, compile=False)) as (_, client):
        targets = (await client.get("/deepl/v2/languages", params={"type": "target"})).json()
        assert {x["language"]: x["name"] for x in targets} == {
            "ES": "Spanish", "ES-419": "Spanish (Latin American)", "ZH": "Chinese (simplified)",
            "ZH-HANS": "Chinese (simplified)",
        }  # fmt: skip
        for code in ("ES-419", "ZH-HANS", "ZH-HANT"):
            r = await client.post("/deepl/v2/translate", json={"text": ["A dog."], "target_lang": code})
            assert r.status_code == (400 if code == "ZH-HANT" else 200), (code, r.text)
        # as docs/deepl.md says: a variant no model writes is not supported (it said "no model here translates EN into
        # ZH-HANT", as if another source would do)
        assert r.json()["message"].startswith("Value for 'target_lang' not supported: ZH-HANT"), r.text
        # our API alike: a pair model is not picked for a script it does not write (it answered in Simplified)
        for target, status in (("zh-CN", 200), ("zh-Hans", 200), ("zh-TW", 422), ("zh-Hant", 422)):
            r = await client.post("/translate", json={"text": "A dog.", "target": target})
            assert r.status_code == status, (target, r.text)
        r = await client.post("/translate", json={"text": "A dog.", "target": "zh-Hant", "model": "en-zh"})
        assert r.status_code == 422 and "not target 'zh-Hant' (it does not write the Hant script)" in r.text, r.text


async def test_languages_usage_and_glossary_pairs(client):
    assert (await client.get("/deepl/v2/languages")).json() == [{"language": "EN", "name": "English"}]
    targets = (await client.get("/deepl/v2/languages", params={"type": "target"})).json()
    assert targets == [
        {"language": "DE", "name": "German", "supports_formality": False},
        {"language": "FR", "name": "French", "supports_formality": False},
    ]
    r = await client.request("GET", "/deepl/v2/languages", data={"type": "target"})  # as DeepL's Python client sends it
    assert r.json() == targets
    assert (await client.get("/deepl/v2/languages", params={"type": "x"})).status_code == 400
    pairs = (await client.get("/deepl/v2/glossary-language-pairs")).json()
    assert pairs == {
        "supported_languages": [{"source_lang": "en", "target_lang": "de"}, {"source_lang": "en", "target_lang": "fr"}]
    }
    before = (await client.get("/deepl/v2/usage")).json()["character_count"]
    await client.post("/deepl/v2/translate", data={"text": ["abc", "de"], "target_lang": "DE"})
    assert (await client.get("/v2/usage")).json() == {"character_count": before + 5, "character_limit": 10**12}


async def test_glossaries_are_shared_with_our_api_and_used_in_order(served, client, monkeypatch):
    decodings = []
    engine = served[0].state.models.engines["en-de"]
    real = engine.translate

    async def spy(*args, **kwargs):
        decodings.append(kwargs["decoding"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(engine, "translate", spy)
    body = {"name": "one", "source_lang": "EN", "target_lang": "DE", "entries": "man\tMann\nbike\tRad"}
    r = await client.post("/deepl/v2/glossaries", json=body)
    assert r.status_code == 201 and r.json()["source_lang"] == "en" and r.json()["entry_count"] == 2
    one = r.json()["glossary_id"]
    ours_ = await client.post(
        "/glossaries",
        json={"name": "two", "source_lang": "en", "target_lang": "de", "entries": {"bike": "Velo", "dog": "Hund"}},
    )
    two = ours_.json()["glossary_id"]
    assert [x["glossary_id"] for x in (await client.get("/deepl/v2/glossaries")).json()["glossaries"]][-2:] == [
        one,
        two,
    ]
    assert (await client.get(f"/deepl/v2/glossaries/{two}")).json() == ours_.json()

    fields = {"text": TEXT, "source_lang": "EN", "target_lang": "DE", "glossary_ids": f"{two},{one}"}
    assert (await client.post("/deepl/v2/translate", data=fields)).status_code == 200
    assert decodings[-1].glossary == (("bike", "Velo"), ("dog", "Hund"), ("man", "Mann"))
    await client.post("/deepl/v2/translate", json={**fields, "glossary_ids": None, "glossary_id": one})
    assert decodings[-1].glossary == (("man", "Mann"), ("bike", "Rad"))
    r = await client.post("/deepl/v2/translate", data={**fields, "target_lang": "FR"})
    assert r.status_code == 400 and r.json()["message"] == (
        f"the glossary {two} is EN->DE; the request is EN->FR (the glossary's pair must be the request's)"
    )
    r = await client.get(f"/deepl/v2/glossaries/{one}/entries", headers={"Accept": "text/tab-separated-values"})
    assert (r.status_code, r.text, r.headers["content-type"]) == (
        200,
        "man\tMann\nbike\tRad",
        "text/tab-separated-values; charset=utf-8",
    )
    r = await client.get(f"/deepl/v2/glossaries/{one}/entries", headers={"Accept": "application/json"})
    assert r.status_code == 415 and "served as text/tab-separated-values" in r.json()["message"]
    assert (await client.delete(f"/deepl/v2/glossaries/{one}")).status_code == 204
    assert (await client.get(f"/glossaries/{one}")).status_code == 404
    r = await client.get(f"/deepl/v2/glossaries/{one}/entries")
    assert (r.status_code, r.json()) == (404, {"message": f"there is no glossary {one}", "type": "not_found"})
    for path in ("/v3/glossaries", "/deepl/v3/glossaries"):  # not here, said as DeepL's clients read it (`message`)
        r = await client.get(path)
        assert r.status_code == 404 and "message" in r.json(), (path, r.text)


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        (
            {"entries": "a\tb", "target_lang": "ES"},
            400,
            "Unsupported glossary language pair en->es: 2 pairs are served (en->de, en->fr; GET /v2/glossary-language-"
            "pairs lists them all)",  # at most 20 of them: an NLLB server's message was 333 KB
        ),
        ({"entries": "a b"}, 400, "line 1 has no tab between its source and target terms"),
        ({"entries": "a,b\na,c", "entries_format": "csv"}, 400, "line 2 repeats the source term 'a' of line 1"),
        ({"entries": "a\tb", "entries_format": "xlsx"}, 400, "Value for 'entries_format' not supported"),
        ({"entries": "a\tb", "name": ""}, 400, "Parameter 'name' not specified."),
        # codes /v2/translate refuses (they were stored as en->de), "auto", and a variant: a glossary's are languages
        ({"entries": "a\tb", "source_lang": "en-FOO"}, 400, "Value for 'source_lang' not supported: en-FOO"),
        ({"entries": "a\tb", "target_lang": "de_bar"}, 400, "Value for 'target_lang' not supported: de_bar"),
        ({"entries": "a\tb", "source_lang": "auto"}, 400, "Value for 'source_lang' not supported: auto"),
        ({"entries": "a\tb", "target_lang": "DE-DE"}, 400, "Value for 'target_lang' not supported: DE-DE"),
        ({"entries": "a\tb", "target_lang": "EN-GB"}, 400, "Value for 'target_lang' not supported: EN-GB"),
        ({"entries": "".join(f"t{i}\tx\n" for i in range(g.MAX_ENTRIES + 1))}, 413, "the limit is 10000"),
    ],
)
async def test_a_glossary_deepl_refuses_gets_its_status(client, fields, status, message):
    body = {"name": "x", "source_lang": "EN", "target_lang": "DE", **fields}
    r = await client.post("/deepl/v2/glossaries", data=body)
    assert r.status_code == status and message in r.json()["message"], r.text


async def test_a_language_named_by_its_iso_639_3_code_is_answered_and_kept_in_deepls_form(client):
    """/v2/translate took `eng` and said ENG was detected; /v2/glossaries refused `eng` and `deu`."""
    for code in ("eng", "ENG", "en"):
        r = await client.post("/v2/translate", data={"text": TEXT, "source_lang": code, "target_lang": "deu"})
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == [{"detected_source_language": "EN", "text": (await ours(client, TEXT))[0]}]
    body = {"name": "x", "source_lang": "eng", "target_lang": "DEU", "entries": "man\tMann"}
    r = await client.post("/deepl/v2/glossaries", data=body)
    assert r.status_code == 201 and (r.json()["source_lang"], r.json()["target_lang"]) == ("en", "de"), r.text
    used = {"text": TEXT, "source_lang": "EN", "target_lang": "DE", "glossary_id": r.json()["glossary_id"]}
    assert (await client.post("/v2/translate", data=used)).status_code == 200
    assert (await client.delete(f"/v2/glossaries/{r.json()['glossary_id']}")).status_code == 204
    # ISO 639-2/B's `ger` too, in the answer and in the glossary kept (it was answered "de" and kept as "ger")
    r = await client.post("/deepl/v2/glossaries", data={**body, "target_lang": "ger"})
    assert r.status_code == 201 and r.json()["target_lang"] == "de", r.text
    kept = (await client.get(f"/glossaries/{r.json()['glossary_id']}")).json()
    assert (kept["source_lang"], kept["target_lang"]) == ("en", "de"), kept
    assert (await client.delete(f"/v2/glossaries/{r.json()['glossary_id']}")).status_code == 204


async def test_a_document_from_auto_is_refused_at_once_as_deepl_refuses_it(client):
    """It was taken (an id and a key), then its job failed."""
    for source in ("auto", "EN-FOO"):
        r = await client.post("/v2/document", data={"target_lang": "DE", "source_lang": source},
                              files={"file": ("a.txt", b"A dog runs.")})  # fmt: skip
        assert r.status_code == 400 and r.json()["message"].startswith(
            f"Value for 'source_lang' not supported: {source}"
        ), r.text


async def test_the_glossary_quota_is_deepls_456(client, monkeypatch):
    monkeypatch.setattr(g, "MAX_GLOSSARIES", len((await client.get("/glossaries")).json()["glossaries"]))
    r = await client.post(
        "/deepl/v2/glossaries", data={"name": "x", "source_lang": "EN", "target_lang": "DE", "entries": "a\tb"}
    )
    assert r.status_code == 456 and "delete one first" in r.json()["message"]
    r = await client.post(
        "/glossaries", json={"name": "x", "source_lang": "en", "target_lang": "de", "entries": {"a": "b"}}
    )
    assert r.status_code == 422 and r.json()["type"] == "too_many_glossaries"


async def test_the_key_is_read_as_deepl_sends_it_and_a_wrong_one_is_refused_with_403(german, tmp_path):
    async with serve(Settings(model_dir=german, compile=False, api_key="k", glossary_dir=tmp_path)) as (_, client):
        fields = {"text": TEXT, "target_lang": "DE"}
        for headers, status in [
            ({}, 403), ({"Authorization": "DeepL-Auth-Key wrong"}, 403), ({"Authorization": "k"}, 403),
            ({"Authorization": "DeepL-Auth-Key k"}, 200), ({"Authorization": "Bearer k"}, 200),
        ]:  # fmt: skip
            for r in (
                await client.post("/deepl/v2/translate", data=fields, headers=headers),
                await client.get("/deepl/v2/glossaries", headers=headers),
                await client.get("/v2/usage", headers=headers),
            ):
                assert r.status_code == status, (headers, r.text)
                if status == 403:
                    assert r.json()["type"] == "forbidden" and "DeepL-Auth-Key" in r.json()["message"]


async def test_any_origin_may_call_the_apis_from_a_browser_preflight_included(client):
    origin = {"Origin": "https://app.example.com"}
    for path in ("/deepl/v2/translate", "/libretranslate/translate", "/translate", "/glossaries"):
        preflight = await client.options(
            path, headers={**origin, "Access-Control-Request-Method": "POST",
                           "Access-Control-Request-Headers": "authorization, content-type"},
        )  # fmt: skip
        assert preflight.status_code == 200, path
        assert preflight.headers["access-control-allow-origin"] == "*"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert preflight.headers["access-control-allow-headers"] == "authorization, content-type"
    r = await client.post("/deepl/v2/translate", data={"text": TEXT, "target_lang": "DE"}, headers=origin)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    r = await client.post("/translate", json={"text": TEXT}, headers=origin)  # the fast path's answer too
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    r = await client.post("/deepl/v2/translate", data={"target_lang": "DE"}, headers=origin)
    assert r.status_code == 400 and r.headers["access-control-allow-origin"] == "*"


async def test_cors_can_name_the_origins_or_be_turned_off(german, tmp_path):
    settings = Settings(
        model_dir=german, compile=False, glossary_dir=tmp_path, cors_origins="https://a.example/, https://b.example"
    )
    async with serve(settings) as (_, client):
        ask = {"Access-Control-Request-Method": "POST"}
        ok = await client.options("/deepl/v2/translate", headers={"Origin": "https://b.example", **ask})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://b.example"
        refused = await client.options("/deepl/v2/translate", headers={"Origin": "https://c.example", **ask})
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
        assert refused.json() == {  # JSON, as every error (it was Starlette's plain text)
            "error": "Disallowed CORS origin: pages of https://a.example, https://b.example may call this server "
            "(NMT_CORS_ORIGINS)", "type": "cors_refused",
        }  # fmt: skip
    async with serve(Settings(model_dir=german, compile=False, glossary_dir=tmp_path, cors_origins="")) as (_, client):
        r = await client.post(
            "/deepl/v2/translate", data={"text": TEXT, "target_lang": "DE"}, headers={"Origin": "https://a.example"}
        )
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
