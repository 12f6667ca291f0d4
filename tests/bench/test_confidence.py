"""bench/confidence.py on the bundled en-de model and the first test2016 sentences: its figures, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.confidence import DATA, main
from tests.bench.calibration_fixture import needs_data, saved_calibration
from tests.bench.helpers import refused


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


def stand_in_data(directory: Path, *splits: str) -> list[str]:
    """--data for the refusals: empty files for each split and language (they are refused before anything is read)."""
    directory.mkdir(exist_ok=True)
    for split in splits:
        for language in ("en", "de", "fr"):
            (directory / f"{split}.{language}.gz").touch()
    return ["--data", str(directory)]


def test_a_calibration_fitted_on_the_measured_set_is_refused(tmp_path):
    data = stand_in_data(tmp_path / "data", "test_2016_flickr", "val")
    directory = saved_calibration(tmp_path, "/data/test_2016_flickr.en.gz")
    with pytest.raises(SystemExit, match="would not be held out; fit it on val, or measure another --split"):
        main(["--pairs", "en-de", "--calibration-dir", directory, *data])
    directory = saved_calibration(tmp_path, "/data/val.en.gz")
    with pytest.raises(SystemExit) as stopped:
        main(["--pairs", "en-de", "--calibration-dir", directory, "--split", "val", *data])
    assert "fit it on a set other than val, or measure another --split" in str(stopped.value)
    assert "(val)" not in str(stopped.value)  # not the set it refused


def test_a_missing_calibration_or_one_directory_too_few_is_refused(tmp_path, capsys):
    data = stand_in_data(tmp_path / "data", "test_2016_flickr")
    with pytest.raises(SystemExit, match="has no confidence.json"):
        main(["--pairs", "en-de", "--calibration-dir", str(tmp_path), *data])
    with pytest.raises(SystemExit) as stopped:
        main(["--calibration-dir", str(tmp_path), *data])  # two pairs by default
    assert stopped.value.code == 2 and "one a pair" in capsys.readouterr().err


def refusal(capsys, argv: list[str]) -> str:
    return refused(capsys, main, argv)


def test_a_split_or_a_data_directory_that_is_not_there_is_refused_naming_what_is(tmp_path, capsys):
    data = stand_in_data(tmp_path / "data", "test_2016_flickr", "val")
    err = refusal(capsys, ["--pairs", "en-de", "--split", "test2016", *data])
    assert f"--split test2016: {tmp_path / 'data' / 'test2016.en.gz'} does not exist" in err
    assert "test_2016_flickr, val" in err
    (tmp_path / "data" / "val.fr.gz").unlink()
    assert "val.fr.gz does not exist" in refusal(capsys, ["--pairs", "en-fr", "--split", "val", *data])
    assert f"--data {tmp_path / 'none'}: no such directory" in refusal(capsys, ["--data", str(tmp_path / "none")])


def test_limit_0_is_every_sentence_and_a_negative_one_is_refused(tmp_path, monkeypatch, capsys):
    from bench import confidence

    seen = []
    monkeypatch.setattr(confidence, "measure", lambda pair, directory, data, split, limit: seen.append(limit) or {})
    data = stand_in_data(tmp_path / "data", "test_2016_flickr")
    main(["--pairs", "en-de", "--limit", "0", *data])
    main(["--pairs", "en-de", *data])
    main(["--pairs", "en-de", "--limit", "7", *data])
    assert seen == [None, None, 7]  # None: read_lines(...)[:None], all of them
    capsys.readouterr()
    assert "--limit -1: a number of sentences, at least 0 (0 = all)" in refusal(capsys, ["--limit", "-1", *data])
