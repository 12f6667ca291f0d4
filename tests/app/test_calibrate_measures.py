"""app/calibrate.py's measures and threshold choice against figures worked out by hand (no model, no data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.calibrate import auroc, calibration_error, choose_thresholds, report, spearman
from model.confidence import DEFAULT_THRESHOLDS, Signals


def test_auroc_counts_each_tie_between_a_positive_and_a_negative_as_half():
    # pairs (positive, negative): 0.5 > 0.2, 0.5 = 0.5 (half), 0.9 > 0.2, 0.9 > 0.5: 3.5 of 4
    assert auroc([0.2, 0.5, 0.5, 0.9], [False, True, False, True]) == 0.875
    assert math.isnan(auroc([0.1, 0.2], [True, True]))  # no negative: nothing to rank against
    assert math.isnan(auroc([0.1, 0.2], [False, False]))


def test_spearman_with_ties_on_one_side():
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): covariance 4.5, variances 4.5 and 5
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))


def test_calibration_error_weighs_each_bins_gap_by_its_sentences():
    stated = np.asarray([0.05, 0.15, 0.15, 0.95, 0.95, 0.95, 0.95])
    happened = np.asarray([0, 0, 1, 1, 1, 1, 0])
    # bins [0, .1): |0.05 - 0| for 1 sentence; [.1, .2): |0.15 - 0.5| for 2; [.9, 1]: |0.95 - 0.75| for 4
    assert calibration_error(stated, happened) == pytest.approx((0.05 + 2 * 0.35 + 4 * 0.2) / 7)
    assert calibration_error(np.asarray([0.0, 1.0]), np.asarray([0, 1])) == 0.0  # 0 and 1 fall in the end bins
    assert calibration_error(np.asarray([0.5, 0.5]), np.asarray([1, 0])) == 0.0  # half of them, as stated


def test_report_on_a_perfect_ranking():
    chrf = np.arange(10, 110, 10, dtype=float)  # 10 .. 100: the worst tenth is the first
    result = report(np.linspace(0.05, 0.95, 10), chrf, threshold=50)
    # one sentence a bin, stating 0.05 .. 0.95 where the first four fail and the last six clear chrF 50: gaps 0.05,
    # 0.15, 0.25, 0.35, then 0.55, 0.45, 0.35, 0.25, 0.15, 0.05
    assert result == {"sentences": 10, "spearman": 1.0, "auroc_worst_10pct": 1.0, "calibration_error": 0.26,
                      "share_clearing_threshold": 0.6}  # fmt: skip


def rows(means: np.ndarray, lengths: np.ndarray) -> list[Signals]:
    return [
        Signals(mean_logprob=m, min_logprob=m - 1, length=n, repetition=0.0, copied=0.0) for m, n in zip(means, lengths)
    ]


@pytest.mark.parametrize("shift", [0.0, -2.0])
def test_the_hallucination_threshold_flags_the_lowest_hundredth_of_the_development_set_whatever_its_scale(shift):
    means = -np.arange(100) / 100 + shift  # 0 .. -0.99, or a less confident model's -2 .. -2.99
    thresholds = choose_thresholds(rows(means, np.zeros(100)), [50.0] * 100)
    assert sum(m < thresholds["hallucination"] for m in means) == 1
    assert thresholds["hallucination"] == pytest.approx(-0.98 + shift)
    assert thresholds["length"] == DEFAULT_THRESHOLDS["length"] / 2  # no nearer than half the default
    assert all(thresholds[k] == DEFAULT_THRESHOLDS[k] for k in ("loop", "token_loop", "copy"))


def test_the_length_threshold_is_the_edge_of_the_worst_half_percent():
    lengths = np.arange(1000) / 100  # 0 .. 9.99
    thresholds = choose_thresholds(rows(np.zeros(1000), lengths), [50.0] * 1000)
    assert thresholds["length"] == 9.94  # the 99.5th percentile, 9.94005, to three decimals


def test_the_measures_on_the_simplest_cases():
    assert auroc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert auroc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], [False, True, False, True]) == 0.5
    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75  # one pair of four out of order
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 1, 2]) == pytest.approx(0.8660254)  # ties share their rank
    stated, happened = np.asarray([0.9, 0.9, 0.1, 0.1]), np.asarray([1, 0, 0, 0])
    assert calibration_error(stated, happened) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)
