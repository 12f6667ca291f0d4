"""nmt-distil: the bundled model's recipe in one command — teachers trained apart, their ensemble's translations,
a student distilled from both (sequence- and word-level knowledge distillation, Kim and Rush, 2016).

It runs `nmt-train` and `nmt-eval` as they are, one process a step, each step's log in OUT/logs:
  1. N teachers from scratch (seeds 1..N), P at a time: OUT/teacher-1 ... OUT/teacher-N;
  2. the teachers' ensemble translates the training sources with beam search: OUT/teachers.beam.LANG;
  3. the student: teacher 1 fine-tuned on those translations, with the N teachers' next-token distributions beside
     them (`--teacher` N times), or a model of its own shape trained on them from scratch: OUT/student, a checkpoint
     `nmt-serve` serves.
Run again, it skips what is done and resumes what was stopped (`nmt-train --resume`); translations and a student made
from teachers that have changed since (more --teacher-epochs) are made again. SIGTERM or Ctrl-C stops the
steps in flight with their state saved (nmt-train's own stop), and it exits with 128 + the signal's number."""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from model.tokenizer import read_lines
from model.train.args import language_of

# The bundled model's settings (README, Training): a teacher is T0's command, the student s6's last step.
TEACHER = ("--d-model 256 --heads 4 --d-ff 1024 --encoder-layers 3 --decoder-layers 3 --dropout 0.2 "
           "--attention-dropout 0.1 --lr 4e-3 --warmup 800 --batch-tokens 6000 --average-last 5")  # fmt: skip
STUDENT = "--dropout 0.2 --attention-dropout 0.1 --lr 1.5e-3 --warmup 100 --batch-tokens 6000 --average-last 3"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nmt-distil", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    a = p.add_argument
    for name in ("train-src", "train-tgt", "valid-src", "valid-tgt"):
        a(f"--{name}", required=True, help="one sentence a line, plain or .gz (as nmt-train takes them)")
    a("--out", required=True, help="a directory for the teachers, the translations, the student and the logs")
    a("--teachers", type=int, default=3, help="teachers trained from scratch, seeds 1..N (default 3)")
    a("--parallel", type=int, default=1, help="teachers trained at a time (several share one GPU; on a CPU give each "
      "its cores with --train-args '--threads T')")  # fmt: skip
    a("--teacher-epochs", type=int, default=20)
    a("--student-epochs", type=int, default=6)
    a("--beam", type=int, default=4, help="the ensemble's beam for the student's training targets")
    a("--length-penalty", type=float, default=1.2)
    a("--kd-alpha", type=float, default=0.5, help="the student's share of word-level distillation (nmt-train's)")
    a("--student-from-scratch", action="store_true", help="train the student from random weights (its shape from "
      "--student-args, else the teachers' defaults; their settings, and the teachers' vocabulary) instead of "
      "fine-tuning teacher 1: give it a teacher's epochs too")  # fmt: skip
    a("--train-args", default="", help="more nmt-train options for every run, e.g. --train-args='--device cuda --bf16'")
    a("--teacher-args", default="", help=f"more nmt-train options for the teachers (after: {TEACHER})")
    a("--student-args", default="", help=f"more nmt-train options for the student (after: {STUDENT}; from scratch "
      "after the teachers' settings)")  # fmt: skip
    a("--eval-args", default="", help="more nmt-eval options for the translations, e.g. --eval-args='--device cuda'")
    args = p.parse_args(argv)
    if args.teachers < 1 or args.parallel < 1:
        p.error("--teachers and --parallel take a positive number")
    if not 0 <= args.kd_alpha <= 1:  # said now, not after the teachers' hours (nmt-train checks it for the student)
        p.error(f"--kd-alpha must lie between 0 and 1, not {args.kd_alpha}")
    for name in ("train_args", "teacher_args", "student_args", "eval_args"):  # each is split as a shell splits it
        try:
            shlex.split(getattr(args, name))
        except ValueError as e:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)!r}: {e}")
    return args


def tool(name: str) -> str:
    """This environment's nmt-train or nmt-eval (beside this one)."""
    path = Path(sysconfig.get_path("scripts")) / name
    return str(path) if path.is_file() else name


def finished(run: Path, epochs: int) -> bool:
    """Whether nmt-train has done `epochs` epochs in `run` (its state says so) and written the checkpoint."""
    try:
        done = json.loads((run / "train_state" / "state.json").read_text())["epoch"] >= epochs
    except (OSError, ValueError, KeyError):  # none yet, or unreadable: nmt-train says what is wrong with it
        return False
    return done and (run / "model.safetensors").is_file()


def identity(teachers: list[Path]) -> dict[str, str]:
    """Each teacher's checkpoint by the SHA-256 of its weights: what the translations and the student were made from
    (a teacher trained on for more epochs has new weights where it validated better)."""
    out = {}
    for t in teachers:
        digest = hashlib.sha256()
        with (t / "model.safetensors").open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[t.name] = digest.hexdigest()
    return out


def made_from(record: Path) -> dict | None:
    """The teachers' identity recorded at record (None: none recorded, as by a run before records were kept)."""
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None


