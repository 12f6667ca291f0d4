"""nmt-calibrate on an imported Marian model: it writes a calibration the server then applies, the same numbers over
HTTP as the calibration computes from the signals; bad input is refused with a message."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from app.calibrate import main, translate_file
from app.settings import Settings
from model.confidence import CALIBRATION, Calibration, Signals
from tests.app.conftest import MODES, serve_in
from tests.synthetic import synthetic_pairs

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def calibrated(marian_models, tmp_path_factory):
    """A copy of the imported model, calibrated on 80 synthetic sentences whose "references" are the model's own
    translations for every other one (chrF 100) and another sentence's for the rest (low chrF)."""
    root = tmp_path_factory.mktemp("calibrate")
    model = root / "marian"
    shutil.copytree(marian_models["separate"][1], model)
    sources = [en for en, _ in synthetic_pairs(80, seed=3)]
    _, translated = asyncio.run(translate_file(model, sources, None, None))
    own = [t.text for t in translated]
    references = [own[i] if i % 2 == 0 else own[(i + 7) % len(own)] for i in range(len(own))]
    (root / "dev.en").write_text("\n".join(sources) + "\n")
    (root / "dev.de").write_text("\n".join(references) + "\n")
    main([str(model), "--src", str(root / "dev.en"), "--ref", str(root / "dev.de"), "--chrf", "60"])
    return model, root


def test_nmt_calibrate_writes_a_calibration_with_its_meaning_and_fit(calibrated, capsys):
    model, _ = calibrated
    calibration = Calibration.load(model)
    assert calibration is not None and calibration.chrf_threshold == 60
    assert calibration.fitted_on["sentences"] == 80 and calibration.fitted_on["model"] == "tiny-marian-separate"
    assert 0.3 < calibration.fitted_on["share_clearing_threshold"] < 0.9  # both sides of the threshold
    assert calibration.meaning.endswith("at least 60")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_the_server_applies_the_calibration_it_finds(calibrated, mode):
    model, _ = calibrated
    calibration = Calibration.load(model)
    texts = [en for en, _ in synthetic_pairs(6, seed=11)]
    async with serve_in(mode, Settings(model_dir=model, compile=False)) as (_, client):
        r = await client.post("/translate", json={"text": texts, "return_signals": True})
        assert r.status_code == 200, r.text
        assert r.json()["calibrated"] is True
        for t in r.json()["translations"]:
            signals = Signals(**t["signals"])
            assert t["confidence"] == pytest.approx(calibration.probability(signals), abs=6e-4)
        info = (await client.get("/info")).json()["confidence"]
        assert info["calibrated"] and info["chrf_threshold"] == 60 and info["thresholds"] == calibration.thresholds


def test_a_file_of_the_wrong_shape_stops_the_server_with_its_name(calibrated, tmp_path):
    model, _ = calibrated
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    (broken / CALIBRATION).write_text(json.dumps({"weights": [1.0]}))
    with pytest.raises(ValueError, match="confidence.json"):
        Calibration.load(broken)


def test_mismatched_or_too_short_files_are_refused(calibrated, tmp_path, capsys):
    model, root = calibrated
    (tmp_path / "short.de").write_text("eins\n")
    with pytest.raises(SystemExit, match="has 80 lines but"):
        main([str(model), "--src", str(root / "dev.en"), "--ref", str(tmp_path / "short.de")])
    with pytest.raises(SystemExit, match="too few"):
        main([str(model), "--src", str(root / "dev.en"), "--ref", str(root / "dev.de"), "--limit", "10"])
    with pytest.raises(SystemExit):  # it fitted on all but the last 30 lines
        main([str(model), "--src", str(root / "dev.en"), "--ref", str(root / "dev.de"), "--limit", "-30"])
    assert "--limit takes a positive number of lines" in capsys.readouterr().err
    for languages in (["--source", "fr"], ["--target", "fr"]):  # a pair model's languages are its own: it ignored them
        with pytest.raises(SystemExit, match="translates en->de, not .* leave them out"):
            main([str(model), "--src", str(root / "dev.en"), "--ref", str(root / "dev.de"), *languages])


def test_a_cut_short_gzip_or_an_out_that_is_a_file_is_refused_before_translating(tmp_path):
    """An EOFError's traceback; a FileExistsError's once the whole set had been translated. The model directory does
    not exist: loading it would have said so instead."""
    import gzip

    sources = [en for en, _ in synthetic_pairs(60, seed=3)]
    (tmp_path / "dev.en").write_text("\n".join(sources) + "\n")
    (tmp_path / "dev.de").write_text("\n".join(sources) + "\n")
    whole = gzip.compress((tmp_path / "dev.en").read_bytes())
    (tmp_path / "cut.en.gz").write_bytes(whole[: len(whole) // 2])
    model, ref = str(tmp_path / "no-model"), ["--ref", str(tmp_path / "dev.de")]
    with pytest.raises(SystemExit, match=f"nmt-calibrate: cannot read {tmp_path / 'cut.en.gz'}: it is cut short"):
        main([model, "--src", str(tmp_path / "cut.en.gz"), *ref])
    with pytest.raises(SystemExit, match=f"--out {tmp_path / 'dev.en'}: .* is a file; give a directory"):
        main([model, "--src", str(tmp_path / "dev.en"), *ref, "--out", str(tmp_path / "dev.en")])
    with pytest.raises(SystemExit, match="is a file; give a directory"):  # a directory to make inside a file
        main([model, "--src", str(tmp_path / "dev.en"), *ref, "--out", str(tmp_path / "dev.en" / "sub")])
