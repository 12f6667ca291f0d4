"""Files as jobs over HTTP (POST /files, GET /files/{id}, its events and download, DELETE): a text file comes back as
/translate translates its paragraphs; progress rises to the total; bad uploads get their 4xx at once; and a job
shares the engine without holding interactive requests up (app/jobs)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import time

import pytest

from app.segment import cut_to_fit, segment
from app.settings import Settings
from tests.app.conftest import MODES, serve_in
from tests.app.files_api import PARAGRAPHS, finished, holding, ours, text_file, upload
from tests.app.helpers import until
from tests.files import office

pytestmark = pytest.mark.anyio
CAP = 3  # NMT_JOB_SEGMENTS_IN_FLIGHT here


@pytest.fixture(scope="module", params=MODES)
async def served(trained_checkpoint, tmp_path_factory, request):
    settings = Settings(
        model_dir=trained_checkpoint, max_new_tokens=40, compile=False, job_dir=tmp_path_factory.mktemp("jobs"),
        job_segments_in_flight=CAP, max_batch_texts=8,
    )  # fmt: skip
    async with serve_in(request.param, settings) as pair:
        yield pair


@pytest.fixture
def client(served):
    return served[1]


async def test_a_text_file_comes_back_as_translate_translates_its_paragraphs(client):
    paragraphs = PARAGRAPHS[:6]
    job = await upload(client, text_file(paragraphs), target="de")
    assert (job["status"], job["filename"], job["output_filename"], job["format"]) == (
        "queued", "report.txt", "report.de.txt", "txt",
    )  # fmt: skip
    assert job["progress"] == {"done": 0, "total": 5} and job["download"] is None  # the last two lines: one paragraph
    done = await finished(client, job["id"])
    assert done["status"] == "done" and done["progress"] == {"done": 5, "total": 5}, done
    assert done["download"] == f"/files/{job['id']}/download" and done["expires"] > done["finished"]
    r = await client.get(done["download"])
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-disposition"] == "attachment; filename=\"report.de.txt\"; filename*=UTF-8''report.de.txt"
    expected = await ours(client, [*paragraphs[:-2], f"{paragraphs[-2]}\n{paragraphs[-1]}"])
    assert r.content.decode() == "\n\n".join(expected[:-1]) + f"\r\n\r\n{expected[-1]}\n\n"
    # a name whose right-to-left override would show "invoice\u202efdp.exe.txt" as "invoicetxt.exe.pdf": not in it
    job = await upload(client, text_file(paragraphs[:3]), name="invoice\u202efdp.exe.txt", target="de")
    r = await client.get((await finished(client, job["id"]))["download"])
    assert "%E2%80%AE" not in r.headers["content-disposition"] and "invoice_fdp.exe.de.txt" in r.headers[
        "content-disposition"], r.headers  # fmt: skip


async def test_events_show_the_progress_rising_to_the_total(client):
    job = await upload(client, text_file(PARAGRAPHS), name="many paragraphs.txt")
    r = await client.get(f"/files/{job['id']}/events")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line.removeprefix("data: ")) for line in r.text.split("\n\n") if line.startswith("data: ")]
    done = [e["progress"]["done"] for e in events]
    assert done == sorted(done) and len(set(done)) >= 3, done  # chunks of at most CAP paragraphs
    assert events[-1]["status"] == "done" and done[-1] == events[-1]["progress"]["total"] == len(PARAGRAPHS) - 1
    again = await client.get(f"/files/{job['id']}/events")  # a finished job: one event, then the end
    assert again.text.count("data: ") == 1 and '"status":"done"' in again.text


async def test_a_deleted_job_is_gone_and_a_running_one_stops(served):
    app, client = served
    with holding(app):
        job = await upload(client, text_file(PARAGRAPHS))
        await until(lambda: app.state.jobs.local[job["id"]].status == "running")
        early = await client.get(f"/files/{job['id']}/download")
        assert early.status_code == 409 and early.json()["type"] == "not_done", early.text
        assert "it is running (0 of 23)" in early.json()["error"]
        assert (await client.delete(f"/files/{job['id']}")).status_code == 204
    for path in (f"/files/{job['id']}", f"/files/{job['id']}/download", f"/files/{job['id']}/events"):
        r = await client.get(path)
        assert (r.status_code, r.json()["type"]) == (404, "not_found"), (path, r.text)
    assert (await client.delete(f"/files/{job['id']}")).status_code == 404
    assert job["id"] not in app.state.jobs.local and not (app.state.jobs.store.directory / job["id"]).exists()


async def test_a_paragraph_of_more_sentences_than_a_request_may_have_is_translated_in_halves(client):
    lines = [PARAGRAPHS[i % 8] for i in range(300)]  # one paragraph: no blank line; 300 sentences, the limit is 128
    job = await finished(client, (await upload(client, "\n".join(lines).encode()))["id"])
    assert job["status"] == "done" and job["progress"] == {"done": 1, "total": 1}, job
    out = (await client.get(f"/files/{job['id']}/download")).content.decode()
    assert out.split("\n") == (await ours(client, PARAGRAPHS[:8]) * 38)[:300]


async def test_a_formatted_paragraph_of_more_sentences_than_a_request_may_have_is_translated_in_halves(client):
    """A block of markup (an HTML page's, a DOCX paragraph with formatting) is halved where no element is open: the
    job once failed, saying to send the rest in another request."""
    lines = [PARAGRAPHS[i % 8] for i in range(300)]
    page = f"<html><body><p><b>{lines[0]}</b><br>\n" + "<br>\n".join(lines[1:]) + "</p></body></html>"
    job = await finished(client, (await upload(client, page.encode(), name="page.html"))["id"])
    assert job["status"] == "done", job
    out = (await client.get(f"/files/{job['id']}/download")).content.decode()
    want = (await ours(client, PARAGRAPHS[:8]) * 38)[:300]
    assert out.count("<br>") == 299 and all(w in out for w in want) and out.count(want[1]) == 38, out[:300]


@pytest.mark.parametrize(
    "name, data, fields, status, words",
    [
        ("a.txt", b"\xff\xfe not UTF-8", {}, 422, ["not UTF-8", "byte 0"]),
        ("a.txt", b"A\x00B", {}, 422, ["NUL"]),
        ("a.exe", b"MZ", {}, 422, ["cannot tell the format of 'a.exe'", ".txt", ".docx"]),
        ("a.txt", b"A dog.", {"format": "pdf"}, 422, ["unknown file format 'pdf'", "txt"]),
        ("a.txt", b"A dog.", {"model": "nope"}, 422, ["there is no model 'nope'"]),
        ("a.txt", b"A dog.", {"target": "xx"}, 422, ["no model here translates any->xx"]),
        ("a.txt", b"A dog.", {"beam_size": "9"}, 422, ["beam_size must be between 1 and 8"]),
        ("a.txt", b"A dog.", {"beam_size": "0"}, 422, ["beam_size must be between 1 and 8"]),
        ("a.txt", b"A dog.", {"beam_size": "x"}, 422, ["beam_size"]),
        ("a.txt", b"A dog.", {"glossary_id": "nope"}, 404, ["there is no glossary 'nope'"]),
        ("a.txt", ("word " * 5000).encode(), {}, 413, ["a line of 24999 characters", "NMT_MAX_REQUEST_CHARS"]),
        # 4 MB of elements: gigabytes in a parser's tree, which the process kept
        ("a.html", b"<p>A dog.</p>" + b"<b></b>" * 600_000, {}, 413, ["more than 1000000 tags of markup"]),
        # a DOCTYPE in UTF-16 (the check read the bytes as they came, and the parser expanded its entities)
        ("a.xlf", '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE x [<!ENTITY a "b">]><xliff version="1.2"/>'
         .encode("utf-16"), {}, 422, ["a DOCTYPE or ENTITY declaration"]),
        ("a.pptx", office.docx_sample(), {}, 422, ["file 'upload' is not a PowerPoint file"]),  # not its heap address
    ],
    ids=["not utf-8", "nul", "unknown extension", "unknown format", "unknown model", "unknown target", "beam 9",
         "beam 0", "beam x", "unknown glossary", "long line", "tag bomb", "utf-16 doctype", "docx as pptx"],
)  # fmt: skip
async def test_a_bad_upload_gets_its_4xx_saying_what_is_wrong_before_any_job(client, name, data, fields, status,
                                                                              words):  # fmt: skip
    r = await client.post("/files", files={"file": (name, data)}, data=fields)
    assert r.status_code == status and set(r.json()) == {"error", "type"}, r.text
    for word in words:
        assert word in r.json()["error"], r.json()


async def test_missing_fields_and_bodies_that_are_not_forms_get_a_422(client):
    r = await client.post("/files", data={"target": "de"})
    assert (r.status_code, r.json()["error"]) == (422, "field 'file' is required")
    r = await client.post("/files", json={"file": "A dog."})
    assert r.status_code == 422 and "field 'file' is required" in r.json()["error"]
    r = await client.post("/files", content=b"--x\r\nnonsense", headers={"content-type": "multipart/form-data"})
    assert r.status_code == 422 and "multipart form cannot be read" in r.json()["error"], r.text


async def test_an_unknown_job_is_a_404_and_a_malformed_id_too(client):
    for job_id in ("0" * 32, "../etc", "x" * 200):
        r = await client.get(f"/files/{job_id}")
        assert (r.status_code, r.json()["type"]) == (404, "not_found"), r.text


async def test_interactive_requests_are_answered_while_a_big_job_runs_and_the_job_keeps_to_its_share(served,
                                                                                                     monkeypatch):  # fmt: skip
    app, client = served
    seen = {"job": 0, "peak": 0, "interactive": 0}
    real = app.state.jobs.translate

    async def counted(engine, units, decoding):  # every chunk of every job goes to the engine through here
        n = sum(1 for u in units if u.text.strip())
        seen["job"] += n
        seen["peak"] = max(seen["peak"], seen["job"])
        try:
            return await real(engine, units, decoding)
        finally:
            seen["job"] -= n

    monkeypatch.setattr(app.state.jobs, "translate", counted)
    big = text_file(PARAGRAPHS * 4)
    jobs = [await upload(client, big, name=f"big{i}.txt") for i in range(3)]  # two run at once, one waits
    deadline = time.monotonic() + 120
    while any(app.state.jobs.local.get(j["id"]) for j in jobs):
        assert time.monotonic() < deadline, [app.state.jobs.local.get(j["id"]) for j in jobs]  # never a hang
        r = await client.post("/translate", json={"text": PARAGRAPHS[0]})
        assert r.status_code == 200
        seen["interactive"] += 1
    assert [(await finished(client, j["id"]))["status"] for j in jobs] == ["done"] * 3
    assert seen["interactive"] >= 2 and 0 < seen["peak"] <= CAP, seen
    assert app.state.jobs.share.peak <= CAP and app.state.jobs.share.in_flight == 0


@pytest.mark.skipif(importlib.util.find_spec("app.files.subrip") is None, reason="app/files/subrip.py has not landed")
async def test_a_subtitle_file_is_translated_cue_by_cue(client):
    data = b"1\n00:00:01,000 --> 00:00:02,000\nA dog is running.\n\n2\n00:00:03,000 --> 00:00:04,000\nA cat.\n"
    job = await upload(client, data, name="film.srt")
    assert (await finished(client, job["id"]))["status"] == "done"
    out = (await client.get(f"/files/{job['id']}/download")).content.decode()
    assert "00:00:03,000 --> 00:00:04,000" in out and (await ours(client, ["A cat."]))[0] in out


async def test_deepls_document_routes_answer_as_deepl_does_before_during_and_after(served):
    app, client = served
    with holding(app):
        r = await client.post("/v2/document", files={"file": ("a.txt", b"A dog runs.")}, data={"target_lang": "DE"})
        assert r.status_code == 200 and set(r.json()) == {"document_id", "document_key"}, r.text
        document, key = r.json()["document_id"], r.json()["document_key"]
        assert re.fullmatch("[0-9A-F]{64}", key), key
        status = (await client.post(f"/deepl/v2/document/{document}", data={"document_key": key})).json()
        assert status["document_id"] == document and status["status"] in ("queued", "translating"), status
        early = await client.post(f"/v2/document/{document}/result", json={"document_key": key})
        assert (early.status_code, early.json()["message"]) == (503, "Document not ready")
    for wrong in ({"document_key": "0" * 64}, {"document_key": key.lower() + "0"}):
        r = await client.post(f"/v2/document/{document}", data=wrong)
        assert (r.status_code, r.json()["message"]) == (404, "Document not found")
    r = await client.post(f"/v2/document/{document}", data={})
    assert (r.status_code, r.json()["message"]) == (400, "Parameter 'document_key' not specified.")
    await until(lambda: document not in app.state.jobs.local)
    status = (await client.post(f"/v2/document/{document}", data={"document_key": key})).json()
    assert status == {"document_id": document, "status": "done", "billed_characters": 11}
    result = await client.post(f"/v2/document/{document}/result", data={"document_key": key})
    assert result.status_code == 200 and result.text == (await ours(client, ["A dog runs."]))[0]
    gone = await client.post(f"/v2/document/{document}", data={"document_key": key})
    assert (gone.status_code, gone.json()["message"]) == (404, "Document not found")  # downloaded once


@pytest.mark.parametrize(
    "files, data, message",
    [
        ({"other": (None, "x")}, {"target_lang": "DE"}, "Parameter 'file' not specified."),
        ({"file": ("a.txt", b"A dog.")}, {}, "Parameter 'target_lang' not specified."),
        ({"file": ("a.txt", b"A dog.")}, {"target_lang": "DE", "glossary_id": "x"}, "requires the source_lang"),
        ({"file": ("a.txt", b"A dog.")}, {"target_lang": "DE", "formality": "more"}, "'formality' is not supported"),
        ({"file": ("a", b"A dog.")}, {"target_lang": "DE", "filename": "a.txt", "output_format": "pdf"},
         "output_format pdf is not supported"),
        ({"file": ("a.txt", b"\xff")}, {"target_lang": "DE"}, "not UTF-8"),
    ],
    ids=["no file", "no target", "glossary without source", "formality", "output format", "not utf-8"],
)  # fmt: skip
async def test_bad_document_uploads_get_deepls_400(client, files, data, message):
    r = await client.post("/deepl/v2/document", files=files, data=data)
    assert r.status_code == 400 and message in r.json()["message"], r.text


@pytest.mark.skipif(importlib.util.find_spec("app.files.po") is None, reason="app/files/po.py has not landed")
async def test_a_po_catalogue_gets_its_strings_translated_and_the_target_language_in_its_header(client):
    data = b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "A dog runs."\nmsgstr ""\n'
    job = await finished(client, (await upload(client, data, name="app.po", target="de"))["id"])
    assert (job["status"], job["output_filename"]) == ("done", "app.de.po"), job
    r = await client.get(f"/files/{job['id']}/download")
    assert r.headers["content-type"].startswith("text/x-gettext-translation")
    out = r.content.decode()
    assert '"Language: de\\n"' in out and f'msgstr "{(await ours(client, ["A dog runs."]))[0]}"' in out, out


async def test_a_file_in_another_encoding_is_not_labelled_utf_8_by_any_api(client):
    """A Latin-1 catalogue comes back in Latin-1, as it came: its Content-Type names no charset (it said UTF-8, and a
    client that decodes by the header read "fÃ¤hrt"); a UTF-8 file's says UTF-8."""
    latin = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=ISO-8859-1\\n"\n\nmsgid "Café."\nmsgstr ""\n'
    for data, charset in (
        (latin.encode("latin-1"), ""),
        (latin.replace("ISO-8859-1", "UTF-8").encode(), "; charset=utf-8"),
    ):
        job = await finished(client, (await upload(client, data, name="app.po", target="de"))["id"])
        r = await client.get(f"/files/{job['id']}/download")
        assert r.headers["content-type"] == "text/x-gettext-translation" + charset
        document = await client.post("/deepl/v2/document", files={"file": ("app.po", data)}, data={"target_lang": "DE"})
        ids = document.json()
        for _ in range(600):
            status = await client.post(
                f"/deepl/v2/document/{ids['document_id']}", data={"document_key": ids["document_key"]}
            )
            if status.json()["status"] == "done":
                break
            await asyncio.sleep(0.05)
        result = await client.post(
            f"/deepl/v2/document/{ids['document_id']}/result", data={"document_key": ids["document_key"]}
        )
        assert result.headers["content-type"] == "text/x-gettext-translation" + charset, result.text
        libre = await client.post("/libretranslate/translate_file", files={"file": ("app.po", data)},
                                  data={"source": "en", "target": "de"})  # fmt: skip
        url = libre.json()["translatedFileUrl"]
        downloaded = await client.get(url[url.index("/libretranslate/") :])
        assert downloaded.headers["content-type"] == "text/x-gettext-translation" + charset
        assert downloaded.content == r.content == result.content


async def test_a_file_s_source_of_auto_in_any_case_is_auto(client):
    """Codes match in any case; "AUTO" was a 422 here ("no model here translates AUTO->de") where "auto" was not."""
    data = text_file(PARAGRAPHS[:2])
    done = [await finished(client, (await upload(client, data, source=auto, target="de"))["id"]) for auto in
            ("auto", "AUTO", "Auto")]  # fmt: skip
    downloads = [(await client.get(job["download"])).content for job in done]
    assert all(job["status"] == "done" for job in done) and downloads[0] and len(set(downloads)) == 1, done


async def test_a_segmented_xliff_unit_comes_back_with_a_target_of_the_same_segments_each_translated(client):
    """A CAT tool's XLIFF 1.2 (Okapi, Trados): each <mrk mtype="seg"> of a seg-source is translated as /translate
    translates it, inside the same segment of the target."""
    from lxml import etree

    sentences = ["A dog is running.", "A cat sleeps."]
    data = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        '<file source-language="en" target-language="de" datatype="plaintext" original="a.txt"><body>'
        f'<trans-unit id="1"><source>{" ".join(sentences)}</source><seg-source><mrk mtype="seg" mid="s1">'
        f'{sentences[0]}</mrk> <mrk mtype="seg" mid="s2">{sentences[1]}</mrk></seg-source></trans-unit>'
        "</body></file></xliff>"
    ).encode()
    job = await finished(client, (await upload(client, data, name="a.xlf", target="de"))["id"])
    assert job["status"] == "done", job
    out = etree.fromstring((await client.get(f"/files/{job['id']}/download")).content)
    marks = out.findall(".//{*}target/{*}mrk")
    assert [(m.get("mtype"), m.get("mid")) for m in marks] == [("seg", "s1"), ("seg", "s2")]
    assert [m.text for m in marks] == await ours(client, sentences) and marks[0].tail == " "


