"""A training run's setup: set_up builds the Run one process works with from nmt-train's flags, in an order that keeps
runs reproducible (the seeds first, then the tokenizer, the data, the model, the teachers, the optimizer, and the
state --resume continues from)."""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer
from torch.nn.parallel import DistributedDataParallel

from model.checkpoint import load_checkpoint, read_metadata
from model.tokenizer import Tokenizer, lines_or_exit
from model.train.args import check_args, language_of, parse_args
from model.train.distributed import init_distributed, share
from model.train.state import STATE, load_grown, load_state, read_state
from model.transformer import Transformer, TransformerConfig

# What a checkpoint trained with --init-from records of the one it started from (whose own may hold a "started_from")
STARTED_FROM = ("name", "command", "training_data", "steps", "epochs", "train_seconds", "valid", "started_from")


@dataclass
class Run:
    """What one process of a training run works with. Rank 0 alone validates, writes --out and talks."""

    args: argparse.Namespace
    command: str  # the command line, for the checkpoint's metadata
    rank: int
    world: int  # processes
    device: torch.device
    state_dir: Path  # --out/train_state: what --resume continues from
    tokenizer: Tokenizer
    train_pairs: list[tuple[list[int], list[int]]]  # (source ids, target ids), both within --max-len
    train_sources: list[str]  # those pairs' source sentences, which --bpe-dropout cuts anew each epoch
    valid_pairs: list[tuple[list[int], list[int]]]  # on rank 0; empty on the others
    valid_src: list[str]  # the first --valid-bleu-sentences, translated for BLEU
    valid_ref: list[str]
    model: Transformer
    net: torch.nn.Module  # what an update runs: the model, or DistributedDataParallel around it
    teachers: list[Transformer]  # --teacher
    optimizer: torch.optim.Optimizer
    autocast: torch.autocast  # --bf16
    info: dict  # the progress (new_info's keys), saved with the state
    started_from: dict | None  # --init-from: how that checkpoint was made (on rank 0)

    @property
    def out(self) -> Path:
        return Path(self.args.out)

    @property
    def pad_id(self) -> int:
        return self.model.config.pad_id

    def say(self, *words) -> None:
        """Prints to stderr on rank 0 (only rank 0 talks)."""
        if self.rank == 0:
            print(*words, file=sys.stderr)


