"""The structure inside valid requests, generated: HTML pages of every shape, documents of every skeleton, the
LibreTranslate forms, token ids at the vocabulary's ends. Every request gets its 200 or a documented 4xx JSON error
that says what was wrong; what comes back keeps the input's structure (the page's elements, the text's whitespace);
and the server then answers a normal request exactly as before, with nothing left in its queue.
bench/hostile_shapes.py's corpus, the hardest shapes at the default limits, is replayed too.

NMT_FUZZ_EXAMPLES sets the examples per fuzzer (default 120)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from html.parser import HTMLParser
from urllib.parse import quote_plus, urlencode

import httpx
import hypothesis
import pytest
from hypothesis import HealthCheck, event, example, given
from hypothesis import strategies as st

from app.html import HTML, XML, parse
from app.html.reader import _CLOSED_BY
from app.segment import blank
from app.settings import Settings
from bench.hostile_shapes import corpus
from tests.app.conftest import MODES, engine_side, served_in
from tests.app.helpers import until

pytestmark = pytest.mark.anyio
STRUCTURE = hypothesis.settings(
    max_examples=int(os.environ.get("NMT_FUZZ_EXAMPLES", "120")), deadline=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip
LIMIT = 20_000  # NMT_MAX_REQUEST_CHARS: the default, which the server below keeps
STATUSES = {200, 413, 422}  # /translate, /tokenize, /detokenize and /attention on an idle server (docs/api.md)
LIBRE = "/libretranslate"
LIBRE_STATUSES = {200, 400, 403}
DEEPL = "/deepl/v2/translate"
DEEPL_STATUSES = {200, 400, 404, 413}
RECURSION_LIMIT = sys.getrecursionlimit()  # Python's default, before any test raised it
NORMAL = {"text": "A man is riding a bike. Two dogs play.", "return_tokens": True, "return_scores": True}


@pytest.fixture(scope="module")
def settings(german, tmp_path_factory) -> Settings:
    """The default limits (characters, texts, tokens, queue), short translations to keep the fuzzers quick."""
    return Settings(model_dir=german, max_new_tokens=8, compile=False, glossary_dir=tmp_path_factory.mktemp("g"))


served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)


@pytest.fixture(scope="module")
async def normal(served) -> dict:
    r = await served[1].post("/translate", json=NORMAL)
    assert r.status_code == 200, r.text
    return r.json()


class Client:
    """The app's client, each request served under Python's default recursion limit, as a real server's would be:
    hypothesis raises the limit while a test runs, which would hide a parser that recurses on depth."""

    def __init__(self, client: httpx.AsyncClient):
        self.client = client

    async def post(self, *args, **kwargs) -> httpx.Response:
        raised = sys.getrecursionlimit()
        sys.setrecursionlimit(RECURSION_LIMIT)
        try:
            return await self.client.post(*args, **kwargs)
        finally:
            sys.setrecursionlimit(raised)


@pytest.fixture
def client(served) -> Client:
    return Client(served[1])


@pytest.fixture
async def after(served, normal):
    """Checks that the server's queue and batch empty (at once in one process; behind a front-end, once the engine
    process has had the cancellations of requests answered with an error), and that it then answers a normal request
    alone as it did before."""
    app, client = served
    batchers = [engine.core.batcher for engine in engine_side(app).engines.values()]

    def idle() -> bool:
        return all((b.load, b.running, len(b.batch)) == (0, 0, 0) for b in batchers)

    async def check() -> None:
        await until(idle, timeout=30)
        r = await client.post("/translate", json=NORMAL)
        assert (r.status_code, r.json()) == (200, normal)
        await until(idle, timeout=30)

    return check


def assert_documented(r, statuses: set[int] = STATUSES, message: str = "error") -> dict | list:
    """A documented status with a JSON body; an error is `{"error", "type"}` with a message (DeepL's API: `{"message",
    "type"}`)."""
    assert r.status_code in statuses, (r.status_code, r.text[:2000])
    body = r.json()
    if r.status_code != 200:
        assert set(body) == {message, "type"} and body[message] and isinstance(body["type"], str), body
    if hypothesis.currently_in_test_context():
        event(f"status {r.status_code}" + (f" {body[message][:40]}" if r.status_code != 200 else ""))
    return body


def sized(draw, unit: str, most: int = LIMIT) -> int:
    """How often to repeat `unit`: a few times, any number, up to `most` characters in all, or just past them."""
    n = max(1, most // max(1, len(unit)))
    ranges = [(1, min(n, 10)), (1, n), (n * 3 // 4, n), (n * 3 // 4, n), (n, n + n // 10 + 1)]
    return draw(st.sampled_from(ranges).flatmap(lambda r: st.integers(*r)))


def sized_event(what: str, chars: int) -> None:
    event(f"{what}: {'under 1,000' if chars < 1_000 else f'{chars // 5_000 * 5}k+'} characters")


# ---- HTML ----------------------------------------------------------------------------------------------------------

BLOCKS = ["p", "div", "li", "ul", "td", "tr", "table", "h1", "section", "option", "title", "body", "dd", "head"]
INLINES = ["b", "i", "a", "span", "em", "sub", "font", "q", "abbr", "SPAN", "x-widget", "o:p"]
KEPT = ["code", "kbd", "pre", "script", "style", "textarea", "svg", "template", "var", "math"]
VOIDS = ["br", "img", "input", "hr", "wbr", "meta", "BR"]
WORDS = ["A", "dog", "runs", "man", "café", "naïve", "rides", "a", "bike", "3.5", "Mr.", "e.g.", "U.S.", "sixty"]
SPANNED = ["{name}", "{{ x }}", "%s", "%1$d", "http://x.org/a?b=1", "www.x.org.", "a@b.de", "`x y`", "```\nx\n```"]
PUNCTUATION = [".", "!", "?", "...", ",", ";", ":", "—", "«", "»", '"', "'", "(", ")"]
SPACES = [" ", " ", " ", "\n", "\r\n", "\r", "\t", "\u00a0", "\u2028", "\u2029", "\x85", "\v", "\f", "\u3000"]
ODD = [
    "\u200d", "\u200b", "\u200e", "\u202e", "\u2066", "\u2069", "\ufeff", "\u00ad", "\u0301", "\u0308", "\u20dd",
    "\U0001f600", "\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f1e9\U0001f1ea", "\U0001f44d\U0001f3fd",
    "\x00", "\x1b", "\x7f", "\ufffd", "\U0010fffd", "\u05d0", "\u0627", "中", "\u0e01\u0e34",
]  # fmt: skip
ENTITIES = [
    "&amp;", "&lt;", "&gt;", "&nbsp;", "&quot;", "&#65;", "&#x1F600;", "&#xD800;", "&#0;", "&#1114112;",
    "&#x110000;", "&bogus;", "&amp", "&", "&#", "&#x;", "&;", "&notit;", "&AElig", "&#128512;", "&#X41;",
    "&" + "a" * 40 + ";",
]  # fmt: skip
MARKUP = [
    "<!-- c -->", "<!---->", "<!-->", "<!--->", "<!-- <p> -->", "<![CDATA[x < y]]>", "<!DOCTYPE html>",
    "<?php echo 1 ?>", "<br/>", "<p/>", "< p>", "<1>", '<a\nhref="x"\n>', "<b/>",
    "-->", "]]>", "a < b", "a<>b",
]  # fmt: skip
MALFORMED = [
    "<br></br>",
    "<img></img>",
    "</b>",
    "</p>",
    "<b",
    "<",
    "</",
    "<!",
    "</ p>",
    "</br>",
    "<!--",
    "<p",
    "<a href='x>",
]
ATTRIBUTE_NAMES = [
    "alt",
    "title",
    "placeholder",
    "aria-label",
    "translate",
    "class",
    "href",
    "data-x",
    "TITLE",
    "style",
]
words = st.lists(st.sampled_from(WORDS + PUNCTUATION + SPACES + ODD + ENTITIES + SPANNED), max_size=12).map(" ".join)
attribute_values = st.one_of(
    st.sampled_from(["no", "yes", "NO", " no ", "", "notranslate", "a notranslate b", "A dog.", "x'y", 'x"y']),
    words, st.text(max_size=10),
)  # fmt: skip


@st.composite
def attributes(draw) -> str:
    out = []
    for _ in range(draw(st.integers(0, 4))):
        name, value = draw(st.sampled_from(ATTRIBUTE_NAMES)), draw(attribute_values)
        quote = draw(st.sampled_from(['"', "'", "", None]))
        if draw(st.sampled_from([True] * 19 + [False])):  # mostly a value its quotes can hold
            value = value.replace(quote, "") if quote else re.sub(r"[\s\"'=<>`]", "", value)
        out.append(name if quote is None else f"{name}={quote}{value}{quote}")
    if draw(st.booleans()) and draw(st.booleans()):  # many, or huge
        unit = f' {draw(st.sampled_from(ATTRIBUTE_NAMES))}="{draw(words)}"'
        out.append((unit * sized(draw, unit, 6_000)).strip())
    return "".join(" " + a for a in out)


