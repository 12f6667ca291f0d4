"""Glossaries on our own API: /glossaries stores them (JSON, TSV or CSV entries), /translate uses one by `glossary_id`
or inline (`glossary`), checked against the model the request goes to; every refusal says what was wrong."""

from __future__ import annotations

import pytest

from app.glossaries import MAX_ENTRIES
from app.settings import BUNDLED_MODEL_DIR, Settings
from tests.app.conftest import MODES, serve, serve_in

pytestmark = pytest.mark.anyio
TEXT = "A man is riding a bike."


@pytest.fixture(scope="module", params=MODES)
async def served(german, french, tmp_path_factory, request):
    settings = Settings(
        models=f"en-de={german},en-fr={french}", max_new_tokens=40, compile=False,
        glossary_dir=tmp_path_factory.mktemp("glossaries"),
    )  # fmt: skip
    async with serve_in(request.param, settings) as pair:
        yield pair


@pytest.fixture
def client(served):
    return served[1]


@pytest.fixture
def decodings(served, monkeypatch) -> list:
    """The Decoding of each translation the engines are asked for (the fast path's and the route's)."""
    seen = []
    for name, engine in served[0].state.models.engines.items():
        for method in ("translate", "translate_stream"):
            real = getattr(engine, method)

            async def spy(*args, _real=real, _name=name, **kwargs):
                seen.append((_name, kwargs.get("decoding", args[3] if len(args) > 3 else None)))
                return await _real(*args, **kwargs)

            monkeypatch.setattr(engine, method, spy)
    return seen


async def create(client, **body) -> dict:
    r = await client.post("/glossaries", json={"name": "test", "source_lang": "en", "target_lang": "de", **body})
    assert r.status_code == 201, r.text
    return r.json()


async def test_a_glossary_from_an_object_tsv_or_csv_is_stored_listed_read_and_deleted(client):
    made = [
        await create(client, entries={"bike": "Velo", " city bike ": "Stadtrad"}),
        await create(client, entries="bike\tVelo\ncity bike\tStadtrad\n", name="tsv"),
        await create(client, entries='bike,Velo\r\n"city bike",Stadtrad,en,de\r\n', entries_format="csv", name="csv"),
    ]
    for glossary in made:
        assert glossary["entry_count"] == 2 and glossary["ready"] is True
        r = await client.get(f"/glossaries/{glossary['glossary_id']}/entries")
        assert r.json() == {
            "glossary_id": glossary["glossary_id"],
            "entries": {"bike": "Velo", "city bike": "Stadtrad"},
        }
        assert (await client.get(f"/glossaries/{glossary['glossary_id']}")).json() == glossary
    listed = (await client.get("/glossaries")).json()["glossaries"]
    assert [x for x in listed if x["glossary_id"] in {m["glossary_id"] for m in made}] == made
    for glossary in made:
        assert (await client.delete(f"/glossaries/{glossary['glossary_id']}")).status_code == 204
    gone = made[0]["glossary_id"]
    for r in (await client.get(f"/glossaries/{gone}"), await client.delete(f"/glossaries/{gone}")):
        assert r.status_code == 404 and r.json() == {"error": f"there is no glossary {gone}", "type": "not_found"}


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"entries": "bike Velo"}, 422, "line 1 has no tab between its source and target terms"),
        ({"entries": "a,b,c", "entries_format": "csv"}, 422, "line 1 has 3 fields"),
        ({"entries": {"bike": "Velo", "bike ": "Rad"}}, 422, "entry 'bike ' repeats the source term 'bike' of entry"),
        ({"entries": {"bike": ""}}, 422, "entry 'bike' has an empty target term"),
        ({"entries": {}}, 422, "the glossary has no entries"),
        ({"entries": "a\tb", "entries_format": "xml"}, 422, "entries_format: input should be 'tsv' or 'csv'"),
        ({"entries": {"a": "b"}, "target_lang": "es"}, 422, "no model here translates en->es"),
        ({"entries": {"a": "b"}, "name": ""}, 422, "the glossary's name is empty"),
        ({"entries": {"a": "b"}, "source_lang": "e n"}, 422, "source_lang 'e n' is not a language code"),
        ({"entries": {"a": "b"}, "source_lang": "auto"}, 422, "source_lang 'auto' is not a language code"),
        ({"entries": {"a": 1}}, 422, "entries must be an object of source term -> target term (strings), or TSV"),
        ({"entries": {f"t{i}": "x" for i in range(MAX_ENTRIES + 1)}}, 413, "more than 10000 entries; the limit is"),
        # the same term as matching reads it: composed or decomposed, however its words are spaced (stored as two)
        ({"entries": {"caf\u00e9": "a", "cafe\u0301": "b"}}, 422, "the same words in another Unicode form or spacing"),
        ({"entries": "red bike\tVelo\nred  bike\tRad"}, 422, "line 2 repeats the source term 'red bike' of line 1"),
        # a quoted term's line break: the entry's line is where it begins (it said line 2)
        ({"entries": '"a\nb",c\nd,e,f', "entries_format": "csv"}, 422, "line 3 has 3 fields"),
    ],
)
async def test_a_glossary_the_rules_refuse_gets_a_4xx_that_says_why(client, body, status, message):
    r = await client.post("/glossaries", json={"name": "test", "source_lang": "en", "target_lang": "de", **body})
    assert r.status_code == status and message in r.json()["error"], r.text


