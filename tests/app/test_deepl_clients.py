"""The DeepL-compatible API (/deepl), driven by DeepL's official clients, unmodified, against a live nmt-serve with the
bundled English->German and English->French models: `deepl` from PyPI and `deepl-node` from npm (pinned in
tests/clients/deepl-node, installed by scripts/install.sh where node is). Their translations equal our own
/translate's for the same model; glossaries made through them are stored, listed, used and deleted."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import deepl
import httpx
import pytest

from app.settings import BUNDLED_MODEL_DIR
from tests.app.live import start_server, wait_ready

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "tests" / "clients" / "deepl-node"
FRENCH = BUNDLED_MODEL_DIR.parent / "multi30k-en-fr"
KEY = "s3cret-deepl-key"
ENGLISH = "A man is riding a bike."
pytestmark = pytest.mark.skipif(
    not (BUNDLED_MODEL_DIR / "model.safetensors").exists() or not (FRENCH / "model.safetensors").exists(),
    reason="no bundled checkpoints",
)


@pytest.fixture(scope="module", params=["0", "1"], ids=["one process", "front-end"])
def base(tmp_path_factory, request) -> str:
    """A live server with both bundled models, NMT_API_KEY set, glossaries in a directory of its own: one process, or
    a front-end apart from the engine process (NMT_FRONTENDS=1)."""
    proc, url = start_server(
        BUNDLED_MODEL_DIR, NMT_MODELS=f"en-de={BUNDLED_MODEL_DIR},en-fr={FRENCH}", NMT_API_KEY=KEY,
        NMT_COMPILE="off", NMT_GLOSSARY_DIR=str(tmp_path_factory.mktemp("glossaries")), NMT_FRONTENDS=request.param,
    )  # fmt: skip
    try:
        wait_ready(proc, url, timeout=120)
        yield url
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def translator(base) -> deepl.Translator:
    return deepl.Translator(KEY, server_url=f"{base}/deepl/")


def ours(base: str, text: str | list[str], **body) -> list[str]:
    """Our own /translate's translations of `text`."""
    r = httpx.post(
        f"{base}/translate", json={"text": text, **body}, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    )
    assert r.status_code == 200, r.text
    return [t["text"] for t in r.json()["translations"]]


def test_the_python_client_translates_a_text_and_a_list_as_our_api_does(base, translator):
    one = translator.translate_text(ENGLISH, target_lang="DE")
    assert (one.text, one.detected_source_lang, one.billed_characters) == (ours(base, ENGLISH)[0], "EN", len(ENGLISH))
    texts = ["Two dogs are playing in the snow.", "", "A woman is sitting on a bench."]
    out = translator.translate_text(texts, source_lang="EN", target_lang="DE")
    assert [r.text for r in out] == ours(base, texts) and out[1].text == ""
    french = translator.translate_text(ENGLISH, source_lang="en", target_lang="fr")
    assert french.text == ours(base, ENGLISH, model="en-fr")[0]
    unsplit = translator.translate_text(
        f"{ENGLISH} {texts[0]}", target_lang="DE", split_sentences=deepl.SplitSentences.OFF
    )
    assert unsplit.text == ours(base, f"{ENGLISH} {texts[0]}", split="none")[0]
    assert translator.translate_text(ENGLISH, target_lang="DE", formality="prefer_less").text == one.text
    assert one.model_type_used is None  # said only where model_type was sent
    for asked, used in (("quality_optimized", "quality_optimized"), ("prefer_quality_optimized", "quality_optimized"),
                        ("latency_optimized", "latency_optimized")):  # fmt: skip
        typed = translator.translate_text(ENGLISH, target_lang="DE", model_type=asked)
        assert (typed.text, typed.model_type_used) == (one.text, used)
    with pytest.raises(deepl.DeepLException, match="Bad request, message: Value for 'model_type' not supported"):
        translator.translate_text(ENGLISH, target_lang="DE", model_type="bogus")
    with pytest.raises(deepl.DeepLException, match="Bad request, message: 'formality' is not supported"):
        translator.translate_text(ENGLISH, target_lang="DE", formality="less")
    with pytest.raises(deepl.DeepLException, match="Bad request, message: Value for 'target_lang' not supported"):
        translator.translate_text(ENGLISH, target_lang="ES")


