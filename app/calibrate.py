"""nmt-calibrate: fit a model's confidence on a development set, so that `confidence` means what it says.

    nmt-calibrate MODEL_DIR --src dev.en --ref dev.de [--chrf 50] [--target de]

translates the source file as the server does (the same engine, greedy, one sentence a line), scores each
translation's chrF against its reference (sacrebleu), and fits model/confidence.py's logistic regression from the
translation's signals to "chrF is at least --chrf" (the signals that help chosen by cross-validation on the same
set: model/confidence.py's `select`). The flags' thresholds are chosen on the same set (FLAG_RULES).
Writes MODEL_DIR/confidence.json (or --out DIR's), which the server reads at start; prints what it fitted and how
well the fit ranks and predicts the sentences it was fitted on (held-out figures: bench/confidence.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from app.engine.errors import InvalidRequest
from model.confidence import (
    COVERAGE_MIN_TOKENS,
    DEFAULT_THRESHOLDS,
    Calibration,
    Signals,
    auroc,
    fit,
    length_model,
    ranks,
    select,
)
from model.tokenizer import lines_or_exit
from model.workspace import unwritable

CHUNK = 64  # texts per engine call (the engine's max_batch_texts)


async def translate_file(
    model_dir: Path, sources: list[str], source: str | None, target: str | None, calibration: Calibration | None = None
) -> tuple:
    """Each source line's translation through the serving engine (compiled graphs off: the same tokens), with the
    engine for what it knows of the model. Their confidence and flags are `calibration`'s, as a server holding it
    gives them; by default none: the raw signals, not those of a calibration the model directory already has."""
    from app.loading import load_engine
    from app.settings import Settings
    from app.text.limits import Decoding

    engine = load_engine(Settings(model_dir=model_dir, compile="off", max_batch_texts=CHUNK))
    if engine.codes is None and (source or target) and not engine.directions.serves(source, target):
        pair = engine.directions.languages
        raise InvalidRequest(
            f"{model_dir} translates {pair['source']}->{pair['target']}, not {source or 'any'}->{target or 'any'}: "
            "--source and --target are a many-to-many model's languages; leave them out"
        )
    engine.calibration = calibration
    decoding = Decoding(source=source, target=target)
    engine.core.start()
    try:
        out = []
        for i in range(0, len(sources), CHUNK):
            out += await engine.translate(sources[i : i + CHUNK], decoding=decoding, split="none", truncate=True)
            print(f"  {len(out)}/{len(sources)} translated", file=sys.stderr, end="\r", flush=True)
        print(file=sys.stderr)
        return engine, out
    finally:
        engine.stop()


def sentence_chrf(hypotheses: list[str], references: list[str]) -> list[float]:
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    return [chrf.sentence_score(h, [r]).score for h, r in zip(hypotheses, references, strict=True)]


def judged(translations: list, references: list[str]) -> tuple[list[int], list[Signals], np.ndarray]:
    """The translations there is something to judge (blank lines have not): their indices, their signals and their
    sentence chrF against the references."""
    kept = [i for i, t in enumerate(translations) if t.quality is not None]
    chrf = sentence_chrf([translations[i].text for i in kept], [references[i] for i in kept])
    return kept, [translations[i].quality.signals for i in kept], np.asarray(chrf)


def spearman(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's on the ranks."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def calibration_error(probabilities: np.ndarray, outcomes: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: the gap between stated probability and observed frequency, over ten equal-width
    bins, weighted by how many sentences fall in each."""
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(probabilities, edges[1:-1]), 0, bins - 1)
    error = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            error += inside.mean() * abs(probabilities[inside].mean() - outcomes[inside].mean())
    return float(error)


def choose_thresholds(rows: list[Signals], chrf: list[float]) -> dict[str, float]:
    """The flags' thresholds from the development set: `length` and `coverage` at the edge of their worst 0.5% (no
    nearer than half the default), `hallucination` at its lowest 1% of mean log-probability, so that it fires on one
    in-domain sentence in a hundred (on bench/hallucinations.py's test2016 sets it then finds 90% and 93% of the
    hallucinations of the bundled en-de and en-fr models at precision 0.95 and 0.88; capped at -1.25 as it was, it
    found 8% and 73%); `repetition`'s loops and `copy` keep their defaults, which mark the outputs they name whatever
    the data."""
    thresholds = dict(DEFAULT_THRESHOLDS)
    lengths = np.asarray([r.length for r in rows])
    means = np.asarray([r.mean_logprob for r in rows])
    thresholds["length"] = round(float(max(np.quantile(lengths, 0.995), DEFAULT_THRESHOLDS["length"] / 2)), 3)
    thresholds["hallucination"] = round(float(np.quantile(means, 0.01)), 3)
    coverage = [r.coverage for r in rows if r.source_tokens >= COVERAGE_MIN_TOKENS and not np.isnan(r.coverage)]
    if coverage:
        thresholds["coverage"] = round(float(max(np.quantile(coverage, 0.995), DEFAULT_THRESHOLDS["coverage"] / 2)), 3)
    return thresholds