async def test_translate_passes_inline_and_stored_terms_to_the_decoder_inline_first(client, decodings):
    stored = await create(client, entries={"bike": "Velo", "man": "Herr"})
    r = await client.post("/translate", json={"text": TEXT, "glossary": {"man": "Mann", "Bike": "Rad"}})
    assert r.status_code == 200 and r.json()["model"] == "en-de"
    assert decodings[-1][1].glossary == (("man", "Mann"), ("Bike", "Rad"))  # the fast path's
    body = {"text": TEXT, "glossary": {"man": "Mann", "Bike": "Rad"}, "glossary_id": stored["glossary_id"]}
    assert (await client.post("/translate", json=body)).status_code == 200
    assert decodings[-1][1].glossary == (("man", "Mann"), ("Bike", "Rad"), ("bike", "Velo"))
    assert not decodings[-1][1].glossary_ignore_case
    assert (await client.post("/translate", json=body | {"glossary_ignore_case": True})).status_code == 200
    assert decodings[-1][1].glossary == (("man", "Mann"), ("Bike", "Rad")) and decodings[-1][1].glossary_ignore_case
    r = await client.post("/translate", json={"text": TEXT, "glossary_id": stored["glossary_id"], "stream": True})
    assert r.status_code == 200 and decodings[-1][1].glossary == (("bike", "Velo"), ("man", "Herr"))
    assert (await client.post("/translate", json={"text": TEXT, "glossary": {}})).status_code == 200
    assert decodings[-1][1].glossary == ()


async def test_a_stored_glossary_goes_to_the_model_of_its_languages_and_must_match_the_one_named(client, decodings):
    french = await create(client, entries={"bike": "vélo"}, target_lang="fr")
    r = await client.post("/translate", json={"text": TEXT, "glossary_id": french["glossary_id"]})
    assert r.status_code == 200 and r.json()["model"] == "en-fr" and decodings[-1][0] == "en-fr"
    r = await client.post("/translate", json={"text": TEXT, "glossary_id": french["glossary_id"], "target": "fr"})
    assert r.status_code == 200 and r.json()["model"] == "en-fr"
    for named in ({"model": "en-de"}, {"target": "de"}):
        r = await client.post("/translate", json={"text": TEXT, "glossary_id": french["glossary_id"], **named})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == (
            f"the glossary {french['glossary_id']} is en->fr, but this request is en->de (model 'en-de'); use a "
            "glossary of that pair, or leave out model, source and target to translate with the glossary's model"
        )
    missing = "0b7e3b1e-0000-4000-8000-000000000000"
    r = await client.post("/translate", json={"text": TEXT, "glossary_id": missing})
    assert (r.status_code, r.json()) == (404, {"error": f"there is no glossary {missing}", "type": "not_found"})


