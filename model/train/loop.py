"""nmt-train's training loop: epochs of updates on batches of similar length, a validation and the state for
--resume at each epoch's end, a stop (time, steps, a signal) saving the state mid-epoch."""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable
from typing import TextIO

import torch
import torch.distributed as dist
from tqdm import tqdm

from model.train.bpe_dropout import epoch_pairs, forget_epoch_sources, save_epoch_sources
from model.train.data import collate, make_batches
from model.train.distributed import leave, stop_on_signals
from model.train.loss import batch_loss, teacher_probs
from model.train.run import Run, set_up
from model.train.state import save_state
from model.train.validate import end_epoch, try_average


def main(argv: list[str] | None = None) -> None:
    with stop_on_signals() as signals:
        run = set_up(argv)
        try:
            train(run, signals)
        except SystemExit as stop:  # a signal: 128 + its number
            if run.world == 1 or not isinstance(stop.code, int):
                raise
            leave(stop.code)
        if run.world > 1:
            leave(0)


def train(run: Run, signals: list[int]) -> None:
    """nmt-train's work once set up; a signal in `signals` stops it after the update in progress (stop_on_signals)."""
    args, info = run.args, run.info
    deadline = time.monotonic() + args.max_minutes * 60 if args.max_minutes else math.inf
    max_steps = args.max_steps or math.inf

    def stop_asked() -> bool:  # past --max-minutes, or signalled
        return time.monotonic() > deadline or bool(signals)

    steps_log = open(args.log_steps, "a", buffering=1) if args.log_steps and run.rank == 0 else None  # noqa: SIM115
    run.model.train()
    stopped = False
    while info["epoch"] < args.epochs and info["step"] < max_steps and not stopped:
        epoch = info["epoch"] + 1
        pairs = epoch_pairs(run, epoch)  # what the student reads this epoch; the teachers read run.train_pairs
        batches = make_batches(pairs, args.batch_tokens, seed=args.seed * 1000 + epoch)
        stopped, tokens_per_s = train_epoch(run, epoch, pairs, batches, stop_asked, max_steps, steps_log)
        if stopped and info["batch_in_epoch"] < len(batches):
            if run.rank == 0 and pairs is not run.train_pairs:  # before the state that says the epoch is under way
                save_epoch_sources(run.state_dir, epoch, pairs)
            if run.rank == 0:
                save_state(run.state_dir, run.model, run.optimizer, info)
            run.say(f"stopped mid-epoch {epoch} at step {info['step']}; state saved, --resume continues")
            break
        info["epoch"], info["batch_in_epoch"], info["epoch_step"] = epoch, 0, info["step"]
        if run.rank == 0:
            forget_epoch_sources(run.state_dir)
        if run.rank:
            continue  # rank 0 validates and writes; the others wait for it in the next step's collectives
        end_epoch(run, epoch, tokens_per_s)
    if steps_log:
        steps_log.close()
    if run.world > 1:
        # Wait for rank 0's last validation and writes, then tear down in order: DDP's reducer holds the group, and
        # a gloo group torn down under a busy peer's feet can abort the process.
        dist.barrier()
        run.net = run.model  # lets DDP go
        dist.destroy_process_group()
    if signals:  # no averaging: whoever sent the signal wants the process gone soon
        run.say(f"stopped by {signal.Signals(signals[0]).name} at step {info['step']}; state saved, --resume continues")
        sys.exit(128 + signals[0])
    if run.rank:
        return
    try_average(run)
    if not (run.out / "model.safetensors").is_file():  # stopped (--max-steps, --max-minutes) before an epoch's end
        run.say(f"nmt-train: no checkpoint in {run.out} yet: the run stopped at step {info['step']}, before its first "
                "epoch ended, where the first one is written; the same command with --resume and a higher --max-steps "
                "or --max-minutes goes on from there")  # fmt: skip
    print(
        json.dumps(
            {
                "best_valid_bleu": info["best_bleu"],
                "steps": info["step"],
                "epochs": info["epoch"],
                "seconds": round(info["seconds"], 1),
            }
        )
    )


