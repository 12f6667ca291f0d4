"""Validation and the checkpoints it chooses (on rank 0): at each epoch's end the loss and BLEU on the validation
set, the model written to --out when it is the best yet; at the run's end, the average of the last epochs' weights
if that validates better."""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from model.checkpoint import save_checkpoint, unique_state_dict
from model.evaluate import score, translate_corpus
from model.train.args import language_of
from model.train.data import collate, make_batches
from model.train.run import Run
from model.train.state import average_snapshots, save_snapshot, save_state


def validate(model, tokenizer, valid_pairs, valid_src, valid_ref, pad_id, device) -> dict:
    """The loss per target token on valid_pairs, the scores of valid_src's greedy translations against valid_ref,
    and the first three translations ("samples")."""
    model.eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for idx in make_batches(valid_pairs, 8000, seed=0):
            src, tgt_in, tgt_out = (t.to(device) for t in collate(valid_pairs, idx, pad_id))
            logits = model(src, tgt_in)
            total += F.cross_entropy(
                logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=pad_id, reduction="sum"
            ).item()
            count += (tgt_out != pad_id).sum().item()
    hyps = translate_corpus(model, tokenizer, valid_src)
    model.train()
    return {
        "valid_loss": round(total / count, 4),
        **{f"valid_{k}": v for k, v in score(hyps, valid_ref).items()},
        "samples": hyps[:3],
    }


def validate_run(run: Run) -> dict:
    return validate(run.model, run.tokenizer, run.valid_pairs, run.valid_src, run.valid_ref, run.pad_id, run.device)


def end_epoch(run: Run, epoch: int, tokens_per_s: int) -> None:
    """After the epoch's last update: its snapshot, its validation in the history, the best checkpoint, the state."""
    args, info = run.args, run.info
    info["snapshots"] = save_snapshot(run.state_dir, run.model, epoch, info["snapshots"], args.average_last)
    metrics = validate_run(run)
    info["history"].append({"epoch": epoch, "step": info["step"], "seconds": round(info["seconds"], 1),
                            "train_tokens_per_s": tokens_per_s,
                            **{k: v for k, v in metrics.items() if k != "samples"}})  # fmt: skip
    run.say(json.dumps(info["history"][-1]))
    for s in metrics["samples"]:
        run.say("   sample:", s)
    if metrics["valid_bleu"] > info["best_bleu"]:
        info["best_bleu"] = metrics["valid_bleu"]
        save_best(run, metrics)
    save_state(run.state_dir, run.model, run.optimizer, info)


def try_average(run: Run) -> None:
    """Checkpoint averaging: keeps the average of the last snapshots if it validates better; the model keeps its
    own weights."""
    info = run.info
    if len(info["snapshots"]) <= 1:
        return
    live = {k: v.clone() for k, v in unique_state_dict(run.model).items()}
    avg = average_snapshots([run.state_dir / s for s in info["snapshots"]])
    with torch.no_grad():
        for k, t in unique_state_dict(run.model).items():
            t.copy_(avg[k])
    metrics = validate_run(run)
    print(
        json.dumps({"averaged": info["snapshots"], **{k: v for k, v in metrics.items() if k != "samples"}}),
        file=sys.stderr,
    )
    if metrics["valid_bleu"] > info["best_bleu"]:
        info["best_bleu"] = metrics["valid_bleu"]
        metrics["averaged_epochs"] = info["snapshots"]
        save_best(run, metrics)
    with torch.no_grad():
        for k, t in unique_state_dict(run.model).items():
            t.copy_(live[k])


def save_best(run: Run, metrics: dict) -> None:
    """Writes the model to --out as a checkpoint, with how it was trained and validated in its metadata."""
    args, info = run.args, run.info
    meta = {
        "name": run.out.name,
        "source_language": args.source_language or language_of(args.train_src),
        "target_language": args.target_language or language_of(args.train_tgt),
        "training_data": {"train_src": args.train_src, "train_tgt": args.train_tgt,
                          "valid_src": args.valid_src, "valid_tgt": args.valid_tgt, "pairs": len(run.train_pairs)},
        "command": run.command, "processes": run.world, "steps": info.get("epoch_step", info["step"]),
        "epochs": info["epoch"], "train_seconds": round(info["seconds"], 1),
        "parameters": run.model.num_parameters(), "valid": {k: v for k, v in metrics.items() if k != "samples"},
    }  # fmt: skip
    if args.init_from:
        meta["started_from"] = run.started_from
    if run.teachers:
        meta["distillation"] = {"teachers": args.teacher, "kd_alpha": args.kd_alpha}
    save_checkpoint(run.out, run.model, run.tokenizer, meta)
