"""bench/decode.py's refusals: arguments it cannot run with are named before any work, without a traceback."""

from __future__ import annotations

from bench import decode
from tests.bench.helpers import refused


def refusal(capsys, argv: list[str]) -> str:
    return refused(capsys, decode.main, argv)


def test_a_missing_source_file_a_checkpoint_that_is_not_there_and_a_negative_limit_are_refused(tmp_path, capsys):
    assert f"--src {tmp_path / 'none.en'}: no such file" in refusal(capsys, ["--src", str(tmp_path / "none.en")])
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    assert f"--model-dir {tmp_path / 'm'}: no such directory" in refusal(
        capsys, ["--src", str(src), "--model-dir", str(tmp_path / "m")]
    )
    err = refusal(capsys, ["--src", str(src), "--limit", "-3"])
    assert "--limit -3: a number of sentences, at least 0 (0 = all)" in err
