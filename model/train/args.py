"""nmt-train: train a Transformer on a parallel corpus; resumable, seeded, keeps the best checkpoint.

Started by torchrun (`torchrun --nproc-per-node N -m model.train ...`), it trains with DistributedDataParallel: each
global batch of --batch-tokens is cut into N shards of its sentences and the update is the one-process update on
the whole batch, so the batches, the learning-rate schedule and --resume do not depend on N."""

# The docstring above is nmt-train's --help; this file is its command line: the flags, the checks on them, and the
# names a corpus file and a checkpoint directory are read by.

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from model.tokenizer import MIN_VOCAB


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nmt-train", description=__doc__)
    a = p.add_argument
    a("--train-src", required=True)
    a("--train-tgt", required=True)
    a("--valid-src", required=True)
    a("--valid-tgt", required=True)
    a("--out", required=True, help="checkpoint directory to write (best model + train_state/)")
    a("--source-language", help="language code in the metadata (default: from --train-src, e.g. train.en.gz -> en)")
    a("--target-language", help="language code in the metadata (default: from --train-tgt)")
    a("--init-from", metavar="DIR", help="start from this nmt-train checkpoint's weights, shape and vocabulary (the "
      "shape and --vocab-size flags are then ignored; dropout and the rest apply): fine-tuning, e.g. on a teacher's "
      "translations")  # fmt: skip
    a("--grow-encoder", type=int, default=0, metavar="N", help="with --init-from: add N encoder layers above the "
      "checkpoint's, each starting as the identity (its attention's and feed-forward's output projections zero), so "
      "that the grown model first translates exactly as the checkpoint does; the encoder runs once a sentence, so its "
      "depth costs far less to serve than the decoder's")  # fmt: skip
    a("--vocab-size", type=int, default=8000, help="joint BPE vocabulary incl. 256 byte tokens")
    a("--d-model", type=int, default=256)
    a("--heads", type=int, default=4)
    a("--encoder-layers", type=int, default=3)
    a("--decoder-layers", type=int, default=3)
    a("--d-ff", type=int, default=1024)
    a("--dropout", type=float, default=0.1)
    a("--attention-dropout", type=float, default=0.0)
    a("--activation-dropout", type=float, default=0.0)
    a("--norm", choices=["pre", "post"], default="pre")
    a("--activation", choices=["relu", "gelu"], default="relu")
    a("--label-smoothing", type=float, default=0.1)
    a("--r-drop", type=float, default=0.0, metavar="ALPHA", help="R-Drop: each sentence runs twice under different "
      "dropout, and ALPHA weighs the symmetric KL divergence of the two predictions (0 = off; 5 in the paper's "
      "translation runs); a step then costs about 2.5 times as much")  # fmt: skip
    a("--teacher", action="append", default=[], metavar="DIR", help="word-level knowledge distillation: this "
      "checkpoint (repeat for an ensemble, whose probabilities are averaged) predicts every target token beside the "
      "student, and the student also learns its distribution (see --kd-alpha). Teachers must share the student's "
      "vocabulary; a student trained from scratch takes the first teacher's. Each costs a forward pass a step")  # fmt: skip
    a("--bpe-dropout", type=float, default=0.0, metavar="P", help="BPE-dropout (Provilkov et al. 2020) on the "
      "source side: each epoch encodes the training sources anew, each BPE merge skipped with probability P (0.1 in "
      "the paper), so that the model reads a word cut in many ways. The targets, the teachers' inputs and validation "
      "keep the segmentation served (0 = off)")  # fmt: skip
    a("--kd-alpha", type=float, default=0.5, metavar="A", help="with --teacher: the loss is (1 - A) x the "
      "label-smoothed cross-entropy on the training targets + A x KL(teachers || student), per target token")  # fmt: skip
    a("--lr", type=float, default=4e-3, help="peak learning rate after warm-up")
    a("--warmup", type=int, default=1000, help="warm-up steps; then lr decays as 1/sqrt(step)")
    a("--weight-decay", type=float, default=0.0)
    a("--clip", type=float, default=1.0, help="gradient norm clipping")
    a("--batch-tokens", type=int, default=6000, help="source+target tokens per batch, padding included")
    a("--max-len", type=int, default=128, help="drop training pairs longer than this (tokens)")
    a("--epochs", type=int, default=30)
    a("--max-minutes", type=float, default=0.0, help="stop training after this long (0 = no limit)")
    a("--max-steps", type=int, default=0, help="stop after this many updates in all (0 = no limit); --resume continues")
    a("--log-steps", metavar="FILE", help="append one JSON line per update: step, epoch, loss, lr, sentences, tokens")
    a("--average-last", type=int, default=5, help="also try the average of the last N epoch checkpoints (0 = no "
      "averaging, and no epoch snapshots kept)")  # fmt: skip
    a("--valid-bleu-sentences", type=int, default=0, help="score BLEU on the first N validation lines (0 = all)")
    a("--bf16", action="store_true", help="bfloat16 autocast (CPUs with AVX-512 BF16, recent GPUs)")
    a("--threads", type=int, default=0, help="threads a process (0 = torch's default; the cores / N under torchrun)")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="under torchrun: cuda:LOCAL_RANK")
    a("--seed", type=int, default=1)
    a("--resume", action="store_true", help="continue from --out/train_state if it exists")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace, rank: int) -> None:
    """Exits with what is wrong if the flags ask for what nmt-train cannot do (rank 0 alone looks at the disk)."""
    init = Path(args.init_from) if args.init_from else None
    if init and rank == 0 and not written_by_nmt_train(init):
        sys.exit(
            f"nmt-train: --init-from {init} is not a checkpoint written by nmt-train (config.json, tokenizer.json)"
        )
    for t in args.teacher:
        if rank == 0 and not written_by_nmt_train(Path(t)):
            sys.exit(f"nmt-train: --teacher {t} is not a checkpoint written by nmt-train (config.json, tokenizer.json)")
    if rank == 0 and Path(args.out).exists() and not Path(args.out).is_dir():
        sys.exit(f"nmt-train: --out {args.out} is a file: give a directory to write the checkpoint in (new or not)")
    if args.grow_encoder and not (init and args.grow_encoder > 0):
        sys.exit("nmt-train: --grow-encoder takes a positive number of layers and needs --init-from")
    if not 0 <= args.bpe_dropout < 1:
        sys.exit(f"nmt-train: --bpe-dropout is a probability below 1, not {args.bpe_dropout}")
    if args.teacher and not 0 <= args.kd_alpha <= 1:
        sys.exit(f"nmt-train: --kd-alpha must lie between 0 and 1, not {args.kd_alpha}")
    if not args.init_from:  # this run's own shape (a student of teachers too: only its vocabulary is theirs)
        check_shape(args)
    if not (args.init_from or args.teacher) and args.vocab_size < MIN_VOCAB:  # this run's own vocabulary
        sys.exit(f"nmt-train: --vocab-size must be at least {MIN_VOCAB} (the 256 bytes and 4 special tokens)")
    if args.epochs < 1:
        sys.exit(f"nmt-train: --epochs must be at least 1, not {args.epochs} (a run of none writes no model)")
    check_settings(args)


