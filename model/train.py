"""nmt-train: train a Transformer on a parallel corpus; resumable, seeded, keeps the best checkpoint.

Started by torchrun (`torchrun --nproc-per-node N -m model.train ...`), it trains with DistributedDataParallel: each
global batch of --batch-tokens is cut into N shards of its sentences and the update is the one-process update on
the whole batch, so the batches, the learning-rate schedule and --resume do not depend on N."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer as HFTokenizer
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from model.checkpoint import save_checkpoint, unique_state_dict
from model.evaluate import score, translate_corpus
from model.tokenizer import Tokenizer, read_lines
from model.transformer import Transformer, TransformerConfig

STATE = "train_state"  # subdirectory of --out holding what resuming needs
# What a checkpoint trained with --init-from records of the one it started from (whose own may hold a "started_from")
STARTED_FROM = ("name", "command", "training_data", "steps", "epochs", "train_seconds", "valid", "started_from")


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
    a("--average-last", type=int, default=5, help="also try the average of the last N epoch checkpoints")
    a("--valid-bleu-sentences", type=int, default=0, help="score BLEU on the first N validation lines (0 = all)")
    a("--bf16", action="store_true", help="bfloat16 autocast (CPUs with AVX-512 BF16, recent GPUs)")
    a("--threads", type=int, default=0, help="threads a process (0 = torch's default; the cores / N under torchrun)")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="under torchrun: cuda:LOCAL_RANK")
    a("--seed", type=int, default=1)
    a("--resume", action="store_true", help="continue from --out/train_state if it exists")
    return p.parse_args(argv)


def language_of(path: str) -> str:
    """The language code a corpus file's name ends with (train.fr.gz -> fr), or "unknown"."""
    name = Path(path).name.removesuffix(".gz")
    code = name.rsplit(".", 1)[-1] if "." in name else ""
    return code if code.isalpha() and 2 <= len(code) <= 3 else "unknown"


def written_by_nmt_train(dir_: Path) -> bool:
    """Whether dir_ holds a checkpoint nmt-train wrote (--init-from and --teacher take no other)."""
    return (dir_ / "config.json").is_file() and (dir_ / "tokenizer.json").is_file()


