"""Hostile bytes, not schema-valid bodies: whatever is POSTed, each endpoint answers a documented status with a JSON
body, user text is read as text (never as control tokens), and lone surrogates, deep nesting and huge numbers are
handled as docs/api.md "Errors" says. In process on two tiny models, then a sample over a real socket."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import hypothesis
import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import strategies as st

from app.settings import MAX_BODY_BYTES, Settings
from model.checkpoint import load_checkpoint
from model.evaluate import translate_corpus
from model.tokenizer import BOS, EOS, PAD, UNK
from tests.app.conftest import MODES, served_in
from tests.app.helpers import assert_error, full_app_only
from tests.app.hostile import DEEP, DEEPL, LIBRE, LIVE
from tests.app.live import start_server, wait_ready

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end
HOSTILE = hypothesis.settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
VALID = {  # a request each POST endpoint accepts, to mutate; the LibreTranslate ones translate with `fr` (en->fr)
    "/translate": {"text": ["A dog runs.", "Two </s> cats."], "max_new_tokens": 5, "return_tokens": True,
                   "min_confidence": 0.1, "return_signals": True, "return_word_confidence": True,
                   "glossary": {"dog": "Hund", "Two": "</s>"}, "glossary_ignore_case": True, "protect": True,
                   "protect_terms": ["A dog"], "protect_patterns": [r"c[a-z]+s"]},
    "/glossaries": {"name": "dogs", "source_lang": "en", "target_lang": "fr", "entries": {"dog": "chien"}},
    "/tokenize": {"text": "A man <pad> is here.", "side": "target"},
    "/detokenize": {"ids": [[1, 50, 60, 2]], "skip_special_tokens": False},
    "/attention": {"text": "A dog.", "target": "Ein </s> Hund.", "layers": [0]},
    f"{LIBRE}/translate": {"q": "A dog runs.", "source": "en", "target": "fr", "alternatives": 1,
                           "min_confidence": "0.1"},
    f"{LIBRE}/detect": {"q": "A dog runs."},
    f"{LIBRE}/translate_file": {"source": "en", "target": "fr"},
    f"{LIBRE}/suggest": {"q": "A dog runs."},
    f"{DEEPL}/v2/translate": {"text": ["A <b>dog</b> runs."], "source_lang": "EN", "target_lang": "FR",
                              "tag_handling": "xml", "ignore_tags": ["b"], "context": "Dogs.", "formality": "prefer_less",
                              "non_splitting_tags": ["g"], "splitting_tags": ["b"],
                              "show_billed_characters": True},
    f"{DEEPL}/v2/glossaries": {"name": "dogs", "source_lang": "EN", "target_lang": "FR", "entries": "dog\tchien",
                               "entries_format": "tsv"},
    "/files": {"target": "fr", "format": "txt"},  # multipart only: UPLOADS below sends files
    f"{DEEPL}/v2/document": {"target_lang": "FR", "filename": "a.txt"},
    f"{DEEPL}/v2/document/{{document_id}}": {"document_key": "0" * 64},
    f"{DEEPL}/v2/document/{{document_id}}/result": {"document_key": "0" * 64},
}  # fmt: skip
STRING_FIELDS = {  # where user text goes in
    "/translate": ["text", "target_prefix", "model", "source", "glossary_id"],
    "/glossaries": ["name", "source_lang", "target_lang", "entries"],
    "/tokenize": ["text", "model", "language"],
    "/detokenize": ["model"],
    "/attention": ["text", "target", "model", "source_language", "target_language"],
    f"{LIBRE}/translate": ["q", "source", "target", "api_key"],
    f"{LIBRE}/detect": ["q", "api_key"],
    f"{LIBRE}/translate_file": ["source", "target", "api_key"],
    f"{LIBRE}/suggest": ["q"],
    f"{DEEPL}/v2/translate": ["text", "source_lang", "target_lang", "context", "glossary_id", "ignore_tags"]
    + ["non_splitting_tags", "splitting_tags"],
    f"{DEEPL}/v2/glossaries": ["name", "source_lang", "target_lang", "entries"],
    "/files": ["target", "source", "model", "format", "glossary_id"],
    f"{DEEPL}/v2/document": ["target_lang", "source_lang", "filename", "glossary_id", "output_format"],
    f"{DEEPL}/v2/document/{{document_id}}": ["document_key"],
    f"{DEEPL}/v2/document/{{document_id}}/result": ["document_key"],
}
STATUSES = {200, 201, 202, 404, 413, 422, 429, 503}  # docs/api.md "Errors" for a POST without a key (404: glossary_id)
LIBRE_STATUSES = {200, 400, 403, 429, 503}  # LibreTranslate's
DEEPL_STATUSES = {200, 201, 400, 404, 413, 429, 503}  # DeepL's, `{"message", "type"}`
CONTENT_TYPES = [
    "application/json", "application/json; charset=utf-8", "application/json; charset=latin-1", "Application/JSON",
    "application/vnd.api+json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
    "multipart/form-data; boundary=xyz", "*/*", "", None,
]  # fmt: skip


@pytest.fixture(scope="module")
def settings(tiny_checkpoint, french, tmp_path_factory) -> Settings:
    """tests/app/conftest.py's served app, with an en->fr model beside the tiny one for the LibreTranslate and DeepL
    routes and the glossaries."""
    return Settings(
        models=f"tiny={tiny_checkpoint},fr={french}", max_input_tokens=64, max_new_tokens=40, max_batch_texts=8,
        compile=False, glossary_dir=tmp_path_factory.mktemp("glossaries"),
    )  # fmt: skip


# ---- the bodies ----------------------------------------------------------------------------------------------------

ESCAPES = ["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud83d\\ude00", "\\ude00\\ud83d", "\\u0000", "\\u001f"]
PIECES = [*ESCAPES, *"a \x00\x1f\x7fä😀▁", "\\n", "\\\\", '\\"', EOS, BOS, PAD, UNK, "<0x41>"]  # raw controls: not JSON
strings = st.lists(st.sampled_from(PIECES), max_size=12).map(lambda parts: ('"' + "".join(parts) + '"').encode())
numbers = st.sampled_from(
    [b"1e309", b"-1e309", b"1e-400", b"-0", b"1.5", b"9" * 5000, b"-" + b"9" * 4301, b"9" * 30, b"NaN", b"Infinity"]
)
BRACKETS = {b"[": b"]", b'{"a": ': b"}", b'[{"b": ': b"}]"}
nested = st.builds(
    lambda depth, open_: open_ * depth + b'"x"' + BRACKETS[open_] * depth,
    st.integers(1, DEEP),
    st.sampled_from(list(BRACKETS)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
).map(lambda v: json.dumps(v).encode())
values = strings | numbers | nested | json_values | nested.map(lambda b: b[: len(b) // 2])  # the last: unbalanced
INSERTS = [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xc3", b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"\\ud800"]


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """A valid body with a few bytes flipped, inserted or deleted, or cut short."""
    body = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        at, kind = draw(st.integers(0, len(body))), draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if kind == "flip" and at < len(body):
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            body[at:at] = draw(st.sampled_from(INSERTS) | st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del body[at : at + 1]
        else:
            del body[at:]
    return bytes(body)


def with_value(path: str, field: str, raw: bytes) -> bytes:
    """The path's valid body with one field's value replaced by raw JSON bytes (maybe not JSON at all)."""
    return json.dumps({**VALID[path], field: "@@"}).encode().replace(b'"@@"', raw)


def bodies(path: str) -> st.SearchStrategy[bytes]:
    valid = json.dumps(VALID[path]).encode()
    fields = st.sampled_from([*STRING_FIELDS[path], *VALID[path]])
    return st.one_of(
        st.binary(max_size=300),
        mutated(valid),
        mutated(b"q=A%20dog&source=en&target=fr"),
        st.tuples(fields, values).map(lambda fv: with_value(path, *fv)),
        st.tuples(st.sampled_from(STRING_FIELDS[path]), strings).map(lambda fv: with_value(path, *fv)),
        nested,
        st.just(valid[:-1] + b', "' + valid[2:]),  # every key twice
    )


def assert_documented(r, path: str) -> None:
    """A status docs/api.md lists for the endpoint, and a JSON body: `{"error", "type"}` (DeepL's API: `{"message",
    "type"}`) unless it succeeded."""
    statuses = LIBRE_STATUSES if path.startswith(LIBRE) else DEEPL_STATUSES if path.startswith(DEEPL) else STATUSES
    assert r.status_code in statuses, (r.status_code, r.text)
    if r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"):
        return
    body = r.json()
    if r.status_code >= 400:
        message = body["message" if path.startswith(DEEPL) else "error"]
        assert isinstance(message, str) and message and isinstance(body["type"], str), body


async def test_every_post_endpoint_is_fuzzed(app):
    posts = {path for path, ops in app.openapi()["paths"].items() if "post" in ops}
    assert posts == set(VALID)


@HOSTILE
@given(
    request=st.sampled_from(list(VALID)).flatmap(lambda path: st.tuples(st.just(path), bodies(path))),
    content_type=st.just("application/json") | st.sampled_from(CONTENT_TYPES),
)
async def test_hostile_bytes_get_a_documented_status_with_a_json_body(client, request, content_type):
    path, body = request
    headers = {} if content_type is None else {"content-type": content_type}
    r = await client.post(path, content=body, headers=headers)
    event(f"{path} {r.status_code}")
    assert_documented(r, path)


# ---- uploads -------------------------------------------------------------------------------------------------------

UPLOADS = {  # the fields of an upload that translates
    "/files": {"target": "fr"}, f"{LIBRE}/translate_file": {"source": "en", "target": "fr"},
    f"{DEEPL}/v2/document": {"target_lang": "FR", "source_lang": "EN"},
}  # fmt: skip
NAMES = ["a.txt", "a.srt", "a.vtt", "a.po", "a.docx", "a.xlsx", "a.md", "a.html", "a", ".txt", "", "../../etc/x.txt",
         "a\\b.txt", "a\x00.txt", "a\r\nb.txt", "\u202ea.txt", "\ud800.txt", "a" * 300 + ".txt", "a.TXT", "a.txt."]  # fmt: skip
VALUES = ["en", "fr", "de", "auto", "", "txt", "docx", "xx", "0", "9", "-1", "\x00", "\ud800", "a" * 3000]
contents = st.one_of(
    st.binary(max_size=400), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"A dog runs.\n\nA cat.", b"PK\x03\x04" + b"\x00" * 40, b"\xef\xbb\xbfA dog.",
                     b"1\n00:00:01,000 --> 00:00:02,000\nA dog.\n", b'msgid "a"\nmsgstr ""\n', b"\x00" * 50]),
)  # fmt: skip


@st.composite
def uploads(draw) -> tuple[str, list]:
    """A path and its multipart parts: mostly its valid fields, a file of any bytes and name (or none), and fields of
    any value, some of them the valid ones again."""
    path = draw(st.sampled_from(list(UPLOADS)))
    valid = [(n, (None, v.encode())) for n, v in UPLOADS[path].items()]
    names = [*STRING_FIELDS[path], "beam_size", "other"]
    parts = [part for part in valid if draw(st.sampled_from([True] * 9 + [False]))]  # each missing one time in ten
    parts += [(n, (None, draw(st.sampled_from(VALUES) | st.text(max_size=12)).encode("utf-8", "surrogatepass")))
              for n in draw(st.lists(st.sampled_from(names), max_size=3))]  # fmt: skip
    if draw(st.sampled_from([True] * 9 + [False])):
        name = draw(st.sampled_from(NAMES[:1] * 8 + NAMES) | st.text(max_size=20))
        data = draw(st.sampled_from([b"A dog runs.\n\nA cat."] * 3) | contents)
        parts.append((draw(st.sampled_from(["file"] * 9 + ["File"])), (name, data)))
    return path, parts or [("other", (None, b""))]


def multipart(parts: list) -> dict:
    """A multipart body built by hand, so that a file's name may hold any bytes (a lone surrogate's, a NUL, a quote)."""
    body = b""
    for name, (filename, value) in parts:
        head = f'Content-Disposition: form-data; name="{name}"'.encode()
        if filename is not None:
            head += b'; filename="' + filename.encode("utf-8", "surrogatepass") + b'"'
        body += b"--xyz\r\n" + head + b"\r\n\r\n" + value + b"\r\n"
    return {"content": body + b"--xyz--\r\n", "headers": {"content-type": "multipart/form-data; boundary=xyz"}}


@hypothesis.settings(HOSTILE, max_examples=200)
@given(upload=uploads())
async def test_hostile_uploads_get_a_documented_status_with_a_json_body(app, client, upload):
    path, parts = upload
    r = await client.post(path, **multipart(parts))
    event(f"{path} {r.status_code}")
    assert_documented(r, path)
    if r.status_code == 202 or (r.status_code == 200 and path.startswith(DEEPL)):  # queued: done, or failed saying why
        job = await app.state.jobs.finished(r.json().get("id") or r.json()["document_id"])
        assert job.status == "done" or job.error, job


# ---- text is text ----------------------------------------------------------------------------------------------

SPELLED = "A man </s> rides <pad> a <s>bike</s> <unk>."


async def test_text_that_spells_special_tokens_is_ordinary_pieces_and_comes_back_from_detokenize(client, tokenizer):
    for side, wrap in (("source", [EOS]), ("target", [BOS, EOS])):
        r = await client.post("/tokenize", json={"text": [SPELLED, EOS], "side": side})
        for text, result in zip((SPELLED, EOS), r.json()["results"], strict=True):
            tokens = result["tokens"]
            assert [t["text"] for t in tokens if t["special"]] == wrap
            assert tokens[-1]["text"] == EOS and (side == "source" or tokens[0]["text"] == BOS)  # around the text
            inner = [t for t in tokens if not t["special"]]
            assert not {t["id"] for t in inner} & tokenizer.special_ids
            assert not {t["text"] for t in inner} & {EOS, BOS, PAD, UNK}
            ids = [t["id"] for t in tokens]
            back = await client.post("/detokenize", json={"ids": ids, "side": side, "skip_special_tokens": True})
            assert back.json()["results"][0]["text"] == text
    bare = (await client.post("/tokenize", json={"text": EOS, "add_special_tokens": False})).json()["results"][0]
    assert not any(t["special"] or t["id"] in tokenizer.special_ids for t in bare["tokens"])


@pytest.fixture
def encoded(app, monkeypatch) -> list[tuple[list[int], str, bool]]:
    """Every sequence of ids the tiny model's tokenizer encodes for the engine: (ids, side, add_special_tokens)."""
    tokenizer, seen = app.state.models.engines["tiny"].tokenizer, []
    encode, encode_batch = tokenizer.encode, tokenizer.encode_batch

    def one(text, side="source", add_special_tokens=True):
        ids = encode(text, side, add_special_tokens)
        seen.append((ids, side, add_special_tokens))
        return ids

    def many(texts, side="source", add_special_tokens=True):
        out = encode_batch(texts, side, add_special_tokens)
        seen.extend((ids, side, add_special_tokens) for ids in out)
        return out

    monkeypatch.setattr(tokenizer, "encode", one)
    monkeypatch.setattr(tokenizer, "encode_batch", many)
    return seen


@pytest.mark.parametrize(
    "path, body",
    [
        ("/translate", {"text": SPELLED}),
        ("/translate", {"text": f"A dog runs. {SPELLED}\n</s> <pad>", "split": "sentences"}),
        ("/translate", {"text": f"{SPELLED}\n<s>", "split": "lines"}),
        ("/translate", {"text": "A dog </s>", "target_prefix": "Ein </s>", "split": "none"}),
        ("/translate", {"text": "<p>A <s>struck</s> dog &lt;/s&gt; runs.</p>", "format": "html"}),
        ("/attention", {"text": SPELLED, "target": "Ein </s> <pad> Hund."}),
    ],
)
async def test_text_that_spells_special_tokens_reaches_the_model_without_them(client, tokenizer, encoded, path, body):
    r = await client.post(path, json={**body, "model": "tiny"})
    assert r.status_code == 200, r.text
    assert encoded
    for ids, side, wrapped in encoded:
        inner = ids[(side == "target") : -1] if wrapped else ids
        assert not set(inner) & tokenizer.special_ids, ids
    if body.get("format") == "html":  # HTML's strikethrough is markup, kept as written
        assert "<s>" in r.json()["translations"][0]["text"] and "</s>" in r.json()["translations"][0]["text"]


async def test_text_that_spells_special_tokens_translates_as_its_characters(client, tiny_checkpoint):
    model, tokenizer, _ = load_checkpoint(tiny_checkpoint)
    texts = [SPELLED, EOS, f"{PAD}{PAD}", "Zwei </s> Hunde."]
    body = {"text": texts, "model": "tiny", "split": "none", "max_new_tokens": 12}
    served = (await client.post("/translate", json=body)).json()
    assert [t["text"] for t in served["translations"]] == translate_corpus(model, tokenizer, texts, max_new_tokens=12)
    assert served["usage"]["input_tokens"] == sum(len(tokenizer.encode(t)) for t in texts)


# ---- lone surrogates ----------------------------------------------------------------------------------------------


def raw(body: str) -> dict:
    return {"content": body.encode(), "headers": {"content-type": "application/json"}}


async def test_a_lone_surrogate_is_read_as_the_replacement_character_everywhere(client, monkeypatch):
    same = [
        ("/tokenize", '{"text": ["%s dog", "a%sb"]}'),
        ("/translate", '{"text": "A %s dog.", "return_tokens": true}'),
        ("/translate", '{"text": ["A %s dog.", "x"], "target_prefix": null, "return_segments": true}'),
        ("/translate", '{"text": "A dog%s.", "target_prefix": "Ein %s"}'),
        ("/attention", '{"text": "A %s dog.", "target": "Ein %s Hund."}'),
        (f"{LIBRE}/translate", '{"q": "A %s dog.", "source": "en", "target": "fr"}'),
        (f"{LIBRE}/detect", '{"q": "A %s dog."}'),
    ]
    for path, template in same:
        for fast in (True, False):
            if not fast:
                full_app_only(monkeypatch)
            replaced = await client.post(path, json=json.loads(template.replace("%s", "\\ufffd")))
            assert replaced.status_code == 200, (path, replaced.text)
            for lone in ("\\ud800", "\\udfff", "\\ude00\\ud83d"):
                r = await client.post(path, **raw(template.replace("%s", lone)))
                if lone == "\\ude00\\ud83d":  # a reversed pair is two lone halves, two replacements
                    r2 = await client.post(path, json=json.loads(template.replace("%s", "\\ufffd\\ufffd")))
                    assert (r.status_code, r.json()) == (200, r2.json()), path
                else:
                    assert (r.status_code, r.json()) == (200, replaced.json()), (path, lone)
            monkeypatch.undo()
    # raw UTF-8 bytes of a surrogate (not UTF-8, but Python's JSON reader lets them through) are read the same way
    r = await client.post(
        "/tokenize", content=b'{"text": "a\xed\xa0\x80b"}', headers={"content-type": "application/json"}
    )
    assert r.json() == (await client.post("/tokenize", json={"text": "a\ufffdb"})).json()


async def test_a_lone_surrogate_in_a_name_or_code_is_named_in_the_error(client):
    r = await client.post("/translate", **raw('{"text": "a", "model": "x\\ud800"}'))
    assert_error(r, 422, "validation_error", "x\ufffd")
    r = await client.post("/attention", **raw('{"text": "a", "target_language": "x\\ud800"}'))
    assert_error(r, 422, "validation_error", "x\ufffd")
    r = await client.post("/tokenize", **raw('{"text": "a", "language": "x\\udfff"}'))
    assert_error(r, 422, "validation_error", "x\ufffd")
    r = await client.post(f"{LIBRE}/translate", **raw('{"q": "a", "source": "x\\ud800", "target": "fr"}'))
    assert_error(r, 400, "bad_request", "x\ufffd is not supported")
    r = await client.post(
        f"{LIBRE}/translate", **raw('{"q": "a", "source": "en", "target": "fr", "api_key": "\\ud800"}')
    )
    assert r.status_code == 200  # no key set: any key, even a broken one, is let in


async def test_a_pair_of_surrogates_is_one_character(client):
    a = await client.post("/tokenize", **raw('{"text": "a \\ud83d\\ude00"}'))
    b = await client.post("/tokenize", json={"text": "a 😀"})
    assert a.json() == b.json()


# ---- nesting, numbers, encodings, content types ---------------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "full app"])
async def test_deep_nesting_is_a_422_and_the_app_goes_on(client, monkeypatch, fast):
    if not fast:
        full_app_only(monkeypatch)
    deep = b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    for path in ("/translate", "/tokenize", "/attention"):
        r = await client.post(path, content=deep, headers={"content-type": "application/json"})
        assert_error(r, 422, "validation_error", "too deeply", "3 levels at most")
    deep_ids = b'{"ids": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    r = await client.post("/detokenize", content=deep_ids, headers={"content-type": "application/json"})
    assert_error(r, 422, "validation_error", "too deeply")
    r = await client.post(f"{LIBRE}/translate", content=b'{"q": ' + b"[" * DEEP + b"]" * DEEP + b"}",
                          headers={"content-type": "application/json"})  # fmt: skip
    assert_error(r, 400, "bad_request", "Invalid JSON format")
    assert (await client.post("/translate", json={"text": "A dog."})).status_code == 200


JSON = {"content-type": "application/json"}
CASES = [  # (body, headers, words of /translate's 422, LibreTranslate's status); the other endpoints say 422 too
    (b'{"text": "a", "max_new_tokens": 1e309}', JSON, ["max_new_tokens", "integer"], 200),  # a field it ignores
    (b'{"text": "a", "max_new_tokens": ' + b"9" * 5000 + b"}", JSON, ["more than 4300 digits"], 400),
    (b'{"text": "a", "seed": ' + b"9" * 40 + b"}", JSON, ["seed"], 200),
    (b'{"text": "a", "length_penalty": NaN}', JSON, ["length_penalty"], 200),
    (b'{"text": "a\x00b"}', JSON, ["not valid JSON", "control character"], 400),
    (b'{"text": "\xff\xfe"}', JSON, ["not valid JSON", "utf-8"], 400),
    (b'{"text": "\xc3"}', JSON, ["not valid JSON", "utf-8"], 400),
    (b'{"text": 5}', JSON, ["text", "string or a list of strings"], 400),
    (b'{"text": ["a", 1e309]}', JSON, ["item 1", "string"], 400),
    (b'{"text": "a", "return_tokens": "true"}', JSON, ["return_tokens", "boolean"], 200),
    (b'{"text": "a", "max_new_tokens": "5"}', JSON, ["max_new_tokens", "integer"], 200),
    (b'{"text": "a", "model": 5}', JSON, ["model", "string"], 200),
    (b"", JSON, ["JSON object"], 400),
    (b"   ", JSON, ["not valid JSON"], 400),
    (b"null", JSON, ["JSON object"], 400),
    (b'{"text": "a"}', {"content-type": "text/plain"}, ["Content-Type: application/json"], 400),
    (b'{"text": "a"}', {"content-type": "application/x-www-form-urlencoded"}, ["Content-Type: application/json"], 400),
    (b'{"text": "a"}', {"content-type": "multipart/form-data"}, ["Content-Type: application/json"], 400),
    (b'{"text": "a"}', {}, ["Content-Type: application/json"], 400),
]


@pytest.mark.parametrize("body, headers, words, libre", CASES, ids=[f"{c[0][:32]!r} {c[1]}" for c in CASES])
async def test_malformed_bodies_get_their_documented_4xx_on_every_endpoint(client, monkeypatch, body, headers, words,
                                                                          libre):  # fmt: skip
    assert_error(await client.post("/translate", content=body, headers=headers), 422, "validation_error", *words)
    full_app_only(monkeypatch)
    assert_error(await client.post("/translate", content=body, headers=headers), 422, "validation_error", *words)
    for path in ("/tokenize", "/attention", "/detokenize"):
        other = body.replace(b'"text"', b'"ids"') if path == "/detokenize" else body
        assert_error(await client.post(path, content=other, headers=headers), 422, "validation_error")
    q = body.replace(b'{"text"', b'{"source": "en", "target": "fr", "q"')
    r = await client.post(f"{LIBRE}/translate", content=q, headers=headers)
    if libre == 200:  # LibreTranslate reads q, source, target, format, alternatives, api_key (and min_confidence) only
        assert r.status_code == 200, r.text
    else:
        assert_error(r, 400, "bad_request", "Invalid")


async def test_a_key_given_twice_counts_with_its_last_value(client):
    r = await client.post(
        "/tokenize", **raw('{"text": "a </s>", "text": "A dog.", "side": "target", "side": "source"}')
    )
    assert r.json() == (await client.post("/tokenize", json={"text": "A dog."})).json()
    r = await client.post("/translate", **raw('{"text": 5, "text": "A dog."}'))
    assert r.status_code == 200


async def test_nul_and_control_characters_escaped_in_json_are_text(client, tokenizer):
    text = "a\u0000b\u001f\u007f\u0085c\u2028"
    r = await client.post("/tokenize", json={"text": text, "add_special_tokens": False})
    assert [t["id"] for t in r.json()["results"][0]["tokens"]] == tokenizer.encode(text, add_special_tokens=False)
    assert (await client.post("/translate", json={"text": text})).status_code == 200


# ---- metrics ----------------------------------------------------------------------------------------------------


async def test_metrics_label_every_route_by_its_template_and_unknown_paths_as_one(app, client):
    def count(endpoint: str, status: str) -> float:
        labels = {"endpoint": endpoint, "status": status}
        return app.state.metrics.registry.get_sample_value("nmt_requests_total", labels) or 0.0

    huge = b"x" * (MAX_BODY_BYTES + 1)  # refused by its Content-Length before any route is chosen
    requests = [
        ("GET", "/docs", "/docs", 200), ("GET", "/redoc", "/redoc", 200), ("GET", "/openapi.json", "/openapi.json", 200),
        ("GET", "/docs/oauth2-redirect", "/docs/oauth2-redirect", 200), ("POST", "/docs", "/docs", 405),
        ("GET", "/static/viewer.css", "/static/{name}", 200), ("GET", "/static/nothing.js", "/static/{name}", 404),
        ("POST", f"{LIBRE}/translate", f"{LIBRE}/translate", 400),  # not our own /translate
        ("GET", f"{LIBRE}/download_file/a.txt", f"{LIBRE}/download_file/{{filename}}", 400),
        ("POST", "/translate", "/translate", 413, huge), ("POST", "/tokenize", "/tokenize", 413, huge),
        ("GET", "/docs/nowhere", "unmatched", 404), ("GET", "/nowhere/42", "unmatched", 404),
    ]  # fmt: skip
    for method, path, endpoint, status, *content in requests:
        before = count(endpoint, str(status))
        r = await client.request(method, path, content=content[0] if content else None)
        assert (r.status_code, count(endpoint, str(status))) == (status, before + 1), (method, path)


# ---- a live server -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tiny_checkpoint):
    proc, base = start_server(tiny_checkpoint)
    try:
        wait_ready(proc, base, timeout=60)
        yield urlsplit(base)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("path, body, content_type, status", LIVE, ids=[f"{p} {b[:24]!r}" for p, b, _, _ in LIVE])
def test_a_live_server_answers_hostile_bodies_and_then_a_normal_request(live, path, body, content_type, status):
    conn = http.client.HTTPConnection(live.hostname, live.port, timeout=30)
    conn.request("POST", path, body=body, headers={"Content-Type": content_type})
    r = conn.getresponse()
    answer = json.loads(r.read())
    assert r.status == status, answer
    assert r.status == 200 or set(answer) == {"error", "type"}, answer
    assert not r.will_close  # the connection stays open: the same one answers the next request
    sock = conn.sock
    conn.request("POST", "/translate", body=b'{"text": "A dog."}', headers={"Content-Type": "application/json"})
    again = conn.getresponse()
    assert (again.status, conn.sock) == (200, sock) and json.loads(again.read())["translations"]
    conn.close()
    fresh = http.client.HTTPConnection(live.hostname, live.port, timeout=30)
    fresh.request("POST", "/tokenize", body=b'{"text": "A dog."}', headers={"Content-Type": "application/json"})
    assert fresh.getresponse().status == 200
    fresh.close()