def test_the_python_client_translates_html_and_leaves_the_ignored_tags_alone(base, translator):
    page = "<p>A man is riding a <b>bike</b>.</p>"
    assert (
        translator.translate_text(page, target_lang="DE", tag_handling="html").text
        == ours(base, page, format="html")[0]
    )
    kept = translator.translate_text(
        page.replace("b>", "span>"), target_lang="DE", tag_handling="html", ignore_tags="span"
    )
    assert "<span>bike</span>" in kept.text and "translate" not in kept.text, kept.text
    translated = translator.translate_text(page.replace("b>", "span>"), target_lang="DE", tag_handling="html")
    assert "<span>bike</span>" not in translated.text


def test_the_python_client_translates_xml_whatever_its_elements_are_named(base, translator):
    """DeepL's own example of structured XML, and elements named as HTML's void or kept ones (meta, link, source,
    code, style) that XML closes and translates as any other: each element's text translated as /translate's
    plain text, the markup as written."""
    xml = ("<document><meta><title>{}</title></meta><content><par>{}</par><source>{}</source><code>{}</code>"
           "<style>{}</style><link>{}</link><p>A man is riding a <b>bike</b>.</p></content></document>")  # fmt: skip
    texts = ["A dog's title", "This is the first sentence.", "A man is riding a bike.", "A dog.", "A cat.",
             "Two dogs are playing in the snow."]  # fmt: skip
    got = translator.translate_text(xml.format(*texts), target_lang="DE", tag_handling="xml").text
    want = xml.format(*ours(base, texts)).replace(
        "<p>A man is riding a <b>bike</b>.</p>", ours(base, "<p>A man is riding a <b>bike</b>.</p>", format="html")[0]
    )
    assert got == want
    inside = "<root><script>A man is riding a <b>bike</b>.</script></root>"  # elements inside <script> too
    got = translator.translate_text(inside, target_lang="DE", tag_handling="xml").text
    assert got == "<root><script>" + ours(base, "<p>A man is riding a <b>bike</b>.</p>", format="html")[0][3:-4] + (
        "</script></root>"
    ), got
    unclosed = r"is not well-formed XML \(tag_handling \"xml\"\): </p> .* while <br> .* is still open"
    with pytest.raises(deepl.DeepLException, match=unclosed):
        translator.translate_text("<p>A dog.<br>A cat.</p>", target_lang="DE", tag_handling="xml")


def test_the_python_client_s_xml_placeholders_and_non_splitting_tags_keep_a_sentence_whole(base, translator):
    """As CAT tools send XLIFF's inline tags: an empty element (`<x id="1"/>`) and an element named in
    non_splitting_tags run in the sentence; each split it in two ("Ein Mann fährt auf einem Mann. <x id="1"/> Ein
    Fahrrad im Schnee."). splitting_tags split it, whatever the element."""
    text = 'A man rides a <x id="1"/> bike in the snow.'
    whole = ours(base, "A man rides a bike in the snow.")[0]
    got = translator.translate_text(text, target_lang="DE", tag_handling="xml").text
    assert got.count('<x id="1"/>') == 1 and got.replace('<x id="1"/> ', "") == whole, got
    assert ' <x id="1"/> ' in got  # between two words, as it was: a space on each side
    text = 'A man rides a <g id="1">red bike</g> in the snow.'
    got = translator.translate_text(text, target_lang="DE", tag_handling="xml", non_splitting_tags=["g"]).text
    untagged = re.sub("</?g[^>]*>", "", got)
    assert got.count('<g id="1">') == 1 and untagged == ours(base, re.sub("</?g[^>]*>", "", text))[0], got
    split = translator.translate_text(text, target_lang="DE", tag_handling="xml").text  # g is not HTML's: a block
    assert split != got and split.startswith(ours(base, "A man rides a")[0]), split
    split = translator.translate_text(text, target_lang="DE", tag_handling="xml", splitting_tags="g,b").text
    assert split.startswith(ours(base, "A man rides a")[0]), split
    text = "A man rides a <b>red bike</b> in the snow."  # an inline name of HTML's, named as splitting
    got = translator.translate_text(text, target_lang="DE", tag_handling="xml", splitting_tags=["b"]).text
    assert got.startswith(ours(base, "A man rides a")[0]), got


