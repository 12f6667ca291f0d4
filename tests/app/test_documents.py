"""/translate on documents: split into sentences (or lines), translated together, put back with their whitespace."""

import re

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from app.settings import Settings
from tests.app.conftest import MODES, StepGate, core_of, serve, trained_in
from tests.app.helpers import assert_stream_matches, sse, stream_and_plain
from tests.synthetic import synthetic_pairs

pytestmark = pytest.mark.anyio
trained = pytest.fixture(scope="module", params=MODES, name="trained")(trained_in)  # one process, a front-end
SENTENCES = [en for en, _ in synthetic_pairs(20, seed=7)]


@pytest.fixture
def app(trained):
    return trained[0]


@pytest.fixture
def client(trained):
    return trained[1]


def document(parts: list[str], gaps: list[str]) -> str:
    """gaps[0] + parts[0] + gaps[1] + ... + parts[-1] + gaps[-1]"""
    assert len(gaps) == len(parts) + 1
    return "".join(g + p for g, p in zip(gaps, parts)) + gaps[-1]


async def alone(client, texts: list[str], split: str = "none") -> list[str]:
    """Each text translated in a request of its own, whole."""
    body = {"split": split}
    return [
        (await client.post("/translate", json={**body, "text": t})).json()["translations"][0]["text"] for t in texts
    ]


async def test_a_paragraph_is_its_sentences_translated_alone_between_its_own_whitespace(client):
    gaps = ["  ", " ", "\n\n\t", "   ", "\r\n", " \n"]
    text = document(SENTENCES[:5], gaps)
    r = await client.post("/translate", json={"text": text, "return_segments": True})
    assert r.status_code == 200, r.text
    t = r.json()["translations"][0]
    assert t["text"] == document(await alone(client, SENTENCES[:5]), gaps)
    segments = t["segments"]
    assert [text[a:b] for a, b in (s["source_span"] for s in segments)] == SENTENCES[:5]
    assert [t["text"][a:b] for a, b in (s["target_span"] for s in segments)] == await alone(client, SENTENCES[:5])


async def test_twenty_sentences_decode_together_and_equal_twenty_requests(app, client, monkeypatch):
    gate = StepGate(core_of(app).model, monkeypatch)
    text = " ".join(SENTENCES)
    t = (await client.post("/translate", json={"text": text})).json()["translations"][0]
    assert max(gate.sizes) == len(SENTENCES), "every sentence is a row of the same batch"
    assert t["text"] == " ".join(await alone(client, SENTENCES))


async def test_lines_none_and_several_texts(client):
    two = f"{SENTENCES[0]} {SENTENCES[1]}"
    by_lines = (await client.post("/translate", json={"text": f"{two}\n{SENTENCES[2]}", "split": "lines"})).json()
    assert by_lines["translations"][0]["text"] == "\n".join(await alone(client, [two, SENTENCES[2]]))
    whole = (await client.post("/translate", json={"text": two, "split": "none"})).json()["translations"][0]
    assert whole["text"] == (await alone(client, [two]))[0]  # the model sees the text as it is
    many = (await client.post("/translate", json={"text": [two, "   ", SENTENCES[3]]})).json()["translations"]
    assert [m["text"] for m in many] == [" ".join(await alone(client, SENTENCES[:2])), "", *await alone(
        client, [SENTENCES[3]])]  # fmt: skip


async def test_a_document_reports_its_tokens_scores_alignment_and_hypotheses_across_its_sentences(client):
    text = f"{SENTENCES[0]}\n{SENTENCES[1]}"
    body = {"text": text, "return_tokens": True, "return_scores": True, "return_alignment": True, "beam_size": 2,
            "num_hypotheses": 2}  # fmt: skip
    t = (await client.post("/translate", json=body)).json()["translations"][0]
    parts = [
        (await client.post("/translate", json={**body, "text": s})).json()["translations"][0] for s in SENTENCES[:2]
    ]
    assert t["text"] == "\n".join(p["text"] for p in parts)
    assert t["token_ids"] == parts[0]["token_ids"] + parts[1]["token_ids"]
    assert len(t["hypotheses"]) == 2 and t["hypotheses"][0]["text"] == t["text"]
    assert t["hypotheses"][1]["text"] == "\n".join(p["hypotheses"][1]["text"] for p in parts)
    for a in t["alignment"]:  # spans of the document and of its translation
        assert 0 <= a["source_span"][0] <= a["source_span"][1] <= len(text)
        assert 0 <= a["target_span"][0] <= a["target_span"][1] <= len(t["text"])
    assert [a["target_token"] for a in t["alignment"]] == list(range(len(t["token_ids"])))  # one a token, in order
    shift = len(parts[0]["text"]) + 1  # the second sentence's translation, after the first's and the line break
    assert [a["target_span"] for a in t["alignment"]] == [a["target_span"] for a in parts[0]["alignment"]] + [
        [start + shift, end + shift] for start, end in (a["target_span"] for a in parts[1]["alignment"])
    ]
    second = [a for a in t["alignment"] if a["target_token"] >= len(parts[0]["token_ids"])]
    assert second and all(a["source_span"][0] >= len(SENTENCES[0]) + 1 for a in second)