@st.composite
def fragments(draw) -> str:
    """A fragment built by a short program of opens, closes (right or crossing), text, markup and kept elements."""
    out, stack, broken = [], [], draw(st.sampled_from([False] * 3 + [True]))  # one in four malformed
    for _ in range(draw(st.integers(1, 24))):
        op = draw(st.sampled_from(["open", "close", "text", "void", "markup", "kept", "entity", "open", "close", "text"]
                                  + ["cross", "malformed"] * broken))  # fmt: skip
        if op == "open":
            tag = draw(st.sampled_from(BLOCKS + INLINES))
            while tag in BLOCKS and stack and tag in _CLOSED_BY.get(stack[-1], ()):  # `<p>a<div>` closes the p
                out.append(f"</{stack.pop()}>")
            out.append(f"<{tag}{draw(attributes())}>")
            stack.append(tag)
        elif op == "close" and stack:
            out.append(f"</{stack.pop()}>")
        elif op == "cross" and len(stack) > 1:
            out.append(f"</{stack.pop(draw(st.integers(0, len(stack) - 2)))}>")
        elif op == "text":
            out.append(draw(words))
        elif op == "entity":
            out.append(draw(st.sampled_from(ENTITIES)))
        elif op == "void":
            tag = draw(st.sampled_from(VOIDS))
            out.append(f"<{tag}{draw(attributes())}{draw(st.sampled_from(['>', '/>', *[f'></{tag}>'] * broken]))}")
        elif op == "markup":
            out.append(draw(st.sampled_from(MARKUP)))
        elif op == "malformed":
            out.append(draw(st.sampled_from(MALFORMED)))
        elif op == "kept":
            tag = draw(st.sampled_from(KEPT))
            inside = draw(st.sampled_from(["", "if (a < b) x();", "<a ", "A dog.", "<b>x</b>"] * 3 + ["</p>", "</scr"]))
            out.append(f"<{tag}{draw(attributes())}>{inside}</{tag}>")
    if not broken or draw(st.booleans()):
        out += [f"</{tag}>" for tag in reversed(stack)]
    return "".join(out)


