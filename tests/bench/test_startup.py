"""bench/startup.py's refusals: the runs it knows, and the files it needs, checked before any server starts."""

from __future__ import annotations

from bench import startup
from tests.bench.helpers import refused


def refusal(capsys, argv: list[str]) -> str:
    return refused(capsys, startup.main, argv)


def test_an_unknown_run_is_refused_with_the_runs_there_are(tmp_path, capsys):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    err = refusal(capsys, ["--src", str(src), "--runs", "off,bogus"])
    runs = "off, blocking-cold, background-cold, background-warm, blocking-warm"
    assert f"--runs: unknown 'bogus'; choose from {runs}" in err


def test_a_missing_source_file_or_checkpoint_is_refused(tmp_path, capsys):
    assert f"--src {tmp_path / 'none.en'}: no such file" in refusal(capsys, ["--src", str(tmp_path / "none.en")])
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    err = refusal(capsys, ["--src", str(src), "--model-dir", str(tmp_path)])
    assert f"--model-dir {tmp_path}: not a checkpoint directory" in err
