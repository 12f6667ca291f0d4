"""model/confidence.py: the signals, the calibration's fit and file, and the flags."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from model.confidence import (
    CALIBRATION,
    DEFAULT_THRESHOLDS,
    Calibration,
    LengthModel,
    Signals,
    assess,
    copied_share,
    copies,
    fit,
    flags,
    judge,
    length_model,
    loop,
    repeated_share,
    select,
    signals,
)


def test_repeated_share_counts_the_tokens_that_repeat_the_ngram_before_them():
    assert repeated_share([]) == 0.0
    assert repeated_share([5]) == 0.0
    assert repeated_share([1, 2, 3, 4]) == 0.0
    assert repeated_share([7, 7, 7, 7]) == 0.75  # w w w w: the last three
    assert repeated_share([1, 2, 1, 2, 1, 2]) == pytest.approx(4 / 6)  # a b a b a b: the last four
    assert repeated_share([1, 2, 3, 1, 2, 3]) == 0.5  # a trigram twice
    assert repeated_share([1, 2, 3, 4, 5, 1, 2, 3, 4, 5]) == 0.0  # a 5-gram is past MAX_NGRAM


def test_copied_share_is_over_the_translations_words():
    assert copied_share("A man rides.", "Ein Mann fährt.") == (0.0, 3)
    assert copied_share("Hello John Smith", "Hallo John Smith") == (pytest.approx(2 / 3), 3)
    assert copied_share("anything", "") == (0.0, 0)
    assert copied_share("The Cat", "the cat") == (1.0, 2)  # words compare lower-cased


def test_signals_of_a_degenerate_translation():
    s = signals(
        [10, 11, 2], [7, 7, 7, 7, 9], [-0.1, -0.5, -0.2, -0.2, -0.3, -0.7], "Hello world", "Welt Welt Welt Welt."
    )
    assert s.mean_logprob == pytest.approx(-2.0 / 6)
    assert s.sum_logprob == pytest.approx(-2.0)  # the whole translation's log-probability
    assert s.min_logprob == -0.7
    assert s.repetition == pytest.approx(3 / 5)
    assert (s.loop, s.token_loop) == (4, 4)  # "Welt" four times in a row, in words and in tokens
    assert s.copied == 0.0
    assert s.length == pytest.approx(abs(math.log(6 / 3)) / LengthModel().spread)
    # the source's own repetition is not held against the translation
    echoed = signals([4, 4, 4, 2], [7, 7, 7], [-0.1] * 4, "very very very", "sehr sehr sehr")
    assert echoed.repetition == 0.0
    assert (echoed.loop, echoed.token_loop) == (1, 1)


def test_a_loop_is_the_most_copies_in_a_row_of_one_ngram_beyond_the_source():
    units = ("w w w w", "a b a b a b c", "x a b c a b c a b c", "a b c", "")
    assert [copies(u.split()) for u in units] == [4, 3, 3, 1, 0]
    assert copies("a b a c a b".split()) == 1  # a word again, but no n-gram twice in a row
    long = "ein Hund " * 200  # every copy of a long loop counts
    assert copies(long.split()) == 200


def test_the_loop_count_equals_a_plain_count_of_copies_from_each_place():
    def plain(units: list[int]) -> int:  # from each place, each n: how many times its n-gram follows itself
        most = 1 if units else 0
        for n in range(1, 5):
            for i in range(len(units) - n):
                k = 1
                while units[i + k * n : i + (k + 1) * n] == units[i : i + n]:
                    k += 1
                most = max(most, k)
        return most

    rng = random.Random(0)
    for _ in range(3000):
        units = [rng.randrange(3) for _ in range(rng.randrange(30))]
        assert copies(units) == plain(units), units
    # a loop counts where the source has none as long: a translation that echoes it is not held to it
    assert loop("dog dog dog".split(), "Hund Hund Hund".split()) == 1
    assert loop("dog dog".split(), "Hund Hund Hund".split()) == 3
    # a loop inside a word is a run of its pieces: "Po-Po-Po" in words, "Serererer" in tokens
    s = signals([5, 6, 2], [11, 12, 13, 12, 13, 12, 13, 12, 13, 3], [-0.1] * 11, "a bird", "Ein Serererer.")
    assert (s.loop, s.token_loop) == (1, 4)
    s = signals([5, 6, 2], [11, 12, 13, 14, 12, 13, 14, 12, 13, 14], [-0.1] * 11, "a bird", "Ein Po-Po-Po.")
    assert (s.loop, s.token_loop) == (3, 3)


def test_flags_use_the_thresholds():
    base = {"mean_logprob": -0.2, "min_logprob": -1.0, "length": 0.5, "repetition": 0.6, "copied": 0.0, "words": 5,
            "loop": 2, "token_loop": 3}  # fmt: skip
    assert flags(Signals(**base), DEFAULT_THRESHOLDS) == []  # twice in words, three times in tokens: not a loop
    assert flags(Signals(**base | {"loop": 3}), DEFAULT_THRESHOLDS) == ["repetition"]
    assert flags(Signals(**base | {"token_loop": 4}), DEFAULT_THRESHOLDS) == ["repetition"]
    assert flags(Signals(**base | {"length": 9.0, "copied": 1.0}), DEFAULT_THRESHOLDS) == ["length", "copy"]
    assert flags(Signals(**base | {"copied": 1.0, "words": 2}), DEFAULT_THRESHOLDS) == []  # too short to tell
    assert flags(Signals(**base | {"mean_logprob": -3.0}), DEFAULT_THRESHOLDS) == ["hallucination"]
    assert flags(Signals(**base | {"mean_logprob": -1.0}), DEFAULT_THRESHOLDS | {"hallucination": -0.5}) == [
        "hallucination"
    ]


def test_the_attention_signals_come_from_the_steps_facts_and_coverage_flags_a_source_left_out():
    # a source of six tokens and </s>; the translation's tokens align to 0, 1, 1 and </s> to 5
    s = signals([10, 11, 12, 13, 14, 15, 2], [7, 8, 9], [-0.1] * 4, "a b c d e f", "x y z",
                attention=[0.1, 0.2, 0.3, 0.6], aligned=[0, 1, 1, 5])  # fmt: skip
    assert s.attention == pytest.approx(0.3) and s.coverage == pytest.approx(3 / 6)  # 2, 3 and 4 uncovered
    assert s.tokens == pytest.approx(math.log(4))
    prefixed = signals([10, 11, 2], [7, 8], [0.0, -0.1, -0.2], "a b", "x y", forced=1, attention=[0.9, 0.2, 0.4],
                       aligned=[0, 1, 1])  # fmt: skip
    assert prefixed.attention == pytest.approx(0.3)  # the forced token's step is the caller's, as its log-probability
    kept_none = signals([10, 11, 2], [7], [-0.1, -0.1], "a b", "x")
    assert math.isnan(kept_none.attention) and math.isnan(kept_none.coverage)
    assert "coverage" in flags(s, DEFAULT_THRESHOLDS | {"coverage": 0.5}) and "coverage" not in flags(
        s, DEFAULT_THRESHOLDS
    )
    short = signals([10, 11, 2], [7], [-0.1, -0.1], "a b", "x", attention=[0.1, 0.1], aligned=[2, 2])
    assert short.coverage == 1.0 and "coverage" not in flags(short, DEFAULT_THRESHOLDS)  # too short to tell
    assert flags(kept_none, DEFAULT_THRESHOLDS) == []


def test_select_keeps_an_extra_signal_that_finds_bad_sentences_and_leaves_one_that_does_not():
    rng = np.random.default_rng(1)
    n = 600
    mean, spread, noise = rng.uniform(-1.5, 0.0, n), rng.uniform(0, 0.5, n), rng.uniform(0, 1, n)
    chrf = 60 + 20 * mean - 60 * spread + rng.normal(0, 4, n)  # attention far from even: a worse sentence
    rows = [Signals(float(m), float(m) - 1, 0.5, 0.0, 0.0, attention=float(a), coverage=float(c), tokens=2.0)
            for m, a, c in zip(mean, spread, noise)]  # fmt: skip
    features, tried = select(rows, chrf, 50.0)
    assert features == ("mean_logprob", "min_logprob", "length", "repetition", "copied", "attention")
    assert tried["mean_logprob,min_logprob,length,repetition,copied,attention"] > tried[
        "mean_logprob,min_logprob,length,repetition,copied"] + 0.05  # fmt: skip
    k = fit(rows, list(chrf >= 50), chrf_threshold=50, length=LengthModel(), features=features)
    assert k.features == features and k.weights[-1] < 0  # spread attention, less confidence
    worse = Signals(-0.2, -1.2, 0.5, 0.0, 0.0, attention=0.45)
    assert k.probability(worse) < k.probability(Signals(-0.2, -1.2, 0.5, 0.0, 0.0, attention=0.05))
    assert k.probability(Signals(-0.2, -1.2, 0.5, 0.0, 0.0)) == pytest.approx(  # not kept: the set's mean
        k.probability(Signals(-0.2, -1.2, 0.5, 0.0, 0.0, attention=k.mean[-1]))
    )


def test_uncalibrated_confidence_is_the_geometric_mean_token_probability():
    s = Signals(mean_logprob=-0.5, min_logprob=-1.0, length=0.0, repetition=0.0, copied=0.0)
    q = assess(s, None)
    assert (q.confidence, q.calibrated) == (round(math.exp(-0.5), 3), False)


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_translation_of_no_tokens_has_no_confidence_however_its_signals_read(calibrated):
    """mBART with max_new_tokens 1 spends it on the target language's code: "" came back with confidence 1.0 (the
    mean of no log-probabilities, 0)."""
    calibration = fit(*rows_and_outcomes(400)[:2], chrf_threshold=50, length=LengthModel()) if calibrated else None
    q = judge([*range(17, 29), 2], [], [], "Ein Hund läuft über die große Wiese.", "", calibration)
    assert q.confidence == 0.0 and "length" in q.flags and q.calibrated == calibrated
    assert judge([17, 18, 19, 2], [5, 2], [-0.1, -0.1], "Ein Hund läuft.", "x", None).confidence > 0.5


def rows_and_outcomes(n: int = 400, seed: int = 0):
    """Sentences whose chance of being good rises with their mean log-probability, as a logistic of it."""
    rng = np.random.default_rng(seed)
    mean = rng.uniform(-1.5, 0.0, n)
    rows = [Signals(float(m), float(m) - 1, float(rng.uniform(0, 3)), 0.0, float(rng.uniform(0, 0.2))) for m in mean]
    chance = 1 / (1 + np.exp(-(4 * mean + 3)))
    return rows, list(rng.uniform(size=n) < chance), chance


def test_fit_recovers_a_logistic_relationship_and_its_probabilities():
    rows, good, chance = rows_and_outcomes(4000)
    k = fit(rows, good, chrf_threshold=50, length=LengthModel())
    predicted = np.asarray([k.probability(r) for r in rows])
    assert np.abs(predicted - chance).mean() < 0.03
    assert k.weights[0] > 0  # more likely tokens, more confidence
    assert 0 <= predicted.min() and predicted.max() <= 1


def test_calibration_file_round_trips_and_bad_files_are_refused_by_name(tmp_path):
    rows, good, _ = rows_and_outcomes()
    k = fit(rows, good, chrf_threshold=45, length=length_model([10, 12, 8], [11, 14, 9]))
    k.thresholds = DEFAULT_THRESHOLDS | {"length": 3.5}
    path = k.save(tmp_path)
    assert path.name == CALIBRATION
    back = Calibration.load(tmp_path)
    assert back == k
    assert json.loads(path.read_text())["meaning"].endswith("at least 45")
    assert Calibration.load(tmp_path / "none") is None
    data = json.loads(path.read_text())
    old = {k: v for k, v in data["thresholds"].items() if k not in ("loop", "token_loop")} | {"repetition": 0.25}
    path.write_text(json.dumps(data | {"thresholds": old}))  # an older file: the share rule's threshold, no loops
    assert Calibration.load(tmp_path).thresholds == k.thresholds
    path.write_text(json.dumps(data | {"features": ["mean_logprob", "sparkle"]}))
    with pytest.raises(ValueError, match=r"confidence.json.*features \['sparkle'\] are not among"):
        Calibration.load(tmp_path)
    path.write_text(json.dumps(data | {"features": ["mean_logprob"]}))
    with pytest.raises(ValueError, match="need 1 values each, one a feature"):
        Calibration.load(tmp_path)
    path.write_text(json.dumps(data | {"weights": [1.0]}))
    with pytest.raises(ValueError, match="weights, mean and scale"):
        Calibration.load(tmp_path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a calibration"):
        Calibration.load(tmp_path)


def test_length_model_centres_on_the_median_ratio():
    lm = length_model([10] * 99 + [10], [12] * 99 + [40])
    assert lm.median == pytest.approx(math.log(1.2))
    assert lm.distance(10, 12) == pytest.approx(0.0)
    assert lm.distance(10, 40) > 10
