"""Held-out confidence: how well the bundled models' calibrated confidence ranks and predicts sentences it never saw.

    python bench/confidence.py [--pairs en-de en-fr] [--calibration-dir /tmp/cal-de /tmp/cal-fr] [--limit N]

For each pair, translates Multi30k's test_2016_flickr (--split) with checkpoints/multi30k-<pair> through the serving
engine as nmt-calibrate translates its development set (app/calibrate.py's translate_file: greedy, one sentence a
line), the calibration in --calibration-dir (one directory a pair, in --pairs' order; default: the checkpoint's own
confidence.json) applied as a server holding it applies it, and scores each sentence's chrF against its reference.
Prints the CPU, then one JSON line a pair with app/calibrate.py's figures (`report`) for the served confidence and,
beside them, for the raw one an uncalibrated model gives (exp(mean_logprob)): Spearman's correlation with chrF, the
AUROC at finding the worst 10% of sentences by chrF (goal: 0.85 or more), and the expected calibration error of what
the confidence states, P(chrF >= the calibration's threshold) (the raw one states no such thing: its error says how
far it is from meaning it). The figures are held out only if the calibration was fitted on another set (val): one
fitted on the set measured here is refused. Report test2016 once; choose on val.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.calibrate import judged, report, translate_file
from bench.common import cpu_description
from model.confidence import Calibration
from model.tokenizer import read_lines

DATA = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data" / "multi30k")
PAIRS = ("en-de", "en-fr")
GOAL_AUROC = 0.85  # issue #57: low confidence finds the worst tenth of sentences


def checkpoint(pair: str) -> Path:
    return ROOT / "checkpoints" / f"multi30k-{pair}"


def load_calibration(directory: Path, split: str) -> Calibration:
    """The calibration in `directory`; exits where there is none or it was fitted on the set to be measured."""
    try:
        calibration = Calibration.load(directory)
    except ValueError as e:
        sys.exit(f"bench/confidence.py: {e}")
    if calibration is None:
        sys.exit(
            f"bench/confidence.py: {directory} has no confidence.json: run nmt-calibrate or give --calibration-dir"
        )
    fitted_on = str(calibration.fitted_on.get("src", ""))
    if Path(fitted_on).name.startswith(split):
        instead = "val" if split != "val" else "a set other than val"
        sys.exit(f"bench/confidence.py: {directory}'s calibration was fitted on {fitted_on}: the figures would not be "
                 f"held out; fit it on {instead}, or measure another --split")  # fmt: skip
    return calibration


def pair_files(data: Path, split: str, pair: str) -> tuple[Path, Path]:
    source, target = pair.split("-")
    return data / f"{split}.{source}.gz", data / f"{split}.{target}.gz"


def measure(pair: str, calibration_dir: Path, data: Path, split: str, limit: int | None) -> dict:
    """One pair's held-out figures: the served confidence's and the raw one's."""
    calibration = load_calibration(calibration_dir, split)
    src, ref = pair_files(data, split, pair)
    sources, references = list(read_lines(src))[:limit], list(read_lines(ref))[:limit]
    engine, translations = asyncio.run(translate_file(checkpoint(pair), sources, None, None, calibration))
    kept, rows, chrf = judged(translations, references)
    served = np.asarray([translations[i].quality.confidence for i in kept])
    raw = np.exp(np.asarray([r.mean_logprob for r in rows]))
    threshold = calibration.chrf_threshold
    return {
        "pair": pair, "model": engine.name, "calibration": str(calibration_dir / "confidence.json"),
        "fitted_on": calibration.fitted_on.get("src"), "measured_on": src.name, "meaning": calibration.meaning,
        "calibrated": report(served, chrf, threshold), "raw_exp_mean_logprob": report(raw, chrf, threshold),
        "goal_auroc_worst_10pct": GOAL_AUROC,
    }  # fmt: skip


def pair_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments of the benches that take a pair and its calibration at a time (this one, hallucinations.py)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=PAIRS)
    p.add_argument("--calibration-dir", nargs="+", type=Path,
                   help="a directory holding confidence.json for each pair, in --pairs' order (default: the "
                        "checkpoint's own)")  # fmt: skip
    p.add_argument("--data", type=Path, default=DATA, help=f"Multi30k's directory (default {DATA})")
    return p


def each_pair(p: argparse.ArgumentParser, args: argparse.Namespace, measure: Callable[[str, Path], dict]) -> list:
    """The CPU line, then `measure(pair, calibration directory)` of each pair, printed as a JSON line."""
    directories = args.calibration_dir or [checkpoint(pair) for pair in args.pairs]
    if len(directories) != len(args.pairs):
        p.error(f"--calibration-dir names {len(directories)} directories for {len(args.pairs)} pairs: one a pair")
    print(f"CPU: {cpu_description()}", flush=True)
    results = []
    for pair, directory in zip(args.pairs, directories):
        results.append(measure(pair, directory) | {"cpu": cpu_description()})
        print(json.dumps(results[-1]), flush=True)
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    p = pair_arguments(__doc__)
    p.add_argument("--split", default="test_2016_flickr", help="the held-out set (default test_2016_flickr)")
    p.add_argument("--limit", type=int, default=0, help="the first N sentences only (0 = all)")
    args = p.parse_args(argv)
    if args.limit < 0:
        p.error(f"--limit {args.limit}: a number of sentences, at least 0 (0 = all)")
    for pair in args.pairs:
        require_pair_files(p, args.data, args.split, pair)
    limit = args.limit or None
    return each_pair(p, args, lambda pair, directory: measure(pair, directory, args.data, args.split, limit))


def require_pair_files(p: argparse.ArgumentParser, data: Path, split: str, pair: str) -> None:
    """p.error, naming the splits --data holds, where `split` has no file for one side of `pair` there."""
    if not data.is_dir():
        p.error(f"--data {data}: no such directory")
    for path in pair_files(data, split, pair):
        if not path.is_file():
            held = sorted({f.name.split(".")[0] for f in data.glob(f"*.{path.name.split('.')[-2]}.gz")})
            p.error(f"--split {split}: {path} does not exist (the splits in --data with that language: "
                    f"{', '.join(held) or 'none'})")  # fmt: skip


if __name__ == "__main__":
    main()
