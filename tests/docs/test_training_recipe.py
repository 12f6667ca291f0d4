"""The README's Training section runs as written: every command, in order, on a toy corpus and a toy shape.

The commands are the README's, through the real `nmt-train` and `nmt-eval`; only the scale changes: a wrapper
named `nmt-train` ahead on the PATH appends a tiny shape, vocabulary, batch and two epochs to each call (argparse
keeps the last of a repeated flag), so two hours of training become seconds. What is proven is what a reader's run
depends on: every option exists, each step writes what the next one reads, the teachers trained apart share
one vocabulary (the student's run refuses them otherwise), and the last step leaves a checkpoint distilled from
all three."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from model.checkpoint import load_checkpoint
from tests.synthetic import synthetic_pairs

pytestmark = pytest.mark.slow  # tens of seconds: tests/conftest.py sends the file out early

ROOT = Path(__file__).resolve().parents[2]
TOY = (
    "--d-model 32 --heads 4 --d-ff 64 --encoder-layers 2 --decoder-layers 2 --vocab-size 300 --batch-tokens 1500 "
    "--warmup 30 --epochs 2"
)
WRAPPER = """#!/usr/bin/env bash
echo "$(date +%s) $*" >> "{log}"
exec "{real}" "$@" {extra}
"""


def readme_training_block() -> str:
    section = (ROOT / "README.md").read_text().split("\n## Training\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the README's Training section has one block of commands"
    return blocks[0]


def write_gz(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    """The block, run once in a directory of its own: (that directory, the calls made, the shell's result)."""
    root = tmp_path_factory.mktemp("recipe")
    data, bin_ = root / "data", root / "bin"
    data.mkdir(), bin_.mkdir()
    pairs = synthetic_pairs(170, seed=7)
    for name, part in (("train", pairs[:150]), ("val", pairs[150:])):
        write_gz(data / f"{name}.en.gz", [en for en, _ in part])
        write_gz(data / f"{name}.de.gz", [de for _, de in part])
    log = root / "calls.log"
    for tool, extra in (("nmt-train", f"{TOY} --threads 1"), ("nmt-eval", "--threads 1")):
        real = Path(sysconfig.get_path("scripts")) / tool  # where pip put the project's console scripts
        assert real.is_file(), f"{real}: the project is not installed in this environment"
        (bin_ / tool).write_text(WRAPPER.format(log=log, real=real, extra=extra))
        (bin_ / tool).chmod(0o755)
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "D": str(data), "PATH": f"{bin_}:{os.environ.get('PATH', os.defpath)}"}
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", readme_training_block()], check=False, cwd=work,
                         env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    calls = log.read_text().splitlines() if log.exists() else []
    return work, calls, run


def test_every_command_of_the_readme_training_section_runs_in_order(recipe_run):
    work, calls, run = recipe_run
    assert run.returncode == 0, run.stderr[-3000:]
    outs = [re.search(r"--(?:out|hyp-out) (\S+)", c).group(1) for c in calls]
    assert outs[:2] == ["t0", "train.beam.de"] and sorted(outs[2:4]) == ["ft-beam", "ft-inter"]
    assert outs[4:] == ["ens3.beam.de", "s2b", "t1", "ens.beam.de", "checkpoints/my-model"]
    train_lines = 150
    for written in ("train.beam.de", "train.inter.de", "ens3.beam.de", "ens.beam.de"):
        assert len((work / written).read_text().splitlines()) == train_lines, f"{written}: a line a source"


def test_the_last_step_distils_t0_from_three_teachers_that_share_its_vocabulary(recipe_run):
    work, _, run = recipe_run
    assert run.returncode == 0, run.stderr[-3000:]
    student = work / "checkpoints" / "my-model"
    metadata = json.loads((student / "metadata.json").read_text())
    teachers = re.findall(r"--teacher (\S+)", metadata["command"])
    assert teachers == ["t0", "s2b", "t1"] and Path(metadata["started_from"]["checkpoint"]).name == "t0"
    assert metadata["command"].count("--epochs 6") == 1 and "--train-tgt ens.beam.de" in metadata["command"]
    vocabularies = {(work / d / "tokenizer.json").read_text() for d in ("t0", "s2b", "t1")}
    assert len(vocabularies) == 1 and (student / "tokenizer.json").read_text() in vocabularies
    model, tokenizer, _ = load_checkpoint(student)
    assert model.config.d_model == 32 and model.config.tgt_vocab_size == tokenizer.vocab_size < 400
