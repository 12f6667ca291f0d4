"""What the in-process benchmarks share: arguments, the length-sorted corpus, padded batches."""

from __future__ import annotations

import argparse
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
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--threads", type=int, default=2)
    return p


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