def test_the_python_client_makes_lists_uses_and_deletes_glossaries(base, translator):
    pairs = {(p.source_lang, p.target_lang) for p in translator.get_glossary_languages()}
    assert pairs == {("en", "de"), ("en", "fr")}
    made = translator.create_glossary(
        "bikes", source_lang="EN", target_lang="DE", entries={"bike": "Velo", "dog": "Köter"}
    )
    assert (made.name, made.source_lang, made.target_lang, made.entry_count, made.ready) == (
        "bikes",
        "EN",
        "DE",
        2,
        True,
    )
    from_csv = translator.create_glossary_from_csv("csv", source_lang="EN", target_lang="FR", csv_data="bike,biclou\n")
    listed = [g.glossary_id for g in translator.list_glossaries()]
    assert [x for x in listed if x in (made.glossary_id, from_csv.glossary_id)] == [
        made.glossary_id,
        from_csv.glossary_id,
    ]
    assert str(translator.get_glossary(made.glossary_id)) == str(made)
    assert translator.get_glossary_entries(made) == {"bike": "Velo", "dog": "Köter"}

    used = translator.translate_text_with_glossary([ENGLISH, "A dog."], made)
    assert "Velo" in used[0].text and "Köter" in used[1].text, used
    for page, ignored in (("<p>A man is riding a <span>bike</span>.</p>", ["span"]),
                          ("<p>A man is riding a <code>bike</code>.</p>", None)):  # fmt: skip
        kept = translator.translate_text(page, source_lang="EN", target_lang="DE", tag_handling="html",
                                         ignore_tags=ignored, glossary=made).text  # fmt: skip
        assert page[page.index("bike") - 6 : page.index("bike") + 11] in kept and "Velo" not in kept, kept
    assert "Velo" not in translator.translate_text(ENGLISH, target_lang="DE").text
    with pytest.raises(deepl.DeepLException, match="the glossary .* is EN->FR; the request is EN->DE"):
        translator.translate_text(ENGLISH, source_lang="EN", target_lang="DE", glossary=from_csv.glossary_id)

    translator.delete_glossary(made)
    translator.delete_glossary(from_csv.glossary_id)
    assert not {made.glossary_id, from_csv.glossary_id} & {g.glossary_id for g in translator.list_glossaries()}
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.get_glossary(made.glossary_id)


def test_the_python_client_reads_languages_and_usage(base, translator):
    assert [(x.code, x.name) for x in translator.get_source_languages()] == [("EN", "English")]
    targets = translator.get_target_languages()
    assert [(x.code, x.name, x.supports_formality) for x in targets] == [
        ("DE", "German", False),
        ("FR", "French", False),
    ]
    before = translator.get_usage().character
    translator.translate_text(["A dog.", "A cat."], target_lang="DE")
    after = translator.get_usage().character
    assert after.count == before.count + 12 and after.limit >= 10**12 and not after.limit_reached


def test_a_wrong_key_is_an_authorization_error_for_the_python_client(base):
    for key in ("wrong", "s3cret-deepl-key-not"):
        with pytest.raises(deepl.AuthorizationException, match="Authorization failure, check auth_key"):
            deepl.Translator(key, server_url=f"{base}/deepl/").translate_text(ENGLISH, target_lang="DE")
    # DeepL's own layout, /v2 at the root: a server URL without the trailing slash resolves there
    assert deepl.Translator(KEY, server_url=f"{base}/deepl").translate_text(ENGLISH, target_lang="DE").text


@pytest.fixture
def quick_polls(monkeypatch):
    """The client waits 5 s between two status requests of translate_document(); a tenth of a second here."""
    sleep = time.sleep
    monkeypatch.setattr(deepl.translator.time, "sleep", lambda s: sleep(min(s, 0.1)))


