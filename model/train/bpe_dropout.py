"""--bpe-dropout (Provilkov et al. 2020): each epoch the student reads its sources cut anew. An epoch's draw is kept
in train_state/ while the epoch is under way, so that a resumed run takes the batches the stopped one would have."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from model.tokenizer import Tokenizer
from model.train.distributed import share
from model.train.run import Run

SOURCES_FILE = "epoch_sources.json"  # in train_state/: the sources of the epoch a run stopped in


def dropout_sources(tokenizer: Tokenizer, texts: list[str], p: float) -> list[list[int]]:
    """texts' source-side ids under BPE-dropout p: each merge skipped with probability p, drawn afresh each call (the
    library's own random numbers, which no seed fixes). A copy of the tokenizer draws them: the caller's keeps its
    deterministic merges."""
    dropped = Tokenizer(HFTokenizer.from_str(tokenizer.hf.to_str()))
    dropped.hf.model.dropout = p
    return dropped.encode_batch(texts, "source")


def epoch_pairs(run: Run, epoch: int) -> list[tuple[list[int], list[int]]]:
    """What the student reads this epoch: the training pairs, under --bpe-dropout with their sources cut anew (the
    teachers read the pairs' own sources)."""
    if not run.args.bpe_dropout:
        return run.train_pairs
    return [(s, t) for s, (_, t) in zip(epoch_sources(run, epoch), run.train_pairs, strict=True)]


def epoch_sources(run: Run, epoch: int) -> list[list[int]]:
    """The training sources under BPE-dropout for this epoch, drawn by rank 0 and shared; resuming mid-epoch,
    those the stopped run drew, so that the rest of the epoch's batches are the ones it would have taken."""
    drawn = None
    sources_file = run.state_dir / SOURCES_FILE
    if run.rank == 0 and run.info["batch_in_epoch"] and sources_file.exists():
        saved = json.loads(sources_file.read_text())
        drawn = saved["sources"] if saved["epoch"] == epoch else None
    if run.rank == 0 and drawn is None:  # a source cut past --max-len keeps its served pieces
        drawn = [d if len(d) <= run.args.max_len else s for d, (s, _) in
                 zip(dropout_sources(run.tokenizer, run.train_sources, run.args.bpe_dropout), run.train_pairs,
                     strict=True)]  # fmt: skip
    return share(drawn, run.world)


def save_epoch_sources(state_dir: Path, epoch: int, pairs: list[tuple[list[int], list[int]]]) -> None:
    """Keeps the epoch's draw for --resume (before the state that says the epoch is under way)."""
    sources_file = state_dir / SOURCES_FILE
    drawn = json.dumps({"epoch": epoch, "sources": [s for s, _ in pairs]})
    sources_file.with_suffix(".tmp").write_text(drawn)
    sources_file.with_suffix(".tmp").replace(sources_file)


def forget_epoch_sources(state_dir: Path) -> None:
    """The epoch is over: its draw is no longer needed."""
    (state_dir / SOURCES_FILE).unlink(missing_ok=True)