def make_batches(pairs: list[tuple[list[int], list[int]]], batch_tokens: int, seed: int) -> list[list[int]]:
    """Indices grouped by similar length so that (rows x longest side) stays under batch_tokens."""
    rng = random.Random(seed)
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]) + rng.random(), len(pairs[i][1])))
    batches, cur, longest = [], [], 0
    for i in order:
        n = max(len(pairs[i][0]), len(pairs[i][1]))
        if cur and (len(cur) + 1) * max(longest, n) * 2 > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(pairs, idx: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> src (B, S), tgt_in (B, T) = <s> y, tgt_out (B, T) = y </s>"""
    s_len = max(len(pairs[i][0]) for i in idx)
    t_len = max(len(pairs[i][1]) for i in idx) - 1
    src = torch.full((len(idx), s_len), pad_id, dtype=torch.long)
    tgt = torch.full((len(idx), t_len + 1), pad_id, dtype=torch.long)
    for r, i in enumerate(idx):
        s, t = pairs[i]
        src[r, : len(s)] = torch.tensor(s)
        tgt[r, : len(t)] = torch.tensor(t)
    return src, tgt[:, :-1], tgt[:, 1:]


def dropout_sources(tokenizer: Tokenizer, texts: list[str], p: float) -> list[list[int]]:
    """texts' source-side ids under BPE-dropout p: each merge skipped with probability p, drawn afresh each call (the
    library's own random numbers, which no seed fixes). A copy of the tokenizer draws them: the caller's keeps its
    deterministic merges."""
    dropped = Tokenizer(HFTokenizer.from_str(tokenizer.hf.to_str()))
    dropped.hf.model.dropout = p
    return dropped.encode_batch(texts, "source")


def teacher_probs(teachers: list, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """(B, T, V): the teachers' next-token distributions, averaged (an ensemble averages probabilities)."""
    with torch.no_grad():  # not inference_mode: the result is a constant inside the student's autograd graph
        return sum(t(src, tgt_in).float().softmax(-1) for t in teachers) / len(teachers)


def batch_loss(
    net, src, tgt_in, tgt_out, pad_id: int, label_smoothing: float, r_drop: float = 0.0,
    teacher: torch.Tensor | None = None, kd_alpha: float = 0.0,
) -> torch.Tensor:  # fmt: skip
    """The batch's loss summed over its target tokens. With teacher, the teachers' distributions (B, T, V) for each
    target token (word-level knowledge distillation, Kim & Rush 2016): (1 - kd_alpha) x the cross-entropy +
    kd_alpha x KL(teacher || student). With r_drop > 0 (R-Drop, Liang et al. 2021, as its fairseq code): the batch
    runs twice under different dropout; the mean of the two losses plus r_drop times the mean of KL(p1 || p2) and
    KL(p2 || p1) of the two predicted distributions, per target token."""
    if r_drop:
        src, tgt_in = torch.cat([src, src]), torch.cat([tgt_in, tgt_in])
    logits = net(src, tgt_in).float()  # (B or 2B, T, V)
    gold = torch.cat([tgt_out, tgt_out]) if r_drop else tgt_out
    loss = F.cross_entropy(
        logits.flatten(0, 1), gold.flatten(), ignore_index=pad_id, label_smoothing=label_smoothing, reduction="sum"
    )
    if teacher is not None:
        pt = torch.cat([teacher, teacher]) if r_drop else teacher
        kd = (pt * (pt.clamp_min(1e-30).log() - logits.log_softmax(-1))).sum(-1)  # (B or 2B, T): KL(pt || student)
        loss = (1 - kd_alpha) * loss + kd_alpha * kd.masked_fill(gold == pad_id, 0.0).sum()
    if not r_drop:
        return loss
    lp1, lp2 = logits.log_softmax(-1).chunk(2)  # (B, T, V) each
    kl = (lp1.exp() * (lp1 - lp2) + lp2.exp() * (lp2 - lp1)).sum(-1)  # (B, T): KL(p1||p2) + KL(p2||p1)
    kl = kl.masked_fill(tgt_out == pad_id, 0.0).sum()
    return (loss + r_drop * kl / 2) / 2


def load_grown(model: Transformer, start: Transformer) -> None:
    """model <- start's weights, where model may have more encoder layers than start: those, above start's, keep their
    initialisation but for the output projections of their attention and feed-forward, which are zeroed. In a pre-LN
    layer the residual then carries its input through unchanged, so model computes what start computes (and learns
    the new layers from there, as ReZero and Fixup start their residual branches at zero). Post-LN layers are not
    the identity at zero: the caller refuses them."""
    missing, unexpected = model.load_state_dict(start.state_dict(), strict=False)
    grown = tuple(f"encoder_layers.{i}." for i in range(start.config.n_encoder_layers, model.config.n_encoder_layers))
    if unexpected or any(not k.startswith(grown) for k in missing):
        raise ValueError(f"cannot grow {start.config} into {model.config}: {unexpected or missing}")
    with torch.no_grad():
        for layer in model.encoder_layers[start.config.n_encoder_layers :]:
            for linear in (layer.self_attn.out_proj, layer.ffn.w2):
                linear.weight.zero_()
                linear.bias.zero_()


def lr_at(step: int, peak: float, warmup: int) -> float:
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def save_state(dir_: Path, model, optimizer, info: dict) -> None:
    dir_.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in unique_state_dict(model).items()}
    opt = optimizer.state_dict()
    for pid, st in opt["state"].items():
        for k, v in st.items():
            tensors[f"opt.{pid}.{k}"] = v.detach().cpu().reshape(v.shape).contiguous()
    save_file(tensors, str(dir_ / "last.safetensors.tmp"))
    (dir_ / "last.safetensors.tmp").replace(dir_ / "last.safetensors")
    info = {**info, "param_groups": opt["param_groups"], "python_rng": repr(random.getstate())}
    (dir_ / "state.json").write_text(json.dumps(info, indent=1))