async def test_a_streamed_document_sends_its_sentences_in_order(client):
    text = f"  {SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]}\n"
    events, plain = await stream_and_plain(client, {"text": text})
    assert_stream_matches(events, plain)
    assert (
        events[-1]["text"]
        == f"  {' '.join(await alone(client, SENTENCES[:2]))}\n\n{(await alone(client, [SENTENCES[2]]))[0]}\n"
    )


async def test_invisible_characters_are_kept_as_written_and_never_translated_alone(client):
    """Zero-width spaces, direction marks, a byte-order mark, a soft hyphen: a line of nothing else, or one at a
    sentence's end, comes back as written, as whitespace does (the model, given one alone, writes a sentence of its
    own); a text of them alone, or of whitespace however long, is blank: no tokens, no 413."""
    gaps = ["\ufeff", "\u200e ", "\n\u200b\u2060\n", "\u00ad"]
    text = document(SENTENCES[:3], gaps)
    t = (await client.post("/translate", json={"text": text, "return_segments": True})).json()["translations"][0]
    assert t["text"] == document(await alone(client, SENTENCES[:3]), gaps)
    assert [text[a:b] for a, b in (s["source_span"] for s in t["segments"])] == SENTENCES[:3]
    events, plain = await stream_and_plain(client, {"text": text})
    assert events[-1]["text"] == t["text"] and plain["translations"][0]["text"] == t["text"]
    for blank in ("\u200b", "\u200e\ufeff \u2066", "\n" * 300, " " * 1000):
        for body in ({"text": blank}, {"text": [blank, SENTENCES[0]]}, {"text": blank, "stream": True}):
            r = await client.post("/translate", json=body)
            assert r.status_code == 200, (body, r.text)
            if not body.get("stream"):
                assert r.json()["translations"][0]["text"] == ""
        (end,) = sse(r)
        assert (end["text"], end["usage"]) == ("", {"input_tokens": 0, "output_tokens": 0})
    page = "<p>\u200b</p><td>&nbsp;</td><p>\u200e</p>"
    r = await client.post("/translate", json={"text": page, "format": "html"})
    assert r.json()["translations"][0]["text"] == page


async def test_a_target_prefix_needs_one_sentence(client):
    r = await client.post("/translate", json={"text": " ".join(SENTENCES[:2]), "target_prefix": "Ein"})
    assert r.status_code == 422 and "target_prefix" in r.json()["error"] and '"split": "none"' in r.json()["error"]


@pytest.fixture(scope="module")
async def small(tiny_checkpoint):
    settings = Settings(model_dir=tiny_checkpoint, max_new_tokens=40, compile=False, max_request_chars=200,
                        max_queue=8, max_batch_texts=2)  # fmt: skip
    async with serve(settings) as pair:
        yield pair


async def test_over_the_limits_a_document_gets_413_naming_them(small):
    _, client = small
    r = await client.post("/translate", json={"text": ["x" * 150, "y" * 60]})
    assert (
        r.status_code == 413 and "210 characters" in r.json()["error"] and "NMT_MAX_REQUEST_CHARS" in r.json()["error"]
    )
    r = await client.post("/translate", json={"text": " ".join(["A dog runs."] * 5)})  # half of NMT_MAX_QUEUE=8 is 4
    assert r.status_code == 413, r.text
    assert r.json()["error"] == (
        "the texts have 5 sentences (split='sentences'); a request may have at most 4 at once "
        "(NMT_MAX_REQUEST_SEQUENCES): send the rest in another request"
    )
    r = await client.post("/translate", json={"text": "A dog runs.\nA cat sits.\nIt rains.", "split": "lines"})
    assert r.status_code == 200, r.text