class Steps:
    """Runs the steps' processes, each in a session of its own (a terminal's Ctrl-C reaches this one, which passes
    one signal on: nmt-train stops at the next update with its state saved), and says how each ended."""

    def __init__(self, logs: Path):
        self.logs, self.running, self.signals = logs, {}, []
        logs.mkdir(parents=True, exist_ok=True)
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self.stop)

    def stop(self, signum, frame) -> None:
        self.signals.append(signum)
        for process in self.running.values():
            process.send_signal(signum)

    def start(self, name: str, command: list[str]) -> None:
        log = (self.logs / f"{name}.log").open("a")
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        print(f"nmt-distil: {name} started (log: {log.name})", file=sys.stderr)
        self.running[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait(self) -> None:
        """Until every process has ended. The first failure stops the others (SIGTERM: their state saved) and ends
        nmt-distil with its log's last lines; a signal ends it once they have stopped."""
        failed = None
        while self.running:
            for name, process in list(self.running.items()):
                if process.poll() is None:
                    continue
                del self.running[name]
                if process.returncode and failed is None and not self.signals:
                    failed = (name, process.returncode)
                    for other in self.running.values():
                        other.send_signal(signal.SIGTERM)
                elif not process.returncode:
                    print(f"nmt-distil: {name} done", file=sys.stderr)
            time.sleep(0.2)
        if self.signals:
            sys.exit(128 + self.signals[0])
        if failed:
            tail = "".join((self.logs / f"{failed[0]}.log").read_text().splitlines(keepends=True)[-15:])
            sys.exit(f"{tail}nmt-distil: {failed[0]} failed (exit {failed[1]}); its log: {self.logs / failed[0]}.log")

    def run(self, name: str, command: list[str]) -> None:
        self.start(name, command)
        self.wait()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    steps = Steps(out / "logs")
    data = ["--train-src", args.train_src, "--valid-src", args.valid_src, "--valid-tgt", args.valid_tgt]
    train = [tool("nmt-train"), *data, "--resume"]
    teachers = [out / f"teacher-{i}" for i in range(1, args.teachers + 1)]

    waiting = [t for t in teachers if not finished(t, args.teacher_epochs)]
    while waiting:  # P at a time
        for teacher in waiting[: args.parallel]:
            steps.start(teacher.name, [*train, "--train-tgt", args.train_tgt, "--out", str(teacher),
                                       *shlex.split(TEACHER), "--epochs", str(args.teacher_epochs),
                                       "--seed", teacher.name.split("-")[1],
                                       *shlex.split(args.train_args), *shlex.split(args.teacher_args)])  # fmt: skip
        waiting = waiting[args.parallel :]
        steps.wait()
    vocabularies = {(t / "tokenizer.json").read_text() for t in teachers}
    if len(vocabularies) != 1:
        sys.exit("nmt-distil: the teachers learned different vocabularies (another --vocab-size, or other data?): "
                 "an ensemble and a student need one")  # fmt: skip

    # What was made from the teachers records which teachers: made from others (teachers trained on since), it is
    # made again, the translations and then the student (which also learns from the teachers' distributions).
    teachers_now = identity(teachers)
    targets = out / f"teachers.beam.{language_of(args.train_tgt)}"
    targets_from = targets.with_name(targets.name + ".teachers.json")
    if targets.is_file() and made_from(targets_from) != teachers_now:
        print(f"nmt-distil: the teachers changed since {targets} was translated: translating again", file=sys.stderr)
        targets.unlink()
    if not targets.is_file():  # written under another name, renamed when whole
        partial = targets.with_name(targets.name + ".partial")
        steps.run("translations", [tool("nmt-eval"), "--model-dir", *map(str, teachers), "--src", args.train_src,
                                   "--beam", str(args.beam), "--length-penalty", str(args.length_penalty),
                                   "--hyp-out", str(partial), *shlex.split(args.eval_args)])  # fmt: skip
        targets_from.write_text(json.dumps(teachers_now, indent=1))
        partial.rename(targets)

    student = out / "student"
    student_from = out / "student.teachers.json"  # beside, not in, the checkpoint nmt-train writes
    if student.exists() and made_from(student_from) != teachers_now:
        print(f"nmt-distil: the teachers changed since {student} was started: training it again", file=sys.stderr)
        shutil.rmtree(student)
    if not finished(student, args.student_epochs):
        student_from.write_text(json.dumps(teachers_now, indent=1))  # before it starts: a stopped one resumes on it
        distil = [arg for t in teachers for arg in ("--teacher", str(t))]
        start = TEACHER if args.student_from_scratch else f"--init-from {shlex.quote(str(teachers[0]))} {STUDENT}"
        steps.run("student", [*train, "--train-tgt", str(targets), "--out", str(student), *shlex.split(start),
                              *distil, "--kd-alpha", str(args.kd_alpha),
                              "--epochs", str(args.student_epochs), "--seed", str(args.teachers + 1),
                              *shlex.split(args.train_args), *shlex.split(args.student_args)])  # fmt: skip

    for run in [*teachers, student]:
        valid = json.loads((run / "metadata.json").read_text())["valid"]
        print(f"{run.name}: val BLEU {valid['valid_bleu']} (lowercased {valid['valid_bleu_lc']})")
    lines = sum(1 for _ in read_lines(targets))
    print(f"the student, {student}, learned from {lines:,} translations by {len(teachers)} teachers")


if __name__ == "__main__":
    main()