def read_state(dir_: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The saved weights, optimizer state and progress (on the CPU), for load_state."""
    return load_file(str(dir_ / "last.safetensors")), json.loads((dir_ / "state.json").read_text())


def load_state(saved: tuple[dict[str, torch.Tensor], dict], model, optimizer) -> dict:
    tensors, info = saved
    model_sd = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    target = unique_state_dict(model)
    with torch.no_grad():
        for k, t in target.items():
            t.copy_(model_sd[k])
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})
    return info


def init_distributed(args: argparse.Namespace) -> tuple[int, int, torch.device]:
    """(rank, world size, device). One process unless torchrun started this one (WORLD_SIZE in the environment):
    then gloo on the CPU, each process with its share of the machine's cores, or NCCL with one GPU a process."""
    device = torch.device(args.device)
    if "WORLD_SIZE" not in os.environ:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    elif not args.threads:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        args.threads = max(1, cores // int(os.environ["LOCAL_WORLD_SIZE"]))
    # Rank 0 validates and writes at the end of an epoch while the others wait in the next step's collectives.
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=2))
    return dist.get_rank(), dist.get_world_size(), device


def share(obj, world: int):
    """Rank 0's obj, on every rank (pickled through the process group: --out need only exist where rank 0 runs)."""
    if world == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """SIGTERM and SIGINT (Ctrl-C, a scheduler taking the machine back, torchrun passing its own on) ask the run to
    stop after the update in progress, its state saved for --resume: the signals received are appended to the list
    yielded. A second one stops at once, as without this. The handlers before are put back on the way out."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield got
        return

    def handler(signum: int, frame) -> None:
        if got:  # asked twice: stop now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        got.append(signum)

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield got
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def average_snapshots(paths: list[Path]) -> dict[str, torch.Tensor]:
    avg: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_file(str(p)).items():
            avg[k] = avg.get(k, 0) + v.float() / len(paths)
    return avg


def validate(model, tokenizer, valid_pairs, valid_src, valid_ref, pad_id, device) -> dict:
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


def main(argv: list[str] | None = None) -> None:
    with stop_on_signals() as signals:
        train(argv, signals)


def train(argv: list[str] | None, signals: list[int]) -> None:
    """nmt-train's work; a signal in `signals` stops it after the update in progress (stop_on_signals)."""
    args = parse_args(argv)
    command = "nmt-train " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    rank, world, device = init_distributed(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    out, state_dir = Path(args.out), Path(args.out) / STATE

    def say(*words) -> None:  # only rank 0 talks
        if rank == 0:
            print(*words, file=sys.stderr)

    train_src, train_tgt = list(read_lines(args.train_src)), list(read_lines(args.train_tgt))
    valid_src, valid_ref = list(read_lines(args.valid_src)), list(read_lines(args.valid_tgt))
    if len(train_src) != len(train_tgt) or len(valid_src) != len(valid_ref):
        sys.exit("nmt-train: source and target files must have the same number of lines")
    resuming = share(args.resume and (state_dir / "state.json").exists(), world)
    init = Path(args.init_from) if args.init_from else None
    if init and rank == 0 and not written_by_nmt_train(init):
        sys.exit(
            f"nmt-train: --init-from {init} is not a checkpoint written by nmt-train (config.json, tokenizer.json)"
        )
    for t in args.teacher:
        if rank == 0 and not written_by_nmt_train(Path(t)):
            sys.exit(f"nmt-train: --teacher {t} is not a checkpoint written by nmt-train (config.json, tokenizer.json)")
    if args.grow_encoder and not (init and args.grow_encoder > 0):
        sys.exit("nmt-train: --grow-encoder takes a positive number of layers and needs --init-from")
    if not 0 <= args.bpe_dropout < 1:
        sys.exit(f"nmt-train: --bpe-dropout is a probability below 1, not {args.bpe_dropout}")
    if args.teacher and not 0 <= args.kd_alpha <= 1:
        sys.exit(f"nmt-train: --kd-alpha must lie between 0 and 1, not {args.kd_alpha}")
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

    def encode_pairs(src, tgt):
        return list(zip(tokenizer.encode_batch(src, "source"), tokenizer.encode_batch(tgt, "target")))

    encoded = encode_pairs(train_src, train_tgt)
    kept = [i for i, p in enumerate(encoded) if max(map(len, p)) <= args.max_len]
    train_pairs, kept_src = [encoded[i] for i in kept], [train_src[i] for i in kept]
    del encoded
    valid_pairs = encode_pairs(valid_src, valid_ref) if rank == 0 else []
    if args.valid_bleu_sentences:
        valid_src, valid_ref = valid_src[: args.valid_bleu_sentences], valid_ref[: args.valid_bleu_sentences]

    V = tokenizer.vocab_size
    config = TransformerConfig(
        src_vocab_size=V, tgt_vocab_size=V, d_model=args.d_model, n_heads=args.heads,
        n_encoder_layers=args.encoder_layers, n_decoder_layers=args.decoder_layers, d_ff=args.d_ff,
        dropout=args.dropout, attention_dropout=args.attention_dropout, activation_dropout=args.activation_dropout,
        norm_first=args.norm == "pre", activation=args.activation,
        pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, unk_id=tokenizer.unk_id,
    )  # fmt: skip
    if init:  # its shape and special ids; this run's dropout
        dropouts = {k: getattr(args, k) for k in ("dropout", "attention_dropout", "activation_dropout")}
        config = TransformerConfig.from_dict({**share(json.loads((init / "config.json").read_text()) if rank == 0
                                                      else None, world), **dropouts})  # fmt: skip
        config.n_encoder_layers += args.grow_encoder
        if args.grow_encoder and not config.norm_first:
            sys.exit("nmt-train: --grow-encoder needs a pre-LN checkpoint: a post-LN layer is not the identity at zero")
    model = Transformer(config).to(device)
    teachers = []
    if args.teacher:
        from model.checkpoint import load_checkpoint

        for t in args.teacher:
            teacher, teacher_tokenizer, _ = load_checkpoint(t, device)  # eval(): no dropout
            if teacher_tokenizer.hf.to_str() != tokenizer.hf.to_str():
                sys.exit(f"nmt-train: --teacher {t} has another vocabulary than the student's: distill into a "
                         "student with its vocabulary (--init-from a checkpoint of it, or from scratch)")  # fmt: skip
            teachers.append(teacher.requires_grad_(False))
    started_from = None  # --init-from: how that checkpoint was made, recorded in this one's metadata
    if init and rank == 0:
        from model.checkpoint import read_metadata

        started_from = {"checkpoint": str(init), **{k: v for k, v in read_metadata(init).items() if k in STARTED_FROM}}
    if init and rank == 0 and not resuming:  # DDP hands rank 0's weights to the others
        from model.checkpoint import load_checkpoint

        load_grown(model, load_checkpoint(init)[0])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay
    )
    info = {
        "step": 0,
        "epoch": 0,
        "batch_in_epoch": 0,  # global batches: the same whatever the number of processes
        "seconds": 0.0,
        "best_bleu": -1.0,
        "history": [],
        "snapshots": [],
        "seed": args.seed,  # with --batch-tokens, fixes each epoch's batches and their order
        "batch_tokens": args.batch_tokens,
    }
    if resuming:
        info = load_state(share(read_state(state_dir) if rank == 0 else None, world), model, optimizer)
        for key in ("seed", "batch_tokens"):
            if info.setdefault(key, getattr(args, key)) != getattr(args, key):
                sys.exit(f"nmt-train: the run in {state_dir} has --{key.replace('_', '-')} {info[key]}, "
                         f"not {getattr(args, key)}: resume with the same batches")  # fmt: skip
        say(f"resumed at epoch {info['epoch'] + 1}, step {info['step']}")
    if rank:
        torch.manual_seed(args.seed + rank)  # each rank's own dropout
    say(f"{model.num_parameters():,} parameters, {len(train_pairs):,} training pairs, vocab {V}, {world} process(es)")
    net = model if world == 1 else DistributedDataParallel(model)  # averages the ranks' gradients in backward

    def save_best(metrics: dict) -> None:
        meta = {
            "name": out.name,
            "source_language": args.source_language or language_of(args.train_src),
            "target_language": args.target_language or language_of(args.train_tgt),
            "training_data": {"train_src": args.train_src, "train_tgt": args.train_tgt,
                              "valid_src": args.valid_src, "valid_tgt": args.valid_tgt, "pairs": len(train_pairs)},
            "command": command, "processes": world, "steps": info.get("epoch_step", info["step"]),
            "epochs": info["epoch"], "train_seconds": round(info["seconds"], 1), "parameters": model.num_parameters(),
            "valid": {k: v for k, v in metrics.items() if k != "samples"},
        }  # fmt: skip
        if init:
            meta["started_from"] = started_from
        if teachers:
            meta["distillation"] = {"teachers": args.teacher, "kd_alpha": args.kd_alpha}
        save_checkpoint(out, model, tokenizer, meta)

    sources_file = state_dir / "epoch_sources.json"  # --bpe-dropout: the sources of the epoch a run stopped in

    def epoch_sources(epoch: int) -> list[list[int]]:
        """The training sources under BPE-dropout for this epoch, drawn by rank 0 and shared; resuming mid-epoch,
        those the stopped run drew, so that the rest of the epoch's batches are the ones it would have taken."""
        drawn = None
        if rank == 0 and info["batch_in_epoch"] and sources_file.exists():
            saved = json.loads(sources_file.read_text())
            drawn = saved["sources"] if saved["epoch"] == epoch else None
        if rank == 0 and drawn is None:  # a source cut past --max-len keeps its served pieces
            drawn = [d if len(d) <= args.max_len else s for d, (s, _) in
                     zip(dropout_sources(tokenizer, kept_src, args.bpe_dropout), train_pairs, strict=True)]  # fmt: skip
        return share(drawn, world)

    deadline = time.monotonic() + args.max_minutes * 60 if args.max_minutes else math.inf
    max_steps = args.max_steps or math.inf
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    steps_log = open(args.log_steps, "a", buffering=1) if args.log_steps and rank == 0 else None  # noqa: SIM115
    model.train()
    stopped = False
    while info["epoch"] < args.epochs and info["step"] < max_steps and not stopped:
        epoch = info["epoch"] + 1
        pairs = train_pairs  # what the student reads this epoch; the teachers read train_pairs' sources
        if args.bpe_dropout:
            pairs = [(s, t) for s, (_, t) in zip(epoch_sources(epoch), train_pairs, strict=True)]
        batches = make_batches(pairs, args.batch_tokens, seed=args.seed * 1000 + epoch)
        bar = tqdm(batches[info["batch_in_epoch"] :], desc=f"epoch {epoch}", mininterval=5, file=sys.stderr,
                   disable=rank != 0)  # fmt: skip
        tokens_seen, t0 = 0, time.perf_counter()
        for idx in bar:
            # This rank's sentences: every world-th of the batch, which is sorted by length. A rank left without
            # any (a batch shorter than the world) runs one sentence with weight 0, for DDP's all-reduce.
            shard = idx[rank::world]
            tokens = sum(len(train_pairs[i][1]) - 1 for i in idx)  # target tokens in the whole batch
            batch = collate(pairs, shard or idx[:1], config.pad_id)
            src, tgt_in, tgt_out = (t.to(device, non_blocking=True) for t in batch)
            teacher_src = src
            if teachers and pairs is not train_pairs:
                teacher_src = collate(train_pairs, shard or idx[:1], config.pad_id)[0].to(device, non_blocking=True)
            lr = lr_at(info["step"] + 1, args.lr, args.warmup)
            for g in optimizer.param_groups:
                g["lr"] = lr
            with autocast:
                teacher = teacher_probs(teachers, teacher_src, tgt_in) if teachers else None
                loss_sum = batch_loss(net, src, tgt_in, tgt_out, config.pad_id, args.label_smoothing, args.r_drop,
                                      teacher, args.kd_alpha)  # fmt: skip
            loss_sum = loss_sum * bool(shard)
            optimizer.zero_grad(set_to_none=True)
            # DDP divides the ranks' summed gradients by world: this gives the gradient of the batch's mean loss.
            (loss_sum * (world / tokens)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            info["step"] += 1
            info["batch_in_epoch"] += 1
            tokens_seen += tokens
            stop = time.monotonic() > deadline or bool(signals)
            totals = torch.stack([loss_sum.detach(), torch.tensor(float(stop), device=device)])
            if world > 1:
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
        if stopped and info["batch_in_epoch"] < len(batches):
            if rank == 0 and pairs is not train_pairs:  # before the state that says the epoch is under way
                drawn = json.dumps({"epoch": epoch, "sources": [s for s, _ in pairs]})
                sources_file.with_suffix(".tmp").write_text(drawn)
                sources_file.with_suffix(".tmp").replace(sources_file)
            if rank == 0:
                save_state(state_dir, model, optimizer, info)
            say(f"stopped mid-epoch {epoch} at step {info['step']}; state saved, --resume continues")
            break
        info["epoch"], info["batch_in_epoch"], info["epoch_step"] = epoch, 0, info["step"]
        if rank == 0:
            sources_file.unlink(missing_ok=True)
        if rank:
            continue  # rank 0 validates and writes; the others wait for it in the next step's collectives
        snap = state_dir / f"epoch{epoch}.safetensors"
        save_file({k: v.detach().cpu().contiguous() for k, v in unique_state_dict(model).items()}, str(snap))
        info["snapshots"] = (info["snapshots"] + [snap.name])[-args.average_last :]
        for old in state_dir.glob("epoch*.safetensors"):
            if old.name not in info["snapshots"]:
                old.unlink()
        metrics = validate(model, tokenizer, valid_pairs, valid_src, valid_ref, config.pad_id, device)
        info["history"].append({"epoch": epoch, "step": info["step"], "seconds": round(info["seconds"], 1),
                                "train_tokens_per_s": round(tokens_seen / max(elapsed, 1e-9)),
                                **{k: v for k, v in metrics.items() if k != "samples"}})  # fmt: skip
        say(json.dumps(info["history"][-1]))
        for s in metrics["samples"]:
            say("   sample:", s)
        if metrics["valid_bleu"] > info["best_bleu"]:
            info["best_bleu"] = metrics["valid_bleu"]
            save_best(metrics)
        save_state(state_dir, model, optimizer, info)
    if steps_log:
        steps_log.close()
    if world > 1:
        # Wait for rank 0's last validation and writes, then tear down in order: DDP's reducer holds the group, and
        # a gloo group torn down under a busy peer's feet can abort the process.
        dist.barrier()
        del net
        dist.destroy_process_group()
    if signals:  # no averaging: whoever sent the signal wants the process gone soon
        say(f"stopped by {signal.Signals(signals[0]).name} at step {info['step']}; state saved, --resume continues")
        sys.exit(128 + signals[0])
    if rank:
        return

    # Checkpoint averaging: keep the average of the last snapshots if it validates better.
    if len(info["snapshots"]) > 1:
        live = {k: v.clone() for k, v in unique_state_dict(model).items()}
        avg = average_snapshots([state_dir / s for s in info["snapshots"]])
        with torch.no_grad():
            for k, t in unique_state_dict(model).items():
                t.copy_(avg[k])
        metrics = validate(model, tokenizer, valid_pairs, valid_src, valid_ref, config.pad_id, device)
        print(
            json.dumps({"averaged": info["snapshots"], **{k: v for k, v in metrics.items() if k != "samples"}}),
            file=sys.stderr,
        )
        if metrics["valid_bleu"] > info["best_bleu"]:
            info["best_bleu"] = metrics["valid_bleu"]
            metrics["averaged_epochs"] = info["snapshots"]
            save_best(metrics)
        with torch.no_grad():
            for k, t in unique_state_dict(model).items():
                t.copy_(live[k])
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


if __name__ == "__main__":
    main()