def set_up(argv: list[str] | None) -> Run:
    """The Run nmt-train's arguments ask for: on every rank the same tokenizer, data and initial weights."""
    args = parse_args(argv)
    command = "nmt-train " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    rank, world, device = init_distributed(args)
    check_args(args, rank)  # before any work: the flags first, then the files
    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    state_dir = Path(args.out) / STATE

    train_src, train_tgt = lines_or_exit(args.train_src, "nmt-train"), lines_or_exit(args.train_tgt, "nmt-train")
    valid_src, valid_ref = lines_or_exit(args.valid_src, "nmt-train"), lines_or_exit(args.valid_tgt, "nmt-train")
    if len(train_src) != len(train_tgt) or len(valid_src) != len(valid_ref):
        sys.exit("nmt-train: source and target files must have the same number of lines")
    for flag, path, lines in (("--train-src", args.train_src, train_src), ("--valid-src", args.valid_src, valid_src)):
        if not lines:  # said now, not after an epoch (an empty validation set divided by zero there)
            sys.exit(f"nmt-train: {flag} {path} is empty: it needs at least one sentence pair")
    resuming = share(args.resume and (state_dir / "state.json").exists(), world)
    # The tokenizer, the same on every rank: the run's own when resuming, else one from a checkpoint, else a new one.
    init = Path(args.init_from) if args.init_from else None
    vocab_from = init or (Path(args.teacher[0]) if args.teacher else None)  # a student of teachers: their vocabulary
    if rank == 0 and resuming:
        tokenizer = Tokenizer.from_file(state_dir / "tokenizer.json")
    elif rank == 0 and vocab_from:
        tokenizer = Tokenizer.from_file(vocab_from / "tokenizer.json")
        state_dir.mkdir(parents=True, exist_ok=True)
        tokenizer.save(state_dir / "tokenizer.json")
    elif rank == 0:
        tokenizer = Tokenizer.train(train_src + train_tgt, vocab_size=args.vocab_size)
        state_dir.mkdir(parents=True, exist_ok=True)
        tokenizer.save(state_dir / "tokenizer.json")
    spec = share(tokenizer.hf.to_str() if rank == 0 else None, world)
    if rank:
        tokenizer = Tokenizer(HFTokenizer.from_str(spec))

    encoded = encode_pairs(tokenizer, train_src, train_tgt)
    kept = [i for i, p in enumerate(encoded) if max(map(len, p)) <= args.max_len]
    train_pairs, kept_src = [encoded[i] for i in kept], [train_src[i] for i in kept]
    del encoded
    if not train_pairs:  # else the run "succeeds" with an untrained model
        sys.exit(f"nmt-train: all {len(train_src):,} training pairs are longer than --max-len {args.max_len} tokens "
                 "on one side: nothing is left to train on; raise --max-len")  # fmt: skip
    valid_pairs = encode_pairs(tokenizer, valid_src, valid_ref) if rank == 0 else []
    if args.valid_bleu_sentences:
        valid_src, valid_ref = valid_src[: args.valid_bleu_sentences], valid_ref[: args.valid_bleu_sentences]

    model = Transformer(model_config(args, tokenizer, rank, world)).to(device)
    teachers = load_teachers(args, tokenizer, device)
    started_from = None  # --init-from: how that checkpoint was made, recorded in this one's metadata
    if init and rank == 0:
        started_from = {"checkpoint": str(init), **{k: v for k, v in read_metadata(init).items() if k in STARTED_FROM}}
    if init and rank == 0 and not resuming:  # DDP hands rank 0's weights to the others
        load_grown(model, load_checkpoint(init)[0])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay
    )
    info = new_info(args, model.config)
    if resuming:
        saved = share(read_state(state_dir) if rank == 0 else None, world)
        check_resumable(args, state_dir, saved[1], info)
        try:
            info = load_state(saved, model, optimizer)  # and the random numbers where the run stopped: its dropout
        except ValueError as e:  # a state saved before the shape was recorded, resumed with other shape flags
            sys.exit(f"nmt-train: {state_dir}: {e}")
        info.setdefault("shape", shape_of(model.config))
        if rank == 0:
            print(f"resumed at epoch {info['epoch'] + 1}, step {info['step']}", file=sys.stderr)
    if rank:
        torch.manual_seed(args.seed + rank)  # each rank's own dropout
    if rank == 0:
        say_unknown_languages(args)
        print(f"{model.num_parameters():,} parameters, {len(train_pairs):,} training pairs, "
              f"vocab {tokenizer.vocab_size}, {world} process(es)", file=sys.stderr)  # fmt: skip
    net = model if world == 1 else DistributedDataParallel(model)  # averages the ranks' gradients in backward
    return Run(
        args=args, command=command, rank=rank, world=world, device=device, state_dir=state_dir, tokenizer=tokenizer,
        train_pairs=train_pairs, train_sources=kept_src, valid_pairs=valid_pairs, valid_src=valid_src,
        valid_ref=valid_ref, model=model, net=net, teachers=teachers, optimizer=optimizer,
        autocast=torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16), info=info,
        started_from=started_from,
    )  # fmt: skip


def check_resumable(args: argparse.Namespace, state_dir: Path, saved: dict, new: dict) -> None:
    """Exits if the run saved in state_dir cannot go on under these flags: other batches (--seed, --batch-tokens) or
    another shape, whose weights do not fit the model the flags build (a tensor-size traceback)."""
    for key in ("seed", "batch_tokens"):
        if saved.setdefault(key, getattr(args, key)) != getattr(args, key):
            sys.exit(f"nmt-train: the run in {state_dir} has --{key.replace('_', '-')} {saved[key]}, "
                     f"not {getattr(args, key)}: resume with the same batches")  # fmt: skip
    if "shape" not in saved:  # saved before runs recorded their shape: its weights are checked as they load
        return
    differ = [f"--{flag} {saved['shape'][flag]}, not {value}" for flag, value in new["shape"].items()
              if saved["shape"].get(flag, value) != value]  # fmt: skip
    if differ:
        more = " (and --grow-encoder)" if args.init_from else ""
        sys.exit(f"nmt-train: the run in {state_dir} has {'; '.join(differ)}: resume with the shape flags{more} "
                 "it was started with")  # fmt: skip