@pytest.mark.parametrize(
    ("glossary", "message"),
    [
        ({"bike": ""}, "glossary entry 'bike' has an empty target term; every entry needs both terms"),
        ({"bi\tke": "Rad"}, "glossary entry 'bi\\tke''s source term 'bi\\tke' holds the control character U+0009"),
        ({"a": "b", " a": "c"}, "glossary entry ' a' repeats the source term 'a' of entry 'a'"),
        ({"bike": ["Rad"]}, "glossary.bike: input should be a valid string"),
        ({"bike": "Velo " * 200}, "no translation here may have more (NMT_MAX_NEW_TOKENS is"),  # not "raise it"
        ({f"t{i}": "x" for i in range(MAX_ENTRIES + 1)}, "glossary has 10001 entries; the limit is 10000"),
        ("bike\tRad", "glossary: input should be a valid dictionary"),
    ],
)
async def test_an_inline_glossary_is_checked_as_a_stored_one(client, glossary, message):
    r = await client.post("/translate", json={"text": TEXT, "glossary": glossary})
    assert r.status_code == 422 and message in r.json()["error"], r.text


async def test_the_glossary_routes_need_the_key_when_the_server_has_one(german, tmp_path):
    settings = Settings(model_dir=german, compile=False, api_key="k", glossary_dir=tmp_path)
    async with serve(settings) as (_, client):
        assert (await client.get("/glossaries")).status_code == 401
        body = {"name": "x", "source_lang": "en", "target_lang": "de", "entries": {"a": "b"}}
        assert (await client.post("/glossaries", json=body)).status_code == 401
        r = await client.post("/glossaries", json=body, headers={"Authorization": "Bearer k"})
        assert r.status_code == 201
        r = await client.get("/glossaries", headers={"Authorization": "Bearer k"})
        assert [x["name"] for x in r.json()["glossaries"]] == ["x"]


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_the_bundled_model_puts_a_glossarys_target_terms_in_its_translations(tmp_path):
    """Through the decoder's constraints (model/constraints.py): the glossary's term, where the model would not."""
    texts = ["A man is riding a bike.", "Two dogs are playing in the snow."]
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):
        plain = (await client.post("/translate", json={"text": texts})).json()["translations"]
        assert "Velo" not in plain[0]["text"] and "Köter" not in plain[1]["text"]
        stored = await create(client, entries={"bike": "Velo"})
        body = {"text": texts, "glossary_id": stored["glossary_id"], "glossary": {"dogs": "Köter"}}
        out = (await client.post("/translate", json=body)).json()["translations"]
        assert "Velo" in out[0]["text"] and "Köter" in out[1]["text"], out
        body = {"text": "A BIKE.", "glossary": {"bike": "Velo"}}
        assert "Velo" not in (await client.post("/translate", json=body)).json()["translations"][0]["text"]
        body["glossary_ignore_case"] = True
        assert "Velo" in (await client.post("/translate", json=body)).json()["translations"][0]["text"]
        body = {"text": "A man is on the STRASSE.", "glossary": {"Straße": "Gasse"}, "glossary_ignore_case": True}
        assert "Gasse" in (await client.post("/translate", json=body)).json()["translations"][0]["text"]  # ß is ss


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_the_terms_are_forced_in_documents_html_streams_and_beams_and_a_glossary_that_matches_nothing_changes_nothing(
    tmp_path,
):  # fmt: skip
    from tests.app.helpers import sse

    document = "A man is riding a bike. Two dogs are playing in the snow.\n\nA woman reads a book."
    glossary = {"bike": "Velo", "dogs": "Köter", "book": "Schmöker"}
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):

        async def text(**body) -> str:
            r = await client.post("/translate", json=body)
            assert r.status_code == 200, r.text
            return r.json()["translations"][0]["text"]

        for more in ({}, {"beam_size": 4}):
            out = await text(text=document, glossary=glossary, **more)
            assert all(term in out for term in glossary.values()), out
            assert out.count("\n\n") == 1  # the document's own layout around the sentences
            assert await text(text=document, glossary={"zebra": "Zebra"}, **more) == await text(text=document, **more)
        page = '<p>A man is riding a <b>bike</b>.</p><p title="A woman reads a book.">Two dogs.</p>'
        html = await text(text=page, format="html", glossary=glossary)
        assert "Velo</b>" in html and "Köter" in html and "Schmöker" in html, html
        events = sse(await client.post("/translate", json={"text": document, "glossary": glossary, "stream": True}))
        final = events[-1]["text"]
        assert all(term in final for term in glossary.values()), final
        assert "".join(e["token"]["text"] for e in events[:-1]) == final
        r = await client.post("/translate", json={"text": "A bike.", "glossary": {"bike": "Velo"}, "max_new_tokens": 2})
        assert r.status_code == 422 and "need 3 tokens" in r.json()["error"], r.text


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_a_term_the_model_leaves_out_goes_before_the_sentences_end_and_one_it_translates_in_its_place(tmp_path):
    """A sentence's end (its closing punctuation, as </s>) waits for the terms: the model, translating "dog" nowhere,
    once ended the sentence first and the term followed it ("... Fahrrads. Köter"). In one row, where the step's
    cross-attention is on the source term, the term takes that word's place ("eines Velo", not "Fahrrads ... Velo");
    a beam scores where a term begins, which its first token's log-probability tells."""
    text = "A man throws a red ball to his dog on the street near a bike."
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):
        for beam in (1, 4):
            for source, term in (("dog", "Köter"), ("bike", "Velo"), ("red", "rötlich"), ("street", "Gasse")):
                r = await client.post("/translate", json={"text": text, "glossary": {source: term}, "beam_size": beam})
                out = r.json()["translations"][0]["text"]
                assert term in out and out.endswith(".") and out.count(".") == 1, (beam, out)
                assert not out.startswith(f"Ein {term}"), out  # a beam once put it anywhere: "Ein Köter Mann wirft"
            r = await client.post("/translate", json={"text": text, "glossary": {"bike": "Velo"}, "beam_size": beam})
            assert "Fahrrad" not in r.json()["translations"][0]["text"], r.json()


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_beam_search_with_terms_finds_a_translation_at_least_as_likely_as_greedy(tmp_path):
    """A hypothesis that has met its terms ends where the model ends it, however the ones still short of them score
    (they have not paid for the terms yet), and a term's tokens, the caller's choice, count in no hypothesis's score:
    beam search once went on past the sentence ("... Fahrrad. Ein Ein Ein Mann fährt Velo.")."""
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):

        async def best(**body) -> dict:
            r = await client.post("/translate", json={**body, "return_scores": True})
            assert r.status_code == 200, r.text
            return r.json()["translations"][0]

        text, glossary = "A man rides a bike", {"bike": "Velo"}
        greedy = await best(text=text, glossary=glossary)
        for beam, penalty in ((4, 0.0), (4, 1.0), (8, 1.0)):
            found = await best(text=text, glossary=glossary, beam_size=beam, length_penalty=penalty)
            assert "Velo" in found["text"] and found["text"].count(".") <= 1, (beam, penalty, found)
            if penalty == 1.0:  # the mean, as greedy's score is
                assert found["score"] >= greedy["score"] - 1e-3, (beam, found, greedy)
        for beam in (1, 4):  # no piece of a word after the term: "Velo-Fahrer" is not the term
            found = await best(text="A bike.", glossary=glossary, beam_size=beam, return_tokens=True)
            after = found["tokens"][found["tokens"].index("o") + 1]
            assert after.startswith("▁") or not (after[:1].isalnum() or after[:1] == "-"), found


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_a_term_goes_where_its_source_term_is_translated_not_where_it_is_kept_or_after_a_lone_space(tmp_path):
    """Kept as written (translate="no", <code>, DeepL's ignore_tags), a source term is no place for its term: the term
    took the place of that word's translation, the kept element then took the term's place, and the term was lost
    ("Ein <span translate="no">dog</span> rennt mit einem Hund."). A term after a space the model wrote alone
    ("▁") brought a space of its own: "und  Begriff9997"."""
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):
        for kept in ('<span translate="no">dog</span>', "<code>dog</code>"):
            page = f"<p>A {kept} runs with a dog.</p>"
            r = await client.post("/translate", json={"text": page, "format": "html", "glossary": {"dog": "Köter"}})
            out = r.json()["translations"][0]["text"]
            assert kept in out and "Köter" in out, out
        body = {"text": ["A <x>dog</x> runs with a dog."], "target_lang": "DE", "tag_handling": "xml",
                "ignore_tags": ["x"], "glossary_id": (await create(client, entries={"dog": "Köter"}))["glossary_id"],
                "source_lang": "EN"}  # fmt: skip
        r = await client.post("/deepl/v2/translate", json=body)
        assert "<x>dog</x>" in r.json()["translations"][0]["text"] and "Köter" in r.text, r.text
        text = "A dog runs in the snow with term5 and term9997."
        for glossary in ({"term9997": "Begriff9997"}, {f"term{i}": f"Begriff{i}" for i in range(9990, 10000)}):
            r = await client.post("/translate", json={"text": text, "glossary": glossary, "return_tokens": True})
            out = r.json()["translations"][0]
            assert "Begriff9997" in out["text"] and "  " not in out["text"], out
        # a term's tokens align to its source term (they aligned where the step's attention wandered: "rad" to ".")
        body = {"text": "A man rides a red bike.", "glossary": {"red bike": "Rotrad"}, "return_alignment": True}
        out = (await client.post("/translate", json=body)).json()["translations"][0]
        term = out["text"].index("Rotrad")
        on_term = [a["source_span"] for a in out["alignment"] if term <= a["target_span"][0] < term + len("Rotrad")]
        assert on_term == [[14, 17], [18, 22]], out["alignment"]  # "Rot" red, "rad" bike
        # so an inline tag around part of a source term wraps the term (it wrapped the whole sentence)
        for page, want in (("<p>A man rides a red <b>bike</b>.</p>", "<b>Rotrad</b>."),
                           ("<p>A man rides a <b>red</b> bike.</p>", "<b>Rotrad</b>.")):  # fmt: skip
            r = await client.post(
                "/translate", json={"text": page, "format": "html", "glossary": {"red bike": "Rotrad"}}
            )
            assert r.json()["translations"][0]["text"].endswith(f"einem {want}</p>"), r.text
        for text in ("A man rides a red  bike.", "A man rides a red\u00a0bike.", "<p>A man rides a red&nbsp;bike.</p>"):
            body = {"text": text, "glossary": {"red bike": "Rotrad"}, "format": "html" if "<p>" in text else "text"}
            r = await client.post("/translate", json=body)  # its words apart by other whitespace: the term still
            assert "Rotrad" in r.json()["translations"][0]["text"], r.text