def test_the_python_client_translates_a_document_as_our_api_translates_its_paragraphs(base, translator, tmp_path,
                                                                                      quick_polls):  # fmt: skip
    paragraphs = [ENGLISH, "Two dogs are playing in the snow.", "A woman is sitting on a bench."]
    source, out = tmp_path / "notes.txt", tmp_path / "notes.de.txt"
    source.write_text("\n\n".join(paragraphs))
    before = translator.get_usage().character.count
    status = translator.translate_document_from_filepath(source, out, target_lang="DE")
    assert status.done and status.billed_characters == sum(map(len, paragraphs))
    assert translator.get_usage().character.count == before + status.billed_characters  # documents count too
    assert out.read_text() == "\n\n".join(ours(base, paragraphs))

    handle = translator.translate_document_upload("\n\n".join(paragraphs * 20), target_lang="FR", filename="a.txt")
    assert translator.translate_document_wait_until_done(handle).done
    wrong = deepl.DocumentHandle(handle.document_id, "0" * 64)
    with pytest.raises(deepl.DeepLException, match="Not found, message: Document not found"):
        translator.translate_document_get_status(wrong)
    for how, what in (("GET", ""), ("GET", "/download"), ("GET", "/events"), ("DELETE", "")):  # nor without the key
        r = httpx.request(how, f"{base}/files/{handle.document_id}{what}", headers={"Authorization": f"Bearer {KEY}"})
        assert (r.status_code, r.json()["type"]) == (404, "not_found"), (how, what, r.text)
    french = translator.translate_document_download(handle).content.decode()
    assert french == "\n\n".join(ours(base, paragraphs, model="en-fr") * 20)
    with pytest.raises(deepl.DeepLException, match="Document not found"):  # downloaded once, then deleted
        translator.translate_document_get_status(handle)

    with pytest.raises(deepl.DeepLException, match="Bad request, message: cannot tell the format of 'a.pdf'"):
        translator.translate_document_upload(b"%PDF", target_lang="DE", filename="a.pdf")
    with pytest.raises(deepl.DeepLException, match="Bad request, message: output_format docx is not supported"):
        translator.translate_document_upload(b"A dog.", target_lang="DE", filename="a.txt", output_format="docx")
    with pytest.raises(deepl.DeepLException, match="Bad request, message: Value for 'target_lang' not supported"):
        translator.translate_document_upload(b"A dog.", target_lang="ES", filename="a.txt")


@pytest.mark.skipif(importlib.util.find_spec("app.files.word") is None, reason="app/files/word.py has not landed")
def test_the_python_client_translates_a_word_document_in_place(base, translator, tmp_path, quick_polls):
    import docx

    paragraphs = [ENGLISH, "Two dogs are playing in the snow."]
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    document.save(tmp_path / "notes.docx")
    translator.translate_document_from_filepath(tmp_path / "notes.docx", tmp_path / "out.docx", target_lang="DE")
    translated = [p.text for p in docx.Document(tmp_path / "out.docx").paragraphs]
    assert translated == ours(base, paragraphs), translated


@pytest.mark.skipif(shutil.which("node") is None, reason="no node: deepl-node needs Node.js")
@pytest.mark.skipif(
    not (NODE_CLIENT / "node_modules" / "deepl-node").is_dir(),
    reason="deepl-node is not installed: bash scripts/install.sh runs `npm ci` in tests/clients/deepl-node",
)
def test_the_node_client_translates_and_manages_glossaries_as_the_python_one(base):
    run = subprocess.run(
        ["node", "calls.js", f"{base}/deepl", KEY, "wrong"], cwd=NODE_CLIENT, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    german = ours(base, [ENGLISH, "Two dogs are playing in the snow.", "A woman sits."])
    assert out["one"] == {"text": german[0], "detectedSourceLang": "en", "billedCharacters": len(ENGLISH)}
    assert [r["text"] for r in out["list"]] == german[1:]
    assert out["french"]["text"] == ours(base, ENGLISH, model="en-fr")[0]
    page = "<p>A man is riding a <b>bike</b>.</p>"
    assert out["html"]["text"] == ours(base, page, format="html")[0]
    assert "<span>bike</span>" in out["ignored"]["text"]
    assert out["sourceLanguages"] == [{"name": "English", "code": "en"}]
    assert [x["code"] for x in out["targetLanguages"]] == ["de", "fr"]
    assert {(p["sourceLang"], p["targetLang"]) for p in out["glossaryPairs"]} == {("en", "de"), ("en", "fr")}
    created = out["created"]
    assert (created["name"], created["sourceLang"], created["targetLang"], created["entryCount"]) == (
        "node bikes", "en", "de", 2,
    )  # fmt: skip
    assert out["fromCsv"]["entryCount"] == 2 and out["got"]["glossaryId"] == created["glossaryId"]
    assert set(out["listed"]) == {created["glossaryId"], out["fromCsv"]["glossaryId"]}
    assert out["entries"] == {"bike": "Velo", "snow": "Pulverschnee"}
    assert "Velo" in out["withGlossary"]["text"], out["withGlossary"]
    assert out["afterDelete"] == "GlossaryNotFoundError"
    assert out["usage"]["count"] > 0 and out["wrongKey"] == "AuthorizationError"