def report(probabilities: np.ndarray, chrf: np.ndarray, threshold: float) -> dict[str, float]:
    """How well confidences rank and predict: Spearman with chrF, AUROC at finding the worst 10% by chrF (low
    confidence should find them), and the expected calibration error of P(chrF >= threshold)."""
    worst = chrf <= np.quantile(chrf, 0.10)
    return {
        "sentences": len(chrf),
        "spearman": round(spearman(probabilities, chrf), 4),
        "auroc_worst_10pct": round(auroc(-probabilities, worst), 4),
        "calibration_error": round(calibration_error(probabilities, chrf >= threshold), 4),
        "share_clearing_threshold": round(float((chrf >= threshold).mean()), 4),
    }


def writable_dir_or_exit(directory: Path, flag: str) -> None:
    """Exits if confidence.json cannot be written into directory (made if need be): said before the translating,
    not after it."""
    if why := unwritable(directory):
        sys.exit(f"nmt-calibrate: {flag} {directory}: {why}; give a directory you can write in (made if need be)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="nmt-calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path, help="the checkpoint directory (bundled, trained or imported)")
    p.add_argument("--src", required=True, help="development source sentences, one a line (plain or .gz)")
    p.add_argument("--ref", required=True, help="their reference translations, line by line")
    p.add_argument("--chrf", type=float, default=50.0, help="confidence is P(sentence chrF >= this) (default 50)")
    p.add_argument("--source", help="a many-to-many model: the source language (default: its saved one)")
    p.add_argument("--target", help="a many-to-many model: the target language (default: its saved one)")
    p.add_argument("--out", type=Path, help="write confidence.json here instead of MODEL_DIR")
    p.add_argument("--limit", type=int, help="the first N lines only")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error("--limit takes a positive number of lines")
    sources, references = lines_or_exit(args.src, "nmt-calibrate"), lines_or_exit(args.ref, "nmt-calibrate")
    if len(sources) != len(references):
        sys.exit(f"nmt-calibrate: {args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if len(sources) < 50:
        sys.exit(f"nmt-calibrate: {len(sources)} sentences are too few to fit on; give 50 or more (500+ is better)")
    if not 0 < args.chrf < 100:
        sys.exit("nmt-calibrate: --chrf is a chrF score between 0 and 100")
    if args.out:
        writable_dir_or_exit(args.out, "--out")
    elif args.model_dir.is_dir():  # else loading it says what is wrong
        writable_dir_or_exit(args.model_dir, "MODEL_DIR")
    from model.checkpoint import CheckpointError  # torch's side, as the model it loads (app/ imports without torch)

    try:
        engine, translations = asyncio.run(translate_file(args.model_dir, sources, args.source, args.target))
    except (CheckpointError, InvalidRequest) as e:  # InvalidRequest: --source or --target that the model lacks
        sys.exit(f"nmt-calibrate: {e}")
    kept, rows, chrf = judged(translations, references)
    good = chrf >= args.chrf
    if good.all() or not good.any():
        sys.exit(f"nmt-calibrate: every sentence is on one side of chrF {args.chrf:g}: choose another --chrf")
    length = length_model([translations[i].input_tokens for i in kept], [translations[i].output_tokens for i in kept])
    # the length signal was measured against the default length model: measure it again against the fitted one
    for i, r in zip(kept, rows):
        r.length = length.distance(translations[i].input_tokens, translations[i].output_tokens)
    features, tried = select(rows, chrf, args.chrf)
    calibration = fit(rows, list(good), chrf_threshold=args.chrf, length=length, features=features)
    calibration.thresholds = choose_thresholds(rows, list(chrf))
    probabilities = np.asarray([calibration.probability(r) for r in rows])
    calibration.fitted_on = (
        {"src": Path(args.src).name, "ref": Path(args.ref).name, "model": engine.name}
        | report(probabilities, chrf, args.chrf)
        | {"cross_validated_auroc_worst_10pct": tried}
    )
    path = calibration.save(args.out or args.model_dir)
    print(json.dumps({"wrote": str(path), "meaning": calibration.meaning, **calibration.fitted_on,
                      "thresholds": calibration.thresholds}))  # fmt: skip


if __name__ == "__main__":
    main()