# Generated documents: the sentences between random whitespace. The property: the translation is each sentence's
# own translation between exactly the same whitespace (paragraph breaks, line breaks, indentation, blank and
# whitespace-only lines, the text's leading and trailing whitespace).
GENERATED = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
IN_LINE = " \t\u00a0"  # whitespace within a line: spaces, tabs, a no-break space
indent = st.text(IN_LINE, max_size=3)
line_break = st.tuples(indent, st.sampled_from(["\n", "\r\n"])).map("".join)  # maybe trailing whitespace before it
broken = st.one_of(  # a paragraph break, or line breaks (maybe blank or whitespace-only lines) and an indent
    st.sampled_from(["\n\n", "\r\n\r\n"]),
    st.tuples(st.lists(line_break, min_size=1, max_size=3).map("".join), indent).map("".join),
)
between = {"sentences": st.one_of(st.text(IN_LINE, min_size=1, max_size=3), broken), "lines": broken}
edge = st.one_of(st.just(""), indent, st.tuples(indent, broken).map("".join))


@st.composite
def documents(draw, split: str) -> tuple[list[str], list[str]]:
    """(sentences, gaps) of a document: for split="lines", a line break between any two sentences."""
    parts = draw(st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=8))
    inner = draw(st.lists(between[split], min_size=len(parts) - 1, max_size=len(parts) - 1))
    return parts, [draw(edge), *inner, draw(edge)]


def skeleton(text: str) -> tuple:
    """The text's shape: its line breaks, which lines are blank, and its leading and trailing whitespace."""
    lines = re.split(r"\r\n|\r|\n", text)
    ends = (text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :])
    return re.findall(r"\r\n|\r|\n", text), [not line.strip() for line in lines], ends


@pytest.fixture(scope="module")
async def lone(trained) -> dict[str, str]:
    """Each of the SENTENCES translated in a request of its own."""
    return dict(zip(SENTENCES, await alone(trained[1], SENTENCES)))


async def assert_whitespace_kept(client, lone: dict[str, str], doc: tuple[list[str], list[str]], split: str) -> None:
    parts, gaps = doc
    text = document(parts, gaps)
    note(f"text={text!r}")  # anyio's wrapper hides the falsifying example's arguments
    r = await client.post("/translate", json={"text": text, "split": split})
    assert r.status_code == 200, r.text
    out = r.json()["translations"][0]["text"]
    assert skeleton(out) == skeleton(text)
    assert out == document([lone[p] for p in parts], gaps)


# Two tests rather than one parametrized: anyio's plugin runs the second parameter of an async @given test inside
# the first one's wrapper (ClosedResourceError).
@GENERATED
@given(doc=documents("sentences"))
async def test_a_generated_document_keeps_its_whitespace_and_each_sentence_translates_as_alone(client, lone, doc):
    await assert_whitespace_kept(client, lone, doc, "sentences")


@GENERATED
@given(doc=documents("lines"))
async def test_a_generated_document_split_by_lines_keeps_its_whitespace(client, lone, doc):
    await assert_whitespace_kept(client, lone, doc, "lines")


@GENERATED
@given(doc=documents("sentences"))
async def test_the_segments_of_a_generated_document_are_its_sentences_in_order(client, lone, doc):
    parts, gaps = doc
    text = document(parts, gaps)
    note(f"text={text!r}")
    t = (await client.post("/translate", json={"text": text, "return_segments": True})).json()["translations"][0]
    for side, whole, pieces in (("source", text, parts), ("target", t["text"], [lone[p] for p in parts])):
        spans = [s[f"{side}_span"] for s in t["segments"]]
        ends = [0, *(i for span in spans for i in span), len(whole)]
        assert ends == sorted(ends), f"{side} spans out of the text, out of order or overlapping: {spans}"
        assert [whole[a:b] for a, b in spans] == pieces
        assert [whole[a:b] for a, b in zip(ends[::2], ends[1::2])] == gaps  # between them, the text's whitespace