@st.composite
def pages(draw) -> str:
    """A fragment, then grown to the limits: nested thousands deep, repeated, or with a storm of one element."""
    page = draw(fragments())
    how = draw(st.sampled_from(["as is", "nested", "nested", "repeated", "storm"]))
    if how == "nested":
        tag = draw(st.sampled_from(INLINES * 2 + BLOCKS + KEPT + ['div translate="no"', 'span class="notranslate"']))
        start, end = f"<{tag}>", f"</{tag.split()[0]}>"
        between = draw(st.sampled_from(["", "a ", "A dog. "]))
        page = draw(st.sampled_from([page, "x"]))  # a fragment's blocks would cut an inline nest into units
        n = sized(draw, start + between + end)
        page = (start + between) * n + page + end * (n - draw(st.sampled_from([0] * 9 + [1])))
    elif how == "repeated":
        page = page * sized(draw, page)
    elif how == "storm":
        unit = draw(st.sampled_from(["<br>", "a<br>", "<b>a</b> ", "<code>x</code> ", "<!-- c -->", "&amp;", "<p>a",
                                     "<li>", "<span></span>", "<img alt='A dog.'>", "\n", "A. "]))  # fmt: skip
        cut = draw(st.integers(0, len(page)))
        page = page[:cut] + unit * sized(draw, unit) + page[cut:]
    sized_event(how, len(page))
    return page


