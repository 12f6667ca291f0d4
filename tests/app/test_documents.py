"""/translate on documents: split into sentences (or lines), translated together, put back with their whitespace."""

import pytest

from app.settings import Settings
from tests.app.conftest import StepGate, serve
from tests.app.test_api import assert_stream_matches, stream_and_plain
from tests.synthetic import synthetic_pairs

pytestmark = pytest.mark.anyio
SENTENCES = [en for en, _ in synthetic_pairs(20, seed=7)]


@pytest.fixture(scope="module")
async def trained(trained_checkpoint):
    """A server on a model trained on the synthetic sentences: their translations do not hang on near-ties, so they
    are the same in any batch."""
    async with serve(Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False)) as pair:
        yield pair


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
    gate = StepGate(app.state.engine.model, monkeypatch)
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
        assert t["token_ids"][a["target_token"]] is not None
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
    r = await client.post("/translate", json={"text": " ".join(["A dog runs."] * 9)})
    assert r.status_code == 413 and "9 sentences" in r.json()["error"] and "NMT_MAX_QUEUE" in r.json()["error"]