def shape_of(config: TransformerConfig) -> dict:
    """The model's shape by the flags that set it, saved with the state (--resume refuses another)."""
    return {"d-model": config.d_model, "heads": config.n_heads, "encoder-layers": config.n_encoder_layers,
            "decoder-layers": config.n_decoder_layers, "d-ff": config.d_ff,
            "norm": "pre" if config.norm_first else "post", "activation": config.activation}  # fmt: skip


def say_unknown_languages(args: argparse.Namespace) -> None:
    """Says which language the metadata will call "unknown": a corpus file's name without a language code at its end
    (train.src rather than train.en) and no flag naming it."""
    for side, path, given in (("source", args.train_src, args.source_language),
                              ("target", args.train_tgt, args.target_language)):  # fmt: skip
        if not given and language_of(path) == "unknown":
            print(f"nmt-train: {path} does not end with a language code (as train.en or train.de.gz do): the "
                  f"checkpoint's {side} language will be \"unknown\"; give --{side}-language to name it",
                  file=sys.stderr)  # fmt: skip


def encode_pairs(tokenizer: Tokenizer, src: list[str], tgt: list[str]) -> list[tuple[list[int], list[int]]]:
    return list(zip(tokenizer.encode_batch(src, "source"), tokenizer.encode_batch(tgt, "target")))


def model_config(args: argparse.Namespace, tokenizer: Tokenizer, rank: int, world: int) -> TransformerConfig:
    """The shape the flags ask for; with --init-from, that checkpoint's (grown by --grow-encoder) and this run's
    dropout."""
    V = tokenizer.vocab_size
    config = TransformerConfig(
        src_vocab_size=V, tgt_vocab_size=V, d_model=args.d_model, n_heads=args.heads,
        n_encoder_layers=args.encoder_layers, n_decoder_layers=args.decoder_layers, d_ff=args.d_ff,
        dropout=args.dropout, attention_dropout=args.attention_dropout, activation_dropout=args.activation_dropout,
        norm_first=args.norm == "pre", activation=args.activation,
        pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, unk_id=tokenizer.unk_id,
    )  # fmt: skip
    if args.init_from:  # its shape and special ids; this run's dropout
        init = Path(args.init_from)
        dropouts = {k: getattr(args, k) for k in ("dropout", "attention_dropout", "activation_dropout")}
        config = TransformerConfig.from_dict({**share(json.loads((init / "config.json").read_text()) if rank == 0
                                                      else None, world), **dropouts})  # fmt: skip
        config.n_encoder_layers += args.grow_encoder
        if args.grow_encoder and not config.norm_first:
            sys.exit("nmt-train: --grow-encoder needs a pre-LN checkpoint: a post-LN layer is not the identity at zero")
    return config


def load_teachers(args: argparse.Namespace, tokenizer: Tokenizer, device: torch.device) -> list[Transformer]:
    """--teacher's checkpoints, frozen, in eval mode (no dropout); each must share the student's vocabulary."""
    teachers = []
    for t in args.teacher:
        teacher, teacher_tokenizer, _ = load_checkpoint(t, device)  # eval(): no dropout
        if teacher_tokenizer.hf.to_str() != tokenizer.hf.to_str():
            sys.exit(f"nmt-train: --teacher {t} has another vocabulary than the student's: distill into a "
                     "student with its vocabulary (--init-from a checkpoint of it, or from scratch)")  # fmt: skip
        teachers.append(teacher.requires_grad_(False))
    return teachers


def new_info(args: argparse.Namespace, config: TransformerConfig) -> dict:
    """A new run's progress (save_state writes it, --resume reads it back)."""
    return {
        "step": 0,
        "epoch": 0,
        "batch_in_epoch": 0,  # global batches: the same whatever the number of processes
        "seconds": 0.0,
        "best_bleu": -1.0,
        "history": [],
        "snapshots": [],
        "seed": args.seed,  # with --batch-tokens, fixes each epoch's batches and their order
        "batch_tokens": args.batch_tokens,
        "shape": shape_of(config),  # what the saved weights fit
    }
