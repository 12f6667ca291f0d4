"""bench/decode.py's refusals: arguments it cannot run with are named before any work, without a traceback."""

from __future__ import annotations

import pytest

from bench import decode
from tests.bench.helpers import refused


def refusal(capsys, argv: list[str]) -> str:
    return refused(capsys, decode.main, argv)


@pytest.mark.parametrize("value", ["0", "1,x", "1,,32", "-1"])
def test_batch_sizes_must_be_whole_numbers_of_at_least_one(tmp_path, value, capsys):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    err = refusal(capsys, ["--src", str(src), f"--batch-sizes={value}"])
    assert f"argument --batch-sizes: {value!r}: comma-separated whole numbers, each at least 1" in err


def test_a_missing_source_file_a_checkpoint_that_is_not_there_and_a_negative_limit_are_refused(tmp_path, capsys):
    assert f"--src {tmp_path / 'none.en'}: no such file" in refusal(capsys, ["--src", str(tmp_path / "none.en")])
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    assert f"--model-dir {tmp_path / 'm'}: no such directory" in refusal(
        capsys, ["--src", str(src), "--model-dir", str(tmp_path / "m")]
    )
    err = refusal(capsys, ["--src", str(src), "--limit", "-3"])
    assert "--limit -3: a number of sentences, at least 0 (0 = all)" in err