class Elements(HTMLParser):
    """The start and end tags of a page, counted by name, as the standard library's parser reads them."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: Counter = Counter()
        self.feed(page)
        self.close()

    def parse_html_declaration(self, i: int) -> int:
        """`<![` not followed by a name (a storm's `<br>` cut into `<![CDATA[`): a bogus comment up to the next `>`, as
        the HTML standard reads it, where Python 3.11's parser raises AssertionError."""
        try:
            return super().parse_html_declaration(i)
        except AssertionError:
            end = self.rawdata.find(">", i + 2)
            return -1 if end < 0 else end + 1

    def handle_starttag(self, tag, attrs):
        self.tags["<" + tag] += 1

    def handle_startendtag(self, tag, attrs):
        self.tags["<" + tag + "/"] += 1

    def handle_endtag(self, tag):
        self.tags["</" + tag] += 1


@STRUCTURE
@given(
    page=pages(), split=st.sampled_from(["sentences", "lines", "none"]), truncate=st.booleans(), protect=st.booleans()
)
async def test_html_of_any_shape_gets_a_documented_answer_with_its_elements_as_written(client, after, page, split,
                                                                                        truncate, protect):  # fmt: skip
    body = {"text": page, "format": "html", "split": split, "truncate": truncate, "protect": protect}
    r = await client.post("/translate", json=body)
    body = assert_documented(r)
    if len(page) > LIMIT:  # the markup counts
        assert r.status_code == 413 and "NMT_MAX_REQUEST_CHARS" in body["error"], body
    elif r.status_code == 200:
        out = body["translations"][0]["text"]
        parse(out)  # the translated page is well-formed HTML too
        assert Elements(out).tags == Elements(page).tags
    await after()


# ---- documents -----------------------------------------------------------------------------------------------------

sentences = st.lists(st.sampled_from(WORDS + PUNCTUATION + SPACES + ODD + SPANNED), max_size=30).map("".join)


@st.composite
def documents(draw) -> str:
    """A text of any skeleton: lines, paragraphs and sentences, then many tiny sentences, one huge one, or blanks."""
    text = draw(sentences)
    how = draw(st.sampled_from(["as is", "tiny sentences", "huge sentence", "blank lines", "repeated"]))
    if how == "tiny sentences":
        unit = draw(st.sampled_from(["A. ", "a.", "A dog.\n", "?", "x\r\n", "Hi!\u2028", "1. "]))
        text += unit * sized(draw, unit)
    elif how == "huge sentence":
        unit = draw(st.sampled_from(["word ", "a", "\U0001f600", "e\u0301", "中", "a\u200d"]))
        text += unit * sized(draw, unit)
    elif how == "blank lines":
        unit = draw(st.sampled_from(["\n", "\r\n", " \n\t", "\u2028", "\u2029 ", "\x85", "\r"]))
        text = unit * sized(draw, unit, LIMIT // 2) + text + unit * draw(st.integers(0, 50))
    elif how == "repeated":
        text *= sized(draw, text)
    sized_event(how, len(text))
    return text


glossaries = st.dictionaries(st.sampled_from(WORDS + ["a man", "A dog", "e.g. a"]), st.sampled_from(WORDS), max_size=3)


@st.composite
def translate_bodies(draw) -> dict:
    texts = draw(documents() | st.lists(documents(), min_size=1, max_size=3)
                 | st.lists(st.sampled_from(["", " ", "A dog.", "\n"]), min_size=1, max_size=70))  # fmt: skip
    body = {"text": texts, "split": draw(st.sampled_from(["sentences", "lines", "none"])), "return_segments": True}
    optional = {"truncate": st.booleans(), "max_new_tokens": st.integers(1, 8), "beam_size": st.integers(1, 2),
                "return_alignment": st.booleans(), "return_tokens": st.booleans(), "glossary": glossaries,
                "glossary_ignore_case": st.booleans(), "protect": st.booleans(), "protect_terms": st.just(["dog"]),
                "protect_patterns": st.just([r"\d+(?:\.\d+)?"])}  # fmt: skip
    return body | draw(st.fixed_dictionaries({}, optional=optional))


def assert_shape_kept(text: str, out: dict, protected: bool = False) -> None:
    """The translation is the text with each piece replaced: the text between the pieces (whitespace, and with spans
    protected their groups between sentences: docs/protected-spans.md) comes back as it was."""
    if blank(text):  # a blank text translates to "" (docs/api.md): whitespace and invisible characters alone
        assert (out["text"], out["segments"]) == ("", []), out
        return
    spans = [(s["source_span"], s["target_span"]) for s in out["segments"]]
    at, back = 0, 0
    for (a, b), (x, y) in spans:
        assert at <= a < b <= len(text) and back <= x <= y <= len(out["text"]), spans
        assert text[at:a] == out["text"][back:x] and (blank(text[at:a]) or protected)
        assert not blank(text[a]) and not blank(text[b - 1]), (text[a:b], spans)
        at, back = b, y
    assert text[at:] == out["text"][back:] and (blank(text[at:]) or protected)
    for a in out.get("alignment") or ():
        assert 0 <= a["source_span"][0] <= a["source_span"][1] <= len(text)
        assert 0 <= a["target_span"][0] <= a["target_span"][1] <= len(out["text"])


@STRUCTURE
@given(body=translate_bodies())
async def test_documents_of_any_skeleton_keep_their_whitespace_or_get_a_documented_4xx(client, after, body):
    r = await client.post("/translate", json=body)
    answer = assert_documented(r)
    texts = [body["text"]] if isinstance(body["text"], str) else body["text"]
    if sum(map(len, texts)) > LIMIT and len(texts) <= 64:
        assert r.status_code == 413 and "NMT_MAX_REQUEST_CHARS" in answer["error"], answer
    elif r.status_code == 200:
        protected = any(body.get(k) for k in ("protect", "protect_terms", "protect_patterns"))
        for text, out in zip(texts, answer["translations"], strict=True):
            assert_shape_kept(text, out, protected)
    await after()


# ---- the LibreTranslate API ----------------------------------------------------------------------------------------

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
LIBRE_FIELDS = {
    "q": documents() | st.lists(st.sampled_from(["A dog.", "", " ", "a", "A. B."]), max_size=70) | pages(),
    "source": st.sampled_from(["en"] * 6 + ["auto"] * 3 + ["EN", " en ", "de", "fr", "xx", "", "english"]),
    "target": st.sampled_from(["de"] * 8 + ["DE", "en", "fr", "", "auto", "x" * 300]),
    "format": st.sampled_from(["text", "html", "HTML", "xml", ""]),
    "alternatives": st.integers(-3, 9) | st.sampled_from(["3", "x", "-1", " 2", "", "1e3"]),
    "api_key": st.text(max_size=20),
}


@st.composite
def libre_requests(draw) -> tuple[dict, str]:
    """Fields of every type, missing or repeated, as JSON, a form, a multipart body or a query string."""
    names = [
        n for n in ("q", "source", "target") if draw(st.sampled_from([True] * 9 + [False]))
    ]  # each missing one time in ten
    names += draw(st.lists(st.sampled_from([*LIBRE_FIELDS, "other"]), max_size=4))  # more, or the same again
    fields = [
        (n, draw(junk if draw(st.sampled_from([True] + [False] * 4)) else LIBRE_FIELDS.get(n, junk))) for n in names
    ]  # a wrong type in one of five
    encoding = draw(st.sampled_from(["json", "json", "form", "multipart", "query"]))
    if encoding == "json":
        return {"content": json.dumps(dict(fields)).encode(), "headers": {"content-type": "application/json"}}, "json"
    flat = [(n, v if isinstance(v, str) else json.dumps(v)) for n, v in fields]
    if encoding == "query" and len(urlencode(flat)) > 30_000:  # a head has 64 KB at most
        encoding = "form"
    if encoding == "form":  # urlencoded by hand: a field may come twice
        form = "&".join(f"{quote_plus(n)}={quote_plus(v)}" for n, v in flat).encode()
        return {"content": form, "headers": {"content-type": "application/x-www-form-urlencoded"}}, "form"
    if encoding == "multipart":
        as_file = draw(st.booleans())  # q sent as a file upload instead of a field
        parts = [(n, ("q.txt", v.encode()) if as_file and n == "q" else (None, v)) for n, v in flat]
        return {"files": parts or [("other", (None, ""))]}, "multipart"
    return {"params": flat}, "query"


@STRUCTURE
@given(request=libre_requests(), path=st.sampled_from(["/translate", "/translate", "/detect"]))
async def test_libretranslate_forms_of_any_shape_get_its_documented_answers(client, after, request, path):
    kwargs, encoding = request
    r = await client.post(LIBRE + path, **kwargs)
    body = assert_documented(r, LIBRE_STATUSES)
    event(f"{path} {encoding} {r.status_code}")
    if r.status_code == 200 and path == "/translate" and encoding == "json":
        q = json.loads(kwargs["content"])["q"]
        assert isinstance(body["translatedText"], str) if isinstance(q, str) else len(body["translatedText"]) == len(q)
    await after()


# ---- the DeepL API -------------------------------------------------------------------------------------------------

TAGS = {"html": HTML, "xml": XML}  # DeepL's tag_handling: the rules a page is read by
IGNORED = st.lists(st.sampled_from([*INLINES, *BLOCKS[:4], "x-widget", "B", "code"]), max_size=3)


@STRUCTURE
@given(
    page=pages(),
    ignored=IGNORED,
    split=st.sampled_from(["0", "1", "nonewlines"]),
    tags=st.sampled_from(sorted(TAGS)),
    flowing=IGNORED,
    splitting=IGNORED,
)
@example(page="<p>A dog. <![<br><br>CDATA[x < y]]> A man.</p>", ignored=["b"], split="nonewlines", tags="html",
         flowing=[], splitting=[])  # fmt: skip
@example(page="<i><script><b>x</b></script></i>", ignored=["b"], split="1", tags="xml", flowing=[], splitting=[])
async def test_deepl_html_and_xml_with_ignored_tags_come_back_with_their_elements_as_written(
    client, after, page, ignored, split, tags, flowing, splitting
):  # the examples: found once each; XML's blocks run in the text (non_splitting_tags) and inline ones split it too
    body = {
        "text": [page],
        "target_lang": "DE",
        "tag_handling": tags,
        "ignore_tags": ignored,
        "split_sentences": split,
        "non_splitting_tags": flowing,
        "splitting_tags": splitting,
    }
    r = await client.post(DEEPL, json=body)
    answer = assert_documented(r, DEEPL_STATUSES, "message")
    if r.status_code == 200:
        out = answer["translations"][0]["text"]
        parse(out, rules=TAGS[tags])
        assert Elements(out).tags == Elements(page).tags and "data-nmt-ignored" not in out
        if ignored:  # an ignored element's text is its own
            for name in ignored:
                kept = re.findall(rf"<{name}>([^<>&]*)</{name}>", page)
                assert all(f"<{name}>{text}</{name}>" in out for text in kept if text.strip()), (kept, out)
    await after()


DEEPL_FIELDS = {  # mostly what DeepL takes, so that requests get through to a translation too
    "text": documents() | st.lists(st.sampled_from(["A dog.", "", " ", "a", "A. B."]), max_size=70) | pages(),
    "source_lang": st.sampled_from(["EN"] * 6 + ["en", "DE", "xx", ""]),
    "target_lang": st.sampled_from(["DE"] * 8 + ["de", "EN-GB", "FR", "", "x" * 300]),
    "tag_handling": st.sampled_from(["html", "xml", "HTML", ""]),
    "split_sentences": st.sampled_from(["0", "1", "nonewlines"] * 3 + ["2"]),
    "ignore_tags": st.sampled_from(["b", "b,i", "", ","]),
    "non_splitting_tags": st.sampled_from(["p", "b,x", "", ","]),
    "splitting_tags": st.sampled_from(["b", "i,p", "", ","]),
    "formality": st.sampled_from(["default", "prefer_more"] * 3 + ["more", "x"]),
    "glossary_id": st.sampled_from([""] * 6 + ["0b7e3b1e-0000-4000-8000-000000000000", "x"]),
    "show_billed_characters": st.sampled_from(["1", "0", "true"] * 3 + ["x"]),
    "context": st.text(max_size=20),
    "model_type": st.sampled_from(["quality_optimized", "prefer_quality_optimized", "latency_optimized", "", "x"]),
}


@st.composite
def deepl_requests(draw) -> tuple[dict, str]:
    """Fields of every type, missing or repeated, as JSON, a form or a multipart body."""
    names = [n for n in ("text", "target_lang") if draw(st.sampled_from([True] * 9 + [False]))]
    names += draw(st.lists(st.sampled_from([*DEEPL_FIELDS, "other"]), max_size=4))
    fields = [
        (n, draw(junk if draw(st.sampled_from([True] + [False] * 9)) else DEEPL_FIELDS.get(n, junk))) for n in names
    ]  # a wrong type in one of ten
    encoding = draw(st.sampled_from(["json", "json", "form", "multipart"]))
    if encoding == "json":
        return {"content": json.dumps(dict(fields)).encode(), "headers": {"content-type": "application/json"}}, "json"
    flat = [(n, x) for n, v in fields for x in (v if n == "text" and isinstance(v, list) else [v])]
    flat = [(n, v if isinstance(v, str) else json.dumps(v)) for n, v in flat]
    if encoding == "form":  # a field may come twice, `text` once a text
        form = "&".join(f"{quote_plus(n)}={quote_plus(v)}" for n, v in flat).encode()
        return {"content": form, "headers": {"content-type": "application/x-www-form-urlencoded"}}, "form"
    return {"files": [(n, (None, v)) for n, v in flat] or [("other", (None, ""))]}, "multipart"


@STRUCTURE
@given(request=deepl_requests())
async def test_deepl_requests_of_any_shape_get_its_documented_answers(client, after, request):
    kwargs, encoding = request
    r = await client.post(DEEPL, **kwargs)
    body = assert_documented(r, DEEPL_STATUSES, "message")
    event(f"{encoding} {r.status_code}")
    if r.status_code == 200 and encoding == "json":
        text = json.loads(kwargs["content"])["text"]
        assert len(body["translations"]) == (1 if isinstance(text, str) else len(text))
    await after()


# ---- files ---------------------------------------------------------------------------------------------------------

UPLOADS = {  # path: (the fields of an upload that translates, its documented statuses, its error's key)
    "/files": ({"target": "de"}, {202, 404, 413, 422}, "error"),
    f"{LIBRE}/translate_file": ({"source": "en", "target": "de"}, LIBRE_STATUSES, "error"),
    "/deepl/v2/document": ({"target_lang": "DE", "source_lang": "EN"}, DEEPL_STATUSES, "message"),
}
FILE_NAMES = st.sampled_from(["a.txt"] * 6 + ["a.TXT", "../a.txt", "a b.txt", "é.txt", "a.srt", "a", ".txt", ""])
FILE_FIELDS = {
    "format": st.sampled_from(["txt", "TXT", "srt", "pdf", ""]), "source": st.sampled_from(["en", "auto", "xx", ""]),
    "target": st.sampled_from(["de", "DE", "fr", ""]), "model": st.sampled_from(["de", "x", ""]),
    "beam_size": st.sampled_from(["1", "2", "0", "9", "x", ""]), "glossary_id": st.sampled_from(["", "x"]),
    "target_lang": st.sampled_from(["DE", "de", "", "EN-GB"]), "source_lang": st.sampled_from(["EN", "", "xx"]),
    "output_format": st.sampled_from(["txt", "docx", ""]), "filename": FILE_NAMES,
}  # fmt: skip


@st.composite
def file_uploads(draw) -> tuple[str, dict]:
    """A text file of any skeleton (or a page, or bytes that are not UTF-8), under any name, with fields missing,
    repeated or wrong, to each API's upload."""
    path = draw(st.sampled_from(list(UPLOADS)))
    valid = UPLOADS[path][0]
    parts = [(n, (None, v)) for n, v in valid.items() if draw(st.sampled_from([True] * 9 + [False]))]
    parts += [(n, (None, draw(FILE_FIELDS.get(n, st.text(max_size=8)))))
              for n in draw(st.lists(st.sampled_from([*FILE_FIELDS, "other"]), max_size=3))]  # fmt: skip
    text = draw(documents() | pages() | st.sampled_from(["", " ", "\n\n\n", "A dog.\r\n\r\nA cat."]))
    data = draw(st.sampled_from([text.encode("utf-8", "surrogatepass")] * 9 + [text.encode("utf-16")]))
    if draw(st.sampled_from([True] * 19 + [False])):
        parts.append(("file", (draw(FILE_NAMES), data)))
    sized_event("file", len(data))
    return path, {"files": parts or [("other", (None, ""))]}


@hypothesis.settings(STRUCTURE, max_examples=max(10, STRUCTURE.max_examples // 2))  # each a job of many sentences
@given(upload=file_uploads())
async def test_files_of_any_skeleton_get_their_documented_answers_and_are_translated(served, client, after, upload):
    path, kwargs = upload
    statuses, key = UPLOADS[path][1:]
    r = await client.post(path, **kwargs)
    body = assert_documented(r, statuses - {202}, key) if r.status_code != 202 else r.json()
    event(f"{path} {r.status_code}")
    job_id = body.get("id") or body.get("document_id") or body.get("translatedFileUrl", "/.").rsplit("/", 1)[1][:32]
    if r.status_code in (200, 202) and job_id:
        job = await served[0].state.jobs.finished(job_id)
        assert job.status == "done", job.error  # a file that reads is translated
        if path == "/files":
            download = await served[1].get(f"/files/{job_id}/download")
            assert download.status_code == 200
            download.content.decode()  # UTF-8, as the file was
    await after()


# ---- tokens ------------------------------------------------------------------------------------------------------


@STRUCTURE
@given(
    text=documents() | st.lists(documents(), min_size=1, max_size=3),
    side=st.sampled_from(["source", "target"]), add_special_tokens=st.booleans(),
)  # fmt: skip
async def test_tokenize_of_any_text_gives_offsets_into_it_or_a_documented_4xx(client, after, tokenizer, text, side,
                                                                               add_special_tokens):  # fmt: skip
    r = await client.post("/tokenize", json={"text": text, "side": side, "add_special_tokens": add_special_tokens})
    body = assert_documented(r)
    texts = [text] if isinstance(text, str) else text
    if sum(map(len, texts)) > LIMIT:
        assert r.status_code == 413 and "NMT_MAX_REQUEST_CHARS" in body["error"], body
    elif r.status_code == 200:
        for t, result in zip(texts, body["results"], strict=True):
            assert result["count"] == len(result["tokens"])
            for token in result["tokens"]:
                assert 0 <= token["id"] < tokenizer.vocab_size
                assert 0 <= token["start"] <= token["end"] <= len(t)
    else:
        raise AssertionError(body)
    await after()


ID_EDGES = [-(2**63), -1, 0, 1, 2, 3, 2**31, 2**63 - 1, 2**63, 10**30]


@st.composite
def id_lists(draw) -> list:
    one = st.lists(st.sampled_from(ID_EDGES) | st.integers(0, 540), max_size=12)  # the tiny vocabulary has 534
    ids = draw(one | st.lists(one, max_size=70))
    if ids and draw(st.booleans()):  # huge: a list of up to ~100,000 ids
        ids = ids * draw(st.integers(1, 100_000 // len(ids) + 1))
    return ids


@STRUCTURE
@given(ids=id_lists(), side=st.sampled_from(["source", "target"]), skip=st.booleans())
async def test_detokenize_takes_the_vocabularys_ids_and_names_any_other(client, after, tokenizer, ids, side, skip):
    r = await client.post("/detokenize", json={"ids": ids, "side": side, "skip_special_tokens": skip})
    body = assert_documented(r, {200, 413, 422})
    if r.status_code == 413:  # a body over 1 MB (a hundred thousand large ids)
        assert body["type"] == "body_too_large", body
        return await after()
    nested = bool(ids) and isinstance(ids[0], list)
    flat = [i for seq in ids for i in seq] if nested else ids
    lists = len(ids) if nested else 1
    valid = bool(ids) and lists <= 64 and all(0 <= i < tokenizer.vocab_size for i in flat)
    assert (r.status_code == 200) == valid, (r.status_code, body)
    bad = next((i for i in flat if not 0 <= i < tokenizer.vocab_size), None)
    if bad is not None and lists <= 64:
        assert str(bad) in body["error"] and f"0..{tokenizer.vocab_size - 1}" in body["error"], body
    await after()


@STRUCTURE
@given(
    text=sentences, target=st.none() | sentences, layers=st.none() | st.lists(st.integers(-2, 3), max_size=4),
    heads=st.none() | st.lists(st.integers(-2, 5), max_size=6), average_heads=st.booleans(),
)  # fmt: skip
async def test_attention_of_any_text_and_indices_is_its_layers_or_a_documented_4xx(
    client, after, text, target, layers, heads, average_heads
):
    body = {"text": text, "target": target, "layers": layers, "heads": heads, "average_heads": average_heads}
    r = await client.post("/attention", json=body)
    answer = assert_documented(r)
    valid = all(x is None or (x and all(0 <= i < n for i in x)) for x, n in ((layers, 2), (heads, 4)))
    if r.status_code == 413:  # a target of more than NMT_MAX_NEW_TOKENS (8 here) tokens
        assert answer["error"].startswith("target has"), answer
        return await after()
    assert (r.status_code == 200) == valid, (r.status_code, answer)
    if valid:
        assert answer["layers"] == (layers if layers is not None else [0, 1])
        assert len(answer["encoder_attention"]) == len(answer["layers"]) == len(answer["cross_attention"])
    await after()


# ---- the hardest shapes --------------------------------------------------------------------------------------------

CORPUS = corpus()


@pytest.mark.parametrize("name, path, body, content_type, status", CORPUS, ids=[c[0] for c in CORPUS])
async def test_the_hardest_shapes_at_the_limits_get_their_documented_answer(client, after, name, path, body,
                                                                            content_type, status):  # fmt: skip
    r = await client.post(path, content=body, headers={"content-type": content_type})
    assert_documented(r, {status})
    await after()
