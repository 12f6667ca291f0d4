"""bench/hallucinations.py: its labelling rule on hand-made outputs, its perturbations and threshold choice, and a
tiny run on the bundled en-de model."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

from bench.confidence import DATA
from bench.hallucination_inputs import DEGENERATE
from bench.hallucinations import (
    Case,
    best_loops,
    best_threshold,
    judge,
    main,
    oscillates,
    perturbations,
    precision_recall,
)
from model.confidence import Signals
from tests.bench.calibration_fixture import needs_data, saved_calibration

REFERENCE = "Ein Mann fährt mit dem Fahrrad über eine Brücke."


def translated(text: str) -> SimpleNamespace:
    """What the engine returns, as far as the rule reads it."""
    signals = Signals(mean_logprob=-0.5, min_logprob=-1.0, length=0.0, repetition=0.0, copied=0.0)
    return SimpleNamespace(text=text, quality=SimpleNamespace(signals=signals))


def test_oscillation_is_a_run_of_words_or_letters():
    assert oscillates("Welt Welt Welt Welt.")
    assert oscillates("ein Mann und ein Mann und ein Mann und")  # a 3-gram three times
    assert oscillates("Un lanceur droit pour le Serererererer lance une balle.")
    assert not oscillates("Un homme et deux filles montrent un fiiiii.")  # a stutter over five letters
    assert not oscillates("Ein Hund Hund rennt.")  # twice is no run
    assert not oscillates(REFERENCE)


def test_each_branch_of_the_labelling_rule():
    bike = "A man rides a bike over a bridge."
    cases_and_outputs = [
        (Case("natural", bike, REFERENCE), "Ein Mann fährt Fahrrad über eine Brücke.", False, False),
        (Case("natural", bike, REFERENCE), "Zwei Frauen sitzen im Garten und trinken Tee.", True, False),
        # a copy of the input is untranslated, not detached
        (Case("other-language", "Un homme fait du vélo sur un pont.", REFERENCE), "Un homme fait du vélo sur un pont.",
         False, False),
        (Case("natural", bike, REFERENCE), "...", False, False),  # nothing said: an omission
        (Case("degenerate", "."), "Zwei.", True, False),
        (Case("degenerate", "a", None, frozenset({"ein", "eine"})), "Ein Mann.", True, False),  # half invented
        (Case("degenerate", "Hello world!", None, frozenset({"hallo", "welt"})), "Welt!", False, False),
        (Case("degenerate", "Hello world", None, frozenset({"hallo", "welt"})), "Welt Welt Welt Welt.", False, True),
        (Case("degenerate", "12345"), "1244.", False, False),  # no word with a letter
        (Case("degenerate", "dog dog dog", None, frozenset({"hund"})), "Hund Hund Hund.", False, False),  # its own run
    ]  # fmt: skip
    cases, outputs, detached, oscillatory = zip(*cases_and_outputs)
    judged = judge(list(cases), [translated(o) for o in outputs], b90=25.0, b99=35.0)
    assert [j.detached for j in judged] == list(detached)
    assert [j.oscillatory for j in judged] == list(oscillatory)
    assert [j.hallucination for j in judged] == [d or o for d, o in zip(detached, oscillatory)]
    # between the bounds the rule does not tell; an oscillation is a hallucination all the same
    unclear = judge([cases[0], cases[0]], [translated(outputs[0]), translated("Mann Mann Mann")], b90=0.0, b99=100.0)
    assert [(j.detached, j.hallucination) for j in unclear] == [(None, None), (None, True)]


def test_the_five_perturbations_change_what_they_say():
    sentence = "Two young men are playing football in the park."
    words = sentence.split()
    changed = dict(perturbations(sentence, random.Random(0)))
    assert list(changed) == ["insert-frequent", "insert-odd", "misspelt", "word-dropped", "word-doubled"]
    for kind in ("insert-frequent", "insert-odd"):
        assert changed[kind].endswith(" " + sentence) and len(changed[kind].split()) == len(words) + 1
    misspelt = [(a, b) for a, b in zip(words, changed["misspelt"].split(), strict=True) if a != b]
    [(word, wrong)] = misspelt  # one word, its letters swapped inside it
    assert sorted(word) == sorted(wrong) and (word[0], word[-1]) == (wrong[0], wrong[-1])
    dropped = changed["word-dropped"].split()
    assert len(dropped) == len(words) - 1 and any(words[:i] + words[i + 1 :] == dropped for i in range(len(words)))
    doubled = changed["word-doubled"].split()
    assert len(doubled) == len(words) + 1 and any(doubled[i] == doubled[i + 1] for i in range(len(words)))
    assert dict(perturbations("A dog.", random.Random(0))).keys() == {"insert-frequent", "insert-odd", "word-doubled"}


def test_the_threshold_is_the_highest_recall_at_the_precision_asked_for():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    positives = [True, True, False, True, False, False]
    assert best_threshold(scores, positives, 0.75) == pytest.approx(0.55)  # four flagged, three right
    assert best_threshold(scores, positives, 0.8) == pytest.approx(0.75)  # two flagged, both right
    assert best_threshold(scores, positives, 1.01) == pytest.approx(0.55)  # out of reach: the best F1 (6/7)
    assert best_threshold([0.9, 0.9, 0.1], [True, False, False], 0.9) == pytest.approx(0.5)  # equal scores go together


def test_the_loops_chosen_find_the_most_at_the_precision_asked_for_the_surer_first():
    def looped(words: int, tokens: int) -> Signals:
        return Signals(mean_logprob=-0.5, min_logprob=-1.0, length=0.0, repetition=0.0, copied=0.0, loop=words,
                       token_loop=tokens)  # fmt: skip

    # (copies in words, in tokens, oscillatory): three loops, a word doubled, pieces stuttering three times
    cases = [(3, 3, True), (4, 5, True), (1, 5, True), (2, 2, False), (1, 3, False), (1, 1, False)]
    signals, positives = [looped(w, t) for w, t, _ in cases], [o for _, _, o in cases]
    assert best_loops(signals, positives, 0.8) == {"loop": 3, "token_loop": 4}  # all three, nothing else
    assert best_loops(signals, positives, 0.5) == {"loop": 3, "token_loop": 4}  # as many found, and surer
    assert best_loops(signals, [True, True, True, False, True, False], 0.8) == {"loop": 3, "token_loop": 3}


def test_precision_and_recall_leave_unlabelled_outputs_out_and_count_them():
    flagged = np.asarray([True, True, False, True, False])
    result = precision_recall(flagged, [True, False, True, None, False])
    assert result == {"flagged": 2, "labelled": 2, "found": 1, "precision": 0.5, "recall": 0.5, "flagged_unclear": 1,
                      "precision_unclear_as_negatives": 0.3333}  # fmt: skip


@needs_data
def test_a_tiny_run_builds_both_sets_and_scores_the_flags_on_the_test_one(tmp_path, capsys):
    directory = saved_calibration(tmp_path / "calibration", str(DATA / "val.en.gz"))
    dumped = tmp_path / "cases.jsonl"
    [result] = main(["--pairs", "en-de", "--limit", "6", "--calibration-dir", directory, "--dump", str(dumped)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("CPU: ") and json.loads(out[1]) == result
    kinds = result["kinds"]
    worded = sum(any(c.isalpha() for c in d[0]) for d in DEGENERATE[1::2])  # the rest come back as written, unjudged
    assert [kinds[k]["cases"] for k in ("natural", "target-language", "other-language", "degenerate", "off-domain")] == [
        6, 6, 6, worded + 8, 20]  # fmt: skip
    assert all(0 < kinds[k]["cases"] <= 6 for k in ("insert-frequent", "insert-odd", "misspelt", "word-doubled"))
    assert kinds["degenerate"]["hallucinations"] > 0  # "Welt Welt Welt." for "Hello world" and its like
    for thresholds in ("calibration", "chosen_on_val"):
        either = result["test"][thresholds]["either"]
        assert either["labelled"] == sum(k["hallucinations"] for k in kinds.values())
        assert either["found"] <= min(either["flagged"], either["labelled"])
    for bounds in result["bounds_chrf"].values():
        assert 0 < bounds["b90"] <= bounds["b99"] < 100
    lines = [json.loads(line) for line in dumped.read_text().splitlines()]
    assert {line["set"] for line in lines} == {"val", "test_2016_flickr"}
    assert sum(line["set"] == "test_2016_flickr" for line in lines) == sum(k["cases"] for k in kinds.values())
