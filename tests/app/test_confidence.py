"""Confidence, flags and min_confidence through HTTP, on the bundled en->de model and its calibration (fitted on
Multi30k's val by nmt-calibrate): the degenerate output of "Hello world" is flagged and withheld, a good sentence is
not; the figures are the same alone and in a batch, in every shape a request takes (n-best, documents, HTML,
streaming, LibreTranslate); /metrics counts them."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from app.settings import BUNDLED_MODEL_DIR, Settings
from model.confidence import CALIBRATION
from tests.app.conftest import MODES, serve, serve_in
from tests.app.helpers import assert_error, sse

pytestmark = pytest.mark.anyio
GOOD, BAD = "A man is riding a bike.", "Hello world"  # the second comes back as "Welt Welt Welt Welt."


@pytest.fixture(scope="module", params=MODES)
async def bundled(request):
    async with serve_in(request.param, Settings(model_dir=BUNDLED_MODEL_DIR, device="cpu", compile=False)) as (
        app,
        client,
    ):
        yield app, client


@pytest.fixture
def client(bundled):
    return bundled[1]


async def translate(client, **body) -> dict:
    r = await client.post("/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_degenerate_translation_is_flagged_and_a_good_one_trusted(client):
    out = await translate(client, text=[GOOD, BAD], return_signals=True)
    assert out["calibrated"] is True
    good, bad = out["translations"]
    assert bad["text"].count("Welt") >= 3
    assert "repetition" in bad["flags"] and bad["confidence"] < 0.3
    assert good["flags"] == [] and good["confidence"] > 0.7
    assert set(good["signals"]) == {"mean_logprob", "min_logprob", "length", "repetition", "copied", "attention",
                                    "coverage", "tokens", "sum_logprob", "loop", "token_loop"}  # fmt: skip
    assert 0 <= good["signals"]["attention"] < 1 and 0 <= good["signals"]["coverage"] < 1
    assert bad["signals"]["repetition"] > good["signals"]["repetition"]
    assert bad["signals"]["loop"] >= 3 and (good["signals"]["loop"], good["signals"]["token_loop"]) == (1, 1)
    assert "signals" not in (await translate(client, text=GOOD))["translations"][0]


async def test_confidence_is_the_same_alone_and_in_a_busy_batch(client):
    alone = [(await translate(client, text=t))["translations"][0]["confidence"] for t in (GOOD, BAD)]
    batch = await translate(client, text=[BAD, "Two dogs play in the snow.", GOOD, "A woman sits on a bench."] * 4)
    together = {t["text"]: t["confidence"] for t in batch["translations"]}
    assert len(together) == 4
    assert [t["confidence"] for t in batch["translations"][2:3]] == pytest.approx([alone[0]], abs=1.5e-3)
    assert batch["translations"][0]["confidence"] == pytest.approx(alone[1], abs=1.5e-3)


async def test_min_confidence_withholds_exactly_the_sentences_below_it(client):
    text = f"{GOOD} {BAD}\n\nTwo dogs play in the snow."
    full = (await translate(client, text=text, return_segments=True))["translations"][0]
    confidences = [s["confidence"] for s in full["segments"]]
    assert full["confidence"] == min(confidences) and "repetition" in full["flags"]
    assert "withheld" not in full
    floor = sorted(confidences)[1]  # between the lowest and the rest: withholds exactly one
    out = (await translate(client, text=text, return_segments=True, min_confidence=floor))["translations"][0]
    below = [i for i, c in enumerate(confidences) if c < floor]
    assert below == [1]
    assert [w["segment"] for w in out["withheld"]] == below
    withheld = out["withheld"][0]
    assert text[slice(*withheld["source_span"])] == BAD and withheld["confidence"] < floor
    assert "repetition" in withheld["flags"]
    assert [s["withheld"] for s in out["segments"]] == [False, True, False]
    # the document keeps its shape: the other sentences and the whitespace between them
    kept = [full["text"][slice(*s["target_span"])] for s in full["segments"]]
    assert out["text"] == f"{kept[0]} \n\n{kept[2]}"
    assert "Welt" not in out["text"]
    # its score is of the sentences that stand, as a document of them alone has it (it averaged in the withheld one)
    scored = (await translate(client, text=text, min_confidence=floor, return_scores=True))["translations"][0]
    alone = await translate(client, text=f"{GOOD}\n\nTwo dogs play in the snow.", return_scores=True)
    assert scored["score"] == pytest.approx(alone["translations"][0]["score"], abs=2e-3)
    nothing = (await translate(client, text=text, min_confidence=0))["translations"][0]
    assert nothing["text"] == full["text"]
    # the sentences that stand keep their alignment, and their alternatives at or above the floor
    asked = {"return_alignment": True, "beam_size": 2, "num_hypotheses": 2}
    want = (await translate(client, text=text, **asked))["translations"][0]
    got = (await translate(client, text=text, min_confidence=floor, **asked))["translations"][0]
    a, b = withheld["source_span"]
    standing = [s["source_span"] for s in want["alignment"] if not a <= s["source_span"][0] < b]
    assert [s["source_span"] for s in got["alignment"]] == standing and standing
    pieces = (await translate(client, text=[GOOD, "Two dogs play in the snow."], **asked))["translations"]
    enough = all(h["confidence"] >= floor for t in pieces for h in t["hypotheses"])
    assert len(got.get("hypotheses", [])) == (2 if enough else 0), (got, pieces)
    assert all("Welt" not in h["text"] for h in got.get("hypotheses", []))
    everything = (await translate(client, text=[GOOD, BAD], min_confidence=1, return_tokens=True))["translations"]
    assert [t["text"] for t in everything] == ["", ""] and all(t["token_ids"] == [] for t in everything)
    # a text withheld whole, and an HTML page's unit, score as nothing given: as a stream's last event has it (they
    # kept the withheld one's score)
    (whole,) = (await translate(client, text=BAD, min_confidence=floor, return_scores=True))["translations"]
    end = sse(await client.post("/translate", json={"text": BAD, "min_confidence": floor, "return_scores": True,
                                                   "stream": True}))[-1]  # fmt: skip
    assert whole["text"] == end["text"] == "" and whole["score"] == end["score"] == 0.0
    page = f"<p>{BAD}</p><p>{GOOD}</p>"
    (html,) = (await translate(client, text=page, format="html", min_confidence=floor, return_scores=True))[
        "translations"
    ]
    (standing,) = (await translate(client, text=f"<p>{GOOD}</p>", format="html", return_scores=True))["translations"]
    assert "Welt" not in html["text"] and html["score"] == pytest.approx(standing["score"], abs=2e-3)


async def test_each_alternative_and_each_html_unit_is_judged(client):
    nbest = (await translate(client, text=GOOD, beam_size=4, num_hypotheses=3))["translations"][0]
    alternatives = nbest["hypotheses"]
    assert len(alternatives) == 3 and all(0 <= h["confidence"] <= 1 for h in alternatives)
    assert alternatives[0]["confidence"] == nbest["confidence"]
    page = f"<p>{GOOD}</p><p><b>{BAD}</b></p>"
    html = (await translate(client, text=page, format="html", min_confidence=0.5))["translations"][0]
    assert "Welt" not in html["text"] and html["text"].startswith("<p>Ein") and "<b></b>" in html["text"]
    assert [w["segment"] for w in html["withheld"]] == [1] and "source_span" not in html["withheld"][0]
    # a sentence withheld beside another in one block: its tags come back empty where it was, the other's in place
    block = "<p>A man is <b>riding</b> a bike. <i>Hello</i> world</p>"
    alone = (await translate(client, text="<p>A man is <b>riding</b> a bike.</p>", format="html"))["translations"][0]
    both = (await translate(client, text=block, format="html", min_confidence=0.5))["translations"][0]
    assert both["text"] == alone["text"].replace("</p>", " <i></i></p>") and "<b>" in both["text"], both["text"]


async def test_the_last_streamed_event_has_the_confidence_and_what_was_withheld(client):
    r = await client.post("/translate", json={"text": f"{GOOD} {BAD}", "stream": True, "min_confidence": 0.5,
                                              "return_scores": True})  # fmt: skip
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    last = events[-1]
    assert "Welt" in events[-2]["text_so_far"]  # streamed before it could be judged ...
    assert "Welt" not in last["text"] and last["text"].startswith("Ein")  # ... and left out of what stands
    assert last["calibrated"] is True and "repetition" in last["flags"] and last["confidence"] < 0.5
    assert [w["segment"] for w in last["withheld"]] == [1]
    plain = await translate(client, text=f"{GOOD} {BAD}", min_confidence=0.5, return_scores=True)
    assert last["withheld"] == plain["translations"][0]["withheld"]  # its source span too
    alone = (await translate(client, text=GOOD, return_scores=True))["translations"][0]["score"]
    assert last["score"] == pytest.approx(plain["translations"][0]["score"], abs=2e-3)  # of what stands
    assert last["score"] == pytest.approx(alone, abs=2e-3)


async def test_libretranslate_answers_carry_confidence_its_clients_ignore(client):
    r = await client.post("/libretranslate/translate", json={"q": [GOOD, BAD], "source": "en", "target": "de"})
    body = r.json()
    assert body["flags"][0] == [] and "repetition" in body["flags"][1]
    assert body["confidence"][0] > body["confidence"][1]
    r = await client.post(
        "/libretranslate/translate", data={"q": BAD, "source": "en", "target": "de", "min_confidence": "0.5"}
    )
    assert r.json()["translatedText"] == "" and r.json()["withheld"] == [0]
    r = await client.post("/libretranslate/translate", json={"q": "42", "source": "en", "target": "de"})
    assert r.json() == {"translatedText": "42", "flags": []}  # no model saw it: no confidence (it was null)
    r = await client.post("/libretranslate/translate", json={"q": ["42", GOOD], "source": "en", "target": "de"})
    assert r.json()["confidence"][0] is None  # a list keeps its places
    for bad in ("x", "2", "-0.1", "nan"):
        r = await client.post(
            "/libretranslate/translate", data={"q": BAD, "source": "en", "target": "de", "min_confidence": bad}
        )
        assert r.status_code == 400 and "min_confidence" in r.json()["error"]


async def test_out_of_range_min_confidence_is_a_422(client):
    for bad in (-0.1, 1.5, "x"):
        assert_error(await client.post("/translate", json={"text": GOOD, "min_confidence": bad}), 422, "validation_error", "min_confidence")  # fmt: skip


async def test_info_says_what_confidence_means_and_metrics_count_sentences(bundled):
    app, client = bundled
    info = (await client.get("/info")).json()
    meaning = info["confidence"]
    assert meaning["calibrated"] is True and "chrF" in meaning["meaning"] and meaning["fitted_on"]["sentences"] > 500
    before = app.state.metrics.registry.get_sample_value
    count = before("nmt_sentence_confidence_count", {"model": "multi30k-en-de"}) or 0
    flagged = before("nmt_flagged_sentences_total", {"model": "multi30k-en-de", "flag": "repetition"}) or 0
    withheld = before("nmt_withheld_sentences_total", {"model": "multi30k-en-de"}) or 0
    await translate(client, text=[GOOD, BAD], min_confidence=0.5)
    after = app.state.metrics.registry.get_sample_value
    assert after("nmt_sentence_confidence_count", {"model": "multi30k-en-de"}) == count + 2
    assert after("nmt_flagged_sentences_total", {"model": "multi30k-en-de", "flag": "repetition"}) == flagged + 1
    assert after("nmt_withheld_sentences_total", {"model": "multi30k-en-de"}) == withheld + 1
    assert b"nmt_sentence_confidence_bucket" in (await client.get("/metrics")).content


async def test_a_model_without_calibration_says_so_and_gives_the_raw_probability(tmp_path):
    model = tmp_path / "uncalibrated"
    shutil.copytree(BUNDLED_MODEL_DIR, model, ignore=shutil.ignore_patterns(CALIBRATION))
    async with serve(Settings(model_dir=model, compile=False, min_confidence=0.6)) as (_, client):
        out = await translate(client, text=[GOOD, BAD], return_signals=True, min_confidence=0)
        assert out["calibrated"] is False
        for t in out["translations"]:
            assert t["confidence"] == pytest.approx(math.exp(t["signals"]["mean_logprob"]), abs=6e-4)
        info = (await client.get("/info")).json()
        assert info["confidence"]["calibrated"] is False
        assert [t["confidence"] > 0.6 for t in out["translations"]] == [True, False]
        # NMT_MIN_CONFIDENCE is the default a request overrides
        withheld = await translate(client, text=[GOOD, BAD])
        assert [t["text"] for t in withheld["translations"]] == [out["translations"][0]["text"], ""]


async def test_word_confidence_covers_each_word_of_a_document_where_it_stands(client):
    text = f"{GOOD}  {BAD}\nTwo dogs play in the snow."
    t = (await translate(client, text=text, return_word_confidence=True, return_tokens=True))["translations"][0]
    assert [w["text"] for w in t["words"]] == t["text"].split()
    assert all(t["text"][slice(*w["span"])] == w["text"] and 0 < w["confidence"] <= 1 for w in t["words"])
    welt = [w["confidence"] for w in t["words"] if w["text"].startswith("Welt")]
    assert len(welt) >= 3
    alone = await translate(client, text=GOOD, return_word_confidence=True, beam_size=2, num_hypotheses=2)
    best = alone["translations"][0]
    assert all(h["words"] and [w["text"] for w in h["words"]] == h["text"].split() for h in best["hypotheses"])
    assert [w["confidence"] for w in best["words"]] == pytest.approx(
        [w["confidence"] for w in t["words"][: len(best["words"])]], abs=1.5e-3
    )  # the first sentence's words, alone or in the document
    assert "words" not in (await translate(client, text=GOOD))["translations"][0]
    for body in ({"stream": True}, {"format": "html"}):
        r = await client.post("/translate", json={"text": GOOD, "return_word_confidence": True, **body})
        assert_error(r, 422, "validation_error", "return_word_confidence")


def test_a_word_a_byte_ends_and_the_next_token_s_word_are_two_words():
    """A byte token shows nothing until the next token comes ("<0x6D>" then "▁rennt" add "m rennt" at once): the
    "m" ends the word before, "rennt" is a word of its own (they were one word, "Hundm rennt")."""
    from app.text.results import word_confidences
    from model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(BUNDLED_MODEL_DIR)
    piece = {tokenizer.id_to_token(i, "target"): i for i in range(tokenizer.vocab_size)}
    ids = [piece["▁Hund"], piece["<0x6D>"], piece["▁rennt"]]
    logprobs = [-0.1, -0.2, -0.4, -0.05]
    words = word_confidences(tokenizer, ids, logprobs, "Hundm rennt")
    assert words == [((0, 5), round(math.exp(-0.3), 3)), ((6, 11), round(math.exp(-0.4), 3))]
