"""torchrun: N processes (gloo, CPU) train as one does, resume under another N, and only rank 0 writes or talks."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from model.train import main as train_main
from tests.conftest import train_args

pytestmark = pytest.mark.slow  # tens of seconds: tests/conftest.py sends the file out early

ROOT = Path(__file__).resolve().parents[2]


def torchrun_command(n: int, args: list[str], log_dir: Path | None = None) -> list[str]:
    """`torchrun --nproc-per-node n -m model.train args` on a free port; log_dir keeps each rank's stdout/stderr."""
    logs = ["--log-dir", str(log_dir), "--redirects", "3"] if log_dir else []
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *logs]
    return [*run, "-m", "model.train", *args]


def torchrun(n: int, args: list[str], log_dir: Path | None = None) -> None:
    command = torchrun_command(n, args, log_dir)
    done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]


def steps(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def weights(out: Path) -> dict[str, torch.Tensor]:
    """The last weights, key biases zeroed: a shift common to every key leaves softmax, hence every output, as it
    is, so their exact gradient is 0 and Adam turns the rounding noise left in it into full-size steps."""
    tensors = {
        k: v for k, v in load_file(str(out / "train_state" / "last.safetensors")).items() if k.startswith("model.")
    }
    for k, v in tensors.items():
        if k.endswith("qkv_proj.bias"):
            v.view(3, -1)[1] = 0  # (q, k, v)
        elif k.endswith("kv_proj.bias"):
            v.view(2, -1)[0] = 0  # (k, v)
    return tensors


def assert_same_training(log: Path, out: Path, ref_log: Path, ref_out: Path) -> None:
    """The same batches in the same order, the same losses at every step and the same final weights."""
    got, want = steps(log), steps(ref_log)
    assert [(s["step"], s["epoch"], s["lr"], s["sentences"], s["tokens"]) for s in got] == [
        (s["step"], s["epoch"], s["lr"], s["sentences"], s["tokens"]) for s in want
    ]
    assert [s["loss"] for s in got] == pytest.approx([s["loss"] for s in want], rel=1e-5)
    torch.testing.assert_close(weights(out), weights(ref_out), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, pairs):
    """args(out, *extra) -> nmt-train arguments for 2 epochs of 12 batches; and the same run by one process (one/)
    and by two (two/, each rank's stdout and stderr in logs/)."""
    dir_ = tmp_path_factory.mktemp("ddp")
    base = train_args(dir_, pairs, dir_ / "unused", epochs=2)
    at = base.index("--out") + 1

    def args(out: Path, *extra: str) -> list[str]:
        return [*base[:at], str(out), *base[at + 1 :], "--log-steps", str(out.parent / f"{out.name}.jsonl"), *extra]

    train_main(args(dir_ / "one"))  # the default: one process, no torch.distributed
    assert not dist.is_initialized()
    torchrun(2, args(dir_ / "two"), log_dir=dir_ / "logs")
    return dir_, args


def test_two_processes_take_the_steps_one_process_takes(runs):
    dir_, _ = runs
    assert len(steps(dir_ / "one.jsonl")) == 24  # 2 epochs of 12 global batches, each logged once
    assert_same_training(dir_ / "two.jsonl", dir_ / "two", dir_ / "one.jsonl", dir_ / "one")


def test_only_rank_0_writes_files_and_output(runs):
    dir_, _ = runs
    files = {d: sorted(p.relative_to(dir_ / d) for p in (dir_ / d).rglob("*")) for d in ("one", "two")}
    assert files["two"] == files["one"]
    assert json.loads((dir_ / "two" / "metadata.json").read_text())["processes"] == 2
    (rank0,), (rank1,) = ([p for p in (dir_ / "logs").rglob(f"attempt_0/{r}")] for r in (0, 1))
    assert (rank1 / "stdout.log").read_text() == (rank1 / "stderr.log").read_text() == ""
    err = (rank0 / "stderr.log").read_text()
    assert err.count("training pairs") == 1 and "epoch 2" in err and err.count('{"epoch": 2,') == 1
    assert json.loads((rank0 / "stdout.log").read_text())["steps"] == 24


def test_one_process_stopped_resumes_under_two(runs):
    dir_, args = runs
    train_main(args(dir_ / "1to2", "--max-steps", "7"))  # mid-epoch 1
    state = json.loads((dir_ / "1to2" / "train_state" / "state.json").read_text())
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (7, 0, 7)
    with pytest.raises(SystemExit, match="--seed 1, not 2"):
        train_main([*args(dir_ / "1to2"), "--seed", "2", "--resume"])
    torchrun(2, args(dir_ / "1to2", "--resume"))
    assert_same_training(dir_ / "1to2.jsonl", dir_ / "1to2", dir_ / "one.jsonl", dir_ / "one")


def test_two_processes_stopped_resume_under_one(runs):
    dir_, args = runs
    torchrun(2, args(dir_ / "2to1", "--max-steps", "17"))  # mid-epoch 2, after rank 0 validated epoch 1
    train_main(args(dir_ / "2to1", "--resume"))
    assert_same_training(dir_ / "2to1.jsonl", dir_ / "2to1", dir_ / "one.jsonl", dir_ / "one")
    history = json.loads((dir_ / "2to1" / "train_state" / "state.json").read_text())["history"]
    assert [(h["epoch"], h["step"]) for h in history] == [(1, 12), (2, 24)]


def test_a_rank_without_sentences_still_takes_its_part(runs):
    """Batches of one sentence: rank 1 runs one with weight 0 each step, so the update is still the batch's."""
    dir_, args = runs
    train_main(args(dir_ / "one-small", "--batch-tokens", "20", "--max-steps", "4"))
    torchrun(2, args(dir_ / "two-small", "--batch-tokens", "20", "--max-steps", "4"))
    assert [s["sentences"] for s in steps(dir_ / "two-small.jsonl")] == [1, 1, 1, 1]
    assert_same_training(dir_ / "two-small.jsonl", dir_ / "two-small", dir_ / "one-small.jsonl", dir_ / "one-small")


def test_a_signal_stops_one_process_after_its_update_and_resume_goes_on_as_the_run_would_have(runs, monkeypatch):
    """SIGTERM or Ctrl-C: the update in progress ends, the state is saved, the process exits 128 + the signal's
    number, its signal handlers as they were; --resume then takes the steps the uninterrupted run took."""
    from model.train import loop

    dir_, args = runs
    lr_at, before = loop.lr_at, signal.getsignal(signal.SIGTERM)

    def signalled(step: int, peak: float, warmup: int) -> float:  # asked at the start of each update
        if step == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return lr_at(step, peak, warmup)

    monkeypatch.setattr(loop, "lr_at", signalled)
    with pytest.raises(SystemExit) as stopped:
        train_main(args(dir_ / "signalled"))
    assert stopped.value.code == 128 + signal.SIGTERM and signal.getsignal(signal.SIGTERM) is before
    state = json.loads((dir_ / "signalled" / "train_state" / "state.json").read_text())
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (6, 0, 6)
    monkeypatch.undo()
    train_main(args(dir_ / "signalled", "--resume"))
    assert_same_training(dir_ / "signalled.jsonl", dir_ / "signalled", dir_ / "one.jsonl", dir_ / "one")


def test_sigterm_to_torchrun_stops_every_rank_with_the_state_saved(runs):
    """As a scheduler stops a job: SIGTERM to torchrun, which passes it on to its processes; they stop after the
    same update, rank 0 saves the state at it, and --resume (here in one process) goes on from the next step."""
    dir_, args = runs
    out, log = dir_ / "preempted", dir_ / "preempted.jsonl"
    job = subprocess.Popen(torchrun_command(2, args(out, "--epochs", "200")), cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and len(log.read_text().splitlines()) >= 3):
            assert job.poll() is None and time.monotonic() < deadline, "no updates were logged"
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode != 0  # torchrun says it was stopped
    assert "stopped by SIGTERM" in err and "state saved, --resume continues" in err
    state = json.loads((out / "train_state" / "state.json").read_text())
    logged = steps(log)
    assert 3 <= state["step"] == logged[-1]["step"] < 200 * 12  # the last update logged is the one saved
    assert state["batch_in_epoch"] == state["step"] - 12 * state["epoch"]
    train_main(args(out, "--epochs", "200", "--resume", "--max-steps", str(state["step"] + 2)))
    assert [s["step"] for s in steps(log)[len(logged) :]] == [state["step"] + 1, state["step"] + 2]