def train_epoch(
    run: Run, epoch: int, pairs: list[tuple[list[int], list[int]]], batches: list[list[int]],
    stop_asked: Callable[[], bool], max_steps: float, steps_log: TextIO | None,
) -> tuple[bool, int]:  # fmt: skip
    """The epoch's batches from info["batch_in_epoch"] on, an update each, until the epoch ends or a rank asks to
    stop or --max-steps is reached -> (whether it stopped early, the target tokens trained on per second)."""
    info = run.info
    bar = tqdm(batches[info["batch_in_epoch"] :], desc=f"epoch {epoch}", mininterval=5, file=sys.stderr,
               disable=run.rank != 0)  # fmt: skip
    stopped, tokens_seen, t0, elapsed = False, 0, time.perf_counter(), 0.0
    for idx in bar:
        loss_sum, lr, tokens = update(run, pairs, idx)
        info["step"] += 1
        info["batch_in_epoch"] += 1
        tokens_seen += tokens
        totals = torch.stack([loss_sum.detach(), torch.tensor(float(stop_asked()), device=run.device)])
        if run.world > 1:
            dist.all_reduce(totals)  # the batch's loss; stop if any rank is past the deadline or was signalled
        loss, stop = totals.tolist()
        loss /= tokens
        elapsed = time.perf_counter() - t0
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_seen / elapsed:.0f}", refresh=False)
        if steps_log:
            steps_log.write(json.dumps({"step": info["step"], "epoch": epoch, "loss": loss, "lr": lr,
                                        "sentences": len(idx), "tokens": tokens}) + "\n")  # fmt: skip
        if stop or info["step"] >= max_steps:
            stopped = True
            break
    info["seconds"] += time.perf_counter() - t0
    return stopped, round(tokens_seen / max(elapsed, 1e-9))


def update(run: Run, pairs: list[tuple[list[int], list[int]]], idx: list[int]) -> tuple[torch.Tensor, float, int]:
    """One optimizer update on the global batch idx of pairs, of which this rank runs its share -> (this rank's loss
    summed over its target tokens, the learning rate, the target tokens in the whole batch)."""
    args, optimizer = run.args, run.optimizer
    # This rank's sentences: every world-th of the batch, which is sorted by length. A rank left without any (a batch
    # shorter than the world) runs one sentence with weight 0, for DDP's all-reduce.
    shard = idx[run.rank :: run.world]
    tokens = sum(len(run.train_pairs[i][1]) - 1 for i in idx)  # target tokens in the whole batch
    batch = collate(pairs, shard or idx[:1], run.pad_id)
    src, tgt_in, tgt_out = (t.to(run.device, non_blocking=True) for t in batch)
    teacher_src = src
    if run.teachers and pairs is not run.train_pairs:
        teacher_src = collate(run.train_pairs, shard or idx[:1], run.pad_id)[0].to(run.device, non_blocking=True)
    lr = lr_at(run.info["step"] + 1, args.lr, args.warmup)
    for g in optimizer.param_groups:
        g["lr"] = lr
    with run.autocast:
        teacher = teacher_probs(run.teachers, teacher_src, tgt_in) if run.teachers else None
        loss_sum = batch_loss(run.net, src, tgt_in, tgt_out, run.pad_id, args.label_smoothing, args.r_drop,
                              teacher, args.kd_alpha)  # fmt: skip
    loss_sum = loss_sum * bool(shard)
    optimizer.zero_grad(set_to_none=True)
    # DDP divides the ranks' summed gradients by world: this gives the gradient of the batch's mean loss.
    (loss_sum * (run.world / tokens)).backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), args.clip)
    optimizer.step()
    return loss_sum, lr, tokens


def lr_at(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to peak over warmup steps, then decay as 1/sqrt(step)."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))