async def test_a_sentence_longer_than_the_model_takes_is_cut_where_it_fits_not_truncated(served):
    """A sentence over max_input_tokens, in a file or sent to DeepL's or LibreTranslate's API (which translate any
    length), is cut at its clauses into pieces the model takes, each translated as a sentence of its own and put back
    between the text's own whitespace: none of it is lost (it was cut to the limit, silently)."""
    app, client = served
    engine = next(iter(app.state.models.engines.values()))
    sentence = ", ".join(p.rstrip(".").lower() for p in PARAGRAPHS) + "."
    fits = engine.limits.fits(engine.tokenizer)
    pieces = [sentence[s.start : s.end] for s in cut_to_fit(sentence, segment(sentence), fits)]
    assert not fits(sentence) and len(pieces) > 1 and all(map(fits, pieces))
    expected = " ".join(await ours(client, pieces))
    job = await finished(client, (await upload(client, sentence.encode()))["id"])
    assert job["status"] == "done", job
    assert (await client.get(job["download"])).content.decode() == expected
    deepl = await client.post("/deepl/v2/translate", json={"text": [sentence], "target_lang": "DE"})
    assert deepl.status_code == 200 and deepl.json()["translations"][0]["text"] == expected, deepl.text
    libre = await client.post("/libretranslate/translate", json={"q": sentence, "source": "en", "target": "de"})
    assert libre.status_code == 200 and libre.json()["translatedText"] == expected, libre.text
    native = await client.post("/translate", json={"text": sentence})  # a 413 saying so, as documented
    assert native.status_code == 413 and "tokens; the limit is" in native.json()["error"]


