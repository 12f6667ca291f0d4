"""bench/confidence.py on the bundled en-de model and the first test2016 sentences: its figures, and its refusals."""

from __future__ import annotations

import json

import pytest

from bench.confidence import DATA, main
from tests.bench.calibration_fixture import needs_data, saved_calibration


@needs_data
def test_a_confidence_ranking_as_the_raw_one_gets_its_figures_and_its_own_calibration_error(tmp_path, capsys):
    directory = saved_calibration(tmp_path, str(DATA / "val.en.gz"))
    [result] = main(["--pairs", "en-de", "--limit", "30", "--calibration-dir", directory])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("CPU: ") and json.loads(out[1]) == result  # the CPU line, then the pair's JSON line
    assert result["measured_on"] == "test_2016_flickr.en.gz" and result["fitted_on"].endswith("val.en.gz")
    served, raw = result["calibrated"], result["raw_exp_mean_logprob"]
    assert served["sentences"] == raw["sentences"] == 30
    # a monotone function of mean_logprob ranks the sentences as exp(mean_logprob) does
    assert served["spearman"] == pytest.approx(raw["spearman"], abs=0.01)
    assert served["auroc_worst_10pct"] == pytest.approx(raw["auroc_worst_10pct"], abs=0.01)
    assert served["spearman"] > 0.2 and served["auroc_worst_10pct"] > 0.5  # low confidence goes with low chrF
    assert served["calibration_error"] != raw["calibration_error"]  # the stated probabilities differ


def test_a_calibration_fitted_on_the_measured_set_is_refused(tmp_path):
    directory = saved_calibration(tmp_path, "/data/test_2016_flickr.en.gz")
    with pytest.raises(SystemExit, match="would not be held out"):
        main(["--pairs", "en-de", "--calibration-dir", directory])


def test_a_missing_calibration_or_one_directory_too_few_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit, match="has no confidence.json"):
        main(["--pairs", "en-de", "--calibration-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as stopped:
        main(["--calibration-dir", str(tmp_path)])  # two pairs by default
    assert stopped.value.code == 2 and "one a pair" in capsys.readouterr().err