def check_shape(args: argparse.Namespace) -> None:
    """Exits if the shape flags ask for a Transformer that cannot be built."""
    for flag in ("d_model", "d_ff", "encoder_layers", "decoder_layers"):
        if getattr(args, flag) < 1:
            sys.exit(f"nmt-train: --{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if args.heads < 1 or args.d_model % args.heads:
        sys.exit(f"nmt-train: --d-model {args.d_model} does not divide into --heads {args.heads} equal parts")


def check_settings(args: argparse.Namespace) -> None:
    """Exits if a training setting is out of its range (each was a traceback, or a run that silently did nothing)."""
    for flag in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
        if not 0 <= getattr(args, flag) < 1:
            sys.exit(f"nmt-train: --{flag.replace('_', '-')} is a probability: at least 0 and below 1, "
                     f"not {getattr(args, flag)}")  # fmt: skip
    if args.warmup < 1:  # lr_at divides by it
        sys.exit(f"nmt-train: --warmup must be at least 1 step, not {args.warmup}")
    for flag in ("batch_tokens", "max_len"):
        if getattr(args, flag) < 1:
            sys.exit(f"nmt-train: --{flag.replace('_', '-')} must be at least 1 token, not {getattr(args, flag)}")
    for flag, means in [("lr", "a learning rate of 0 or more"), ("weight_decay", "0 (none) or more"),
                        ("r_drop", "0 (off) or more"), ("max_minutes", "0 (no limit) or more"),
                        ("max_steps", "0 (no limit) or more"),
                        ("threads", "0 (torch's default) or more"), ("valid_bleu_sentences", "0 (all) or more"),
                        ("average_last", "0 (no averaging) or more epochs")]:  # fmt: skip
        if getattr(args, flag) < 0:
            sys.exit(f"nmt-train: --{flag.replace('_', '-')} takes {means}, not {getattr(args, flag)}")
    if args.clip <= 0:
        sys.exit(f"nmt-train: --clip is the largest gradient norm: above 0, not {args.clip}")


# Suffixes of 2 or 3 letters that name what a corpus file holds, not its language (model/ has no list of language
# codes: app/languages.py does, and model/ never imports app/)
NOT_LANGUAGES = frozenset({
    "src", "tgt", "trg", "txt", "raw", "tok", "bpe", "spm", "out", "ref", "hyp", "dat", "csv", "tsv", "xml", "sgm",
    "log", "tmp", "lc", "tc", "xz", "zst",
})  # fmt: skip


def language_of(path: str) -> str:
    """The language code a corpus file's name ends with (train.fr.gz -> fr), or "unknown" (train.src)."""
    name = Path(path).name.removesuffix(".gz")
    code = name.rsplit(".", 1)[-1] if "." in name else ""
    known = code.isalpha() and 2 <= len(code) <= 3 and code.lower() not in NOT_LANGUAGES
    return code if known else "unknown"


def written_by_nmt_train(dir_: Path) -> bool:
    """Whether dir_ holds a checkpoint nmt-train wrote (--init-from and --teacher take no other)."""
    return (dir_ / "config.json").is_file() and (dir_ / "tokenizer.json").is_file()