async def test_urls_and_email_addresses_come_back_verbatim_from_files_deepl_and_libretranslate(client):
    """A model given a URL or an address writes words in its place; files and the compatible APIs keep them as
    written (as DeepL does), a paragraph of one alone untouched."""
    kept = ["https://example.com/two-dogs?page=2&q=snow", "a.dog@example.org", "www.example.com/park"]
    paragraphs = [kept[0], f"{PARAGRAPHS[0]} Write to {kept[1]} or see {kept[2]}, please."]
    job = await finished(client, (await upload(client, "\n\n".join(paragraphs).encode()))["id"])
    out = (await client.get(job["download"])).content.decode().split("\n\n")
    assert out[0] == kept[0] and all(k in out[1] for k in kept[1:]), out
    deepl = await client.post("/deepl/v2/translate", json={"text": paragraphs, "target_lang": "DE"})
    assert deepl.json()["translations"][0]["text"] == kept[0], deepl.text
    assert all(k in deepl.json()["translations"][1]["text"] for k in kept[1:]), deepl.text
    libre = await client.post("/libretranslate/translate", json={"q": paragraphs, "source": "en", "target": "de"})
    assert libre.json()["translatedText"][0] == kept[0], libre.text
    assert all(k in libre.json()["translatedText"][1] for k in kept[1:]), libre.text


async def test_a_server_wide_min_confidence_withholds_nothing_from_files_or_deepls(trained_checkpoint, tmp_path):
    """NMT_MIN_CONFIDENCE withholds sentences from /translate, whose answer says so (`withheld`); a file or DeepL's
    answer has no place to say it, and once came back with sentences silently missing."""
    from tests.app.conftest import serve

    settings = Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False, job_dir=tmp_path,
                        min_confidence=1.0)  # fmt: skip
    text = "A dog is running in the park. The cat is sleeping."
    async with serve(settings) as (_, client):
        withheld = (await client.post("/translate", json={"text": text})).json()["translations"][0]
        assert withheld["text"].strip() == "" and len(withheld["withheld"]) == 2, withheld
        full = (await client.post("/translate", json={"text": text, "min_confidence": 0})).json()["translations"][0]
        assert full["text"] and "withheld" not in full
        job = await finished(client, (await upload(client, text.encode()))["id"])
        assert (await client.get(f"/files/{job['id']}/download")).content.decode() == full["text"]
        deepl = await client.post("/deepl/v2/translate", json={"text": [text], "target_lang": "DE"})
        assert deepl.json()["translations"][0]["text"] == full["text"], deepl.text
