"""nmt-distil: teachers, their ensemble's translations and a student, through the command itself, on a toy corpus."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from tests.conftest import write_corpus
from tests.model.helpers import batch

pytestmark = pytest.mark.slow  # tens of seconds: tests/conftest.py sends the file out early

ROOT = Path(__file__).resolve().parents[2]
TOY = "--d-model 32 --heads 4 --d-ff 64 --encoder-layers 2 --decoder-layers 2 --vocab-size 400 --batch-tokens 1200 "
TOY += "--dropout 0.0 --attention-dropout 0.0 --warmup 30 --lr 5e-3 --threads 1"


def distil(data: Path, out: Path, *more: str) -> list[str]:
    command = [sys.executable, "-m", "model.distil", "--train-src", str(data / "train.en"), "--train-tgt",
               str(data / "train.de"), "--valid-src", str(data / "valid.en"), "--valid-tgt", str(data / "valid.de"),
               "--out", str(out), "--teachers", "2", "--parallel", "2", "--teacher-epochs", "3",
               "--student-epochs", "2", "--train-args", TOY, "--eval-args", "--threads 1", *more]  # fmt: skip
    return command


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def commands(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("$ ")]


def epochs(run: Path) -> int:
    return json.loads((run / "train_state" / "state.json").read_text())["epoch"]


@pytest.fixture(scope="module")
def data(tmp_path_factory, pairs):
    dir_ = tmp_path_factory.mktemp("distil-data")
    write_corpus(dir_, pairs[:300], "train"), write_corpus(dir_, pairs[360:], "valid")
    return dir_


@pytest.fixture(scope="module")
def recipe(data, tmp_path_factory):
    """One whole run: (its directory, its result)."""
    out = tmp_path_factory.mktemp("distil") / "run"
    return out, run(distil(data, out))


def test_teachers_apart_then_their_translations_then_a_student_of_both_that_translates(recipe):
    out, done = recipe
    assert done.returncode == 0, done.stderr[-3000:]
    for i in (1, 2):
        metadata = json.loads((out / f"teacher-{i}" / "metadata.json").read_text())
        assert f"--seed {i}" in metadata["command"] and "--init-from" not in metadata["command"]
        assert epochs(out / f"teacher-{i}") == 3
    translations = (out / "teachers.beam.de").read_text().splitlines()
    assert len(translations) == 300 and not (out / "teachers.beam.de.partial").exists()
    (translate,) = commands(out / "logs" / "translations.log")
    assert re.search(r"--model-dir \S+/teacher-1 \S+/teacher-2 --src \S+/train\.en --beam 4 --length-penalty 1\.2",
                     translate)  # fmt: skip
    student = json.loads((out / "student" / "metadata.json").read_text())
    assert re.findall(r"--teacher (\S+)", student["command"]) == [str(out / "teacher-1"), str(out / "teacher-2")]
    assert student["started_from"]["checkpoint"] == str(out / "teacher-1") and "--kd-alpha 0.5" in student["command"]
    assert student["training_data"]["train_tgt"] == str(out / "teachers.beam.de") and student["target_language"] == "de"
    assert epochs(out / "student") == 2 and "--seed 3" in student["command"]
    model, tokenizer, _ = load_checkpoint(out / "student")
    (hypothesis,) = greedy_decode(model, batch([tokenizer.encode("A dog is running in the park.", "source")]), 30)
    assert hypothesis.finish_reason == "eos", "the toy student ends its sentences"
    assert "student: val BLEU" in done.stdout and "from 300 translations by 2 teachers" in done.stdout


def test_run_again_it_skips_what_is_done_and_goes_on_where_more_is_asked(recipe, data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(recipe[0], out)
    teacher = (out / "teacher-1" / "model.safetensors").read_bytes()
    again = run(distil(data, out, "--student-epochs", "3"))
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("teacher-1", "teacher-2", "translations"):
        assert len(commands(out / "logs" / f"{name}.log")) == 1, f"{name} ran again"
    assert (out / "teacher-1" / "model.safetensors").read_bytes() == teacher
    student_log = (out / "logs" / "student.log").read_text()
    assert len(commands(out / "logs" / "student.log")) == 2 and "resumed at epoch 3" in student_log
    assert epochs(out / "student") == 3


def test_a_student_of_another_shape_from_scratch_keeps_the_teachers_vocabulary(recipe, data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(recipe[0], out)
    shutil.rmtree(out / "student")
    shape = "--d-model 48 --heads 4 --d-ff 96 --encoder-layers 3 --decoder-layers 1"
    done = run(distil(data, out, "--student-from-scratch", f"--student-args={shape}"))
    assert done.returncode == 0, done.stderr[-3000:]
    model, _, metadata = load_checkpoint(out / "student")
    c = model.config
    assert (c.d_model, c.d_ff, c.n_encoder_layers, c.n_decoder_layers) == (48, 96, 3, 1)
    assert "started_from" not in metadata and len(re.findall(r"--teacher ", metadata["command"])) == 2
    assert "--warmup 800" in metadata["command"] and "--warmup 100" not in metadata["command"], "a teacher's schedule"
    assert (out / "student" / "tokenizer.json").read_text() == (out / "teacher-1" / "tokenizer.json").read_text()


def test_teachers_of_different_vocabularies_are_refused_before_they_translate(recipe, data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(recipe[0], out)
    (out / "teachers.beam.de").unlink()
    tokenizer = out / "teacher-2" / "tokenizer.json"
    spec = json.loads(tokenizer.read_text())
    vocab = spec["model"]["vocab"]
    piece = next(p for p in vocab if p.isalpha() and len(p) > 3)
    vocab[piece + "x"] = vocab.pop(piece)  # one piece spelled otherwise: another vocabulary
    tokenizer.write_text(json.dumps(spec))
    refused = run(distil(data, out))
    assert refused.returncode == 1 and "the teachers learned different vocabularies" in refused.stderr
    assert len(commands(out / "logs" / "translations.log")) == 1, "no second translation was started"


def test_a_failing_step_ends_the_run_with_its_log(data, tmp_path):
    failed = run(distil(data, tmp_path / "run", "--teacher-args=--no-such-option"))
    assert failed.returncode == 1
    assert "unrecognized arguments: --no-such-option" in failed.stderr
    assert re.search(r"teacher-[12] failed \(exit 2\)", failed.stderr), "the first teacher seen to fail, with its exit"
    assert not (tmp_path / "run" / "student").exists()


def test_a_failing_teacher_stops_the_others_with_their_state_saved(data, tmp_path):
    out = tmp_path / "run"
    (out / "teacher-2" / "train_state").mkdir(parents=True)
    (out / "teacher-2" / "train_state" / "state.json").write_text("{ cut short")  # a state nmt-train cannot resume
    failed = run(distil(data, out, "--teacher-epochs", "40"))
    assert failed.returncode == 1 and "teacher-2 failed (exit 1)" in failed.stderr
    assert "Traceback" in failed.stderr, "the failed step's last lines come with the message"
    assert "stopped by SIGTERM" in (out / "logs" / "teacher-1.log").read_text(), "teacher 1 stopped, not 40 epochs on"
    assert (out / "teacher-1" / "train_state" / "state.json").is_file()


def test_sigterm_stops_the_teachers_with_their_state_saved_and_a_run_again_finishes(data, tmp_path):
    """nmt-distil passes the signal on once: each teacher stops after its update in progress, its state saved."""
    out = tmp_path / "run"
    process = subprocess.Popen(distil(data, out, "--teacher-epochs", "40"), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    logs = [out / "logs" / f"teacher-{i}.log" for i in (1, 2)]
    for _ in range(600):  # until both teachers are training (their progress bars count steps)
        if all(log.exists() and re.search(r"\d+/\d+ \[", log.read_text()) for log in logs):
            break
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    for i in (1, 2):
        assert (out / f"teacher-{i}" / "train_state" / "state.json").is_file()
        assert "stopped by SIGTERM" in logs[i - 1].read_text()
    finished = run(distil(data, out, "--teacher-epochs", "4"))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert all("resumed at epoch" in log.read_text() for log in logs)


def test_a_student_option_out_of_range_is_refused_before_any_teacher_trains(data, tmp_path):
    """--kd-alpha was checked by the student's nmt-train, after every teacher had trained and translated."""
    refused = run(distil(data, tmp_path / "run", "--kd-alpha", "7"))
    assert refused.returncode == 2 and "--kd-alpha must lie between 0 and 1, not 7.0" in refused.stderr
    assert not (tmp_path / "run" / "teacher-1").exists()
    refused = run(distil(data, tmp_path / "run", "--teacher-args", '"unbalanced'))  # was shlex's traceback
    assert refused.returncode == 2 and "--teacher-args '\"unbalanced': No closing quotation" in refused.stderr


def test_teachers_trained_on_are_translated_again_and_teach_a_new_student(recipe, data, tmp_path):
    """More --teacher-epochs trained the teachers on, but the old translations and the old student were kept."""
    out = tmp_path / "run"
    shutil.copytree(recipe[0], out)
    before = {p: (out / p).read_bytes() for p in ("teacher-1/model.safetensors", "teacher-2/model.safetensors",
                                                   "teachers.beam.de", "student/model.safetensors")}  # fmt: skip
    again = run(distil(data, out, "--teacher-epochs", "5"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert any((out / p).read_bytes() != before[p] for p in list(before)[:2]), "a teacher validated better"
    assert len(commands(out / "logs" / "translations.log")) == 2
    assert "the teachers changed since" in again.stderr
    student_log = (out / "logs" / "student.log").read_text()
    assert len(commands(out / "logs" / "student.log")) == 2 and "resumed at epoch" not in student_log
    assert (out / "student" / "model.safetensors").read_bytes() != before["student/model.safetensors"]
    assert epochs(out / "student") == 2