@pytest.mark.skipif(not (BUNDLED_MODEL_DIR / "model.safetensors").exists(), reason="no bundled checkpoint")
async def test_a_target_prefix_ending_in_part_of_a_term_ends_in_the_term_which_comes_once(tmp_path):
    """As a user types: "Ein Köt" is the start of "Köter", which the prefix then holds; it was forced again after it
    ("Ein Köter läuft auf dem Gras Köter.", "... einem Ve-Rad Velo.")."""
    from tests.app.helpers import sse

    cases = [("A dog runs on the grass.", {"dog": "Köter"}, "Ein Köt", "Köter"),
             ("A man is riding a bike.", {"bike": "Velo"}, "Ein Mann fährt auf einem Ve", "Velo"),
             ("A man is riding a red bike.", {"red bike": "rotes Velo"}, "Ein Mann fährt ein rotes V", "rotes Velo")]  # fmt: skip
    async with serve(Settings(model_dir=BUNDLED_MODEL_DIR, compile=False, glossary_dir=tmp_path)) as (_, client):
        for text, glossary, prefix, term in cases:
            body = {"text": text, "glossary": glossary, "target_prefix": prefix}
            for more in ({}, {"beam_size": 3}):
                out = (await client.post("/translate", json={**body, **more})).json()["translations"][0]["text"]
                assert out.startswith(prefix) and out.count(term) == 1 and term in out[: len(prefix) + 4], (more, out)
            streamed = sse(await client.post("/translate", json={**body, "stream": True}))[-1]["text"]
            assert streamed.count(term) == 1 and streamed.startswith(prefix), streamed
