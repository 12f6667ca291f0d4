"""What the in-process benchmarks share: arguments, the length-sorted corpus, padded batches."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import torch

from model.checkpoint import load_checkpoint
from model.cpu import cpu_info
from model.tokenizer import Tokenizer, read_lines
from model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "checkpoints" / "multi30k-en-de"


def cpu_description() -> str:
    """The CPU model, its core count and the flags that decide speed here (figures from different CPUs differ)."""
    cpu = cpu_info()
    model, flags = cpu.model or "unknown CPU", cpu.flags
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    return f"{model}, {os.cpu_count()} cores, flags: {' '.join(f for f in wanted if f in flags) or 'none of ' + str(wanted)}"


def corpus_arguments(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--src", required=True)
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0 = all)")
    p.add_argument("--batch-sizes", type=sizes_text, default="1,32")
    p.add_argument("--threads", type=int, default=2)
    return p


def check_corpus(p: argparse.ArgumentParser, args: argparse.Namespace, model_dir: bool = True) -> None:
    """Refuse, before any work, a --src that is not a file, a negative --limit and (model_dir) a --model-dir that is
    not a checkpoint directory."""
    require_files(p, src=args.src)
    if args.limit is not None and args.limit < 0:
        p.error(f"--limit {args.limit}: a number of sentences, at least 0 (0 = all)")
    if model_dir:
        require_checkpoint(p, "--model-dir", args.model_dir)


def require_files(p: argparse.ArgumentParser, **flags: str | Path | None) -> None:
    """p.error for each flag given (src="..." for --src) that names no file."""
    for flag, path in flags.items():
        if path is not None and not Path(path).is_file():
            p.error(f"--{flag.replace('_', '-')} {path}: no such file")


def require_checkpoint(p: argparse.ArgumentParser, flag: str, path: str | Path) -> None:
    """p.error where `path` is not a checkpoint directory (one with a config.json)."""
    if not (Path(path) / "config.json").is_file():
        what = "not a checkpoint directory (it has no config.json)" if Path(path).is_dir() else "no such directory"
        p.error(f"{flag} {path}: {what}")


def sizes(value: str) -> list[int]:
    """--batch-sizes, --levels, --workers: "1,5,20" -> [1, 5, 20], each a whole number of at least 1."""
    try:
        out = [int(x) for x in value.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: comma-separated whole numbers, each at least 1 (e.g. 1,5,20)")
    return out


def sizes_text(value: str) -> str:
    """`sizes`, kept as written (--batch-sizes: the benchmarks' worker processes are given the text)."""
    sizes(value)
    return value


def ct2_missing(instead: str) -> str | None:
    """Why CTranslate2 cannot run here (it is not installed), ending with what to do `instead`; None where it can."""
    if importlib.util.find_spec("ctranslate2") is not None:
        return None
    return f"CTranslate2 is not installed: install the bench extra (bash scripts/install.sh bench) or {instead}"


def cuda_missing(device: str, instead: str) -> str | None:
    """Why --device `device` cannot run here, ending (where no GPU is found) with what to do `instead`; None where it
    can: the CPU, or a CUDA device PyTorch finds."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        return f"--device {device}: not a device; use cpu, cuda or cuda:N"
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        return f"--device {device}: use cpu, cuda or cuda:N"
    if not torch.cuda.is_available():
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
        return (f"--device {device}: PyTorch finds no CUDA device here (torch {torch.__version__}, {built}); run it on "
                f"a machine with an NVIDIA GPU, or {instead}")  # fmt: skip
    if (dev.index or 0) >= (count := torch.cuda.device_count()):
        return f"--device {device}: there is no such device here; PyTorch finds {count} (cuda:0 to cuda:{count - 1})"
    return None


def load_corpus(args: argparse.Namespace) -> tuple[Transformer, Tokenizer, list[list[int]]]:
    """The model, its tokenizer and the source sentences as ids, length-sorted as a server batches them."""
    torch.set_num_threads(args.threads)
    model, tok, _ = load_checkpoint(args.model_dir)
    return model, tok, sorted(tok.encode_batch(read_sentences(args)), key=len)


def read_sentences(args: argparse.Namespace) -> list[str]:
    """The lines of --src, the first --limit of them when it is set."""
    sentences = list(read_lines(args.src))
    return sentences[: args.limit] if args.limit else sentences


def pad_batch(batch: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-padded (B, S) source ids."""
    src = torch.full((len(batch), max(map(len, batch))), pad_id, dtype=torch.long)
    for r, ids in enumerate(batch):
        src[r, : len(ids)] = torch.tensor(ids)
    return src
