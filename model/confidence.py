"""How far to trust a translation: signals from its own decoding, a calibrated confidence, and flags.

Every signal comes from what decoding already produced (the tokens' log-probabilities, the token counts, the
texts), so it costs no model call:

- `mean_logprob`, `min_logprob`: the mean and the lowest log-probability of the generated tokens (`</s>`
  included); the mean is the best cheap detector of bad and hallucinated translations in Guerreiro et al. (EACL
  2023, "Looking for a needle in a haystack").
- `length`: how far the length ratio (target tokens over source tokens, log) lies from the model's typical one,
  in the spreads measured by calibration (0 at the median).
- `repetition`: the share of the translation's tokens that repeat the n-gram (n <= 4) just before them, less as
  many as the source repeats ("Welt Welt Welt Welt." is 0.6: three of five tokens).
- `copied`: the share of the translation's words that are words of the source (0 to 1): an untranslated sentence
  is 1, names and numbers are some.

`Calibration` turns them into a `confidence` in [0, 1]: a logistic regression fitted by `nmt-calibrate` on a
development set with references, whose meaning it records: the probability that the sentence's chrF against a
human reference is at least `chrf_threshold` (50 by default). A model without a calibration file gets the raw
geometric mean of its tokens' probabilities (`exp(mean_logprob)`) with `calibrated: false`. The flags, from a fixed
vocabulary (FLAGS), use thresholds chosen on the same development set, or DEFAULT_THRESHOLDS.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION = "confidence.json"  # beside config.json in a checkpoint directory
FEATURES = ("mean_logprob", "min_logprob", "length", "repetition", "copied")
FLAGS = ("repetition", "length", "copy", "hallucination")
MAX_NGRAM = 4
DEFAULT_THRESHOLDS = {
    "repetition": 0.25,  # a quarter of the tokens repeat what came just before (beyond the source's own share)
    "length": 4.0,  # the length ratio four spreads from the typical one
    "copy": 0.9,  # nine words of ten taken from the source (sentences of 4 words or more)
    "hallucination": -2.5,  # a mean token log-probability below this (a geometric mean probability of 8%)
}
COPY_MIN_WORDS = 4
# A confidence is given to three decimals: the fourth would change with the sentences batched beside it (a batch sums
# in another order) and from one CPU to another
DIGITS = 3
RAW_MEANING = "not calibrated: the geometric mean of the translation's token probabilities (nmt-calibrate fits one)"
WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Signals:
    mean_logprob: float
    min_logprob: float
    length: float
    repetition: float
    copied: float
    words: int = field(default=0, repr=False)  # words in the translation (copy applies from COPY_MIN_WORDS)

    def vector(self) -> list[float]:
        return [getattr(self, f) for f in FEATURES]

    def as_dict(self) -> dict[str, float]:
        return {f: round(getattr(self, f), 4) for f in FEATURES}


@dataclass
class Quality:
    """What a translation (or one of its sentences) is worth: the confidence, whether it is calibrated, the flags
    raised and the signals behind them."""

    confidence: float
    calibrated: bool
    flags: list[str]
    signals: Signals


def repeated(tokens: list[int] | list[str]) -> int:
    """How many tokens repeat the n-gram just before them (n = 1..MAX_NGRAM): in a b a b a b, the last four; in
    w w w w, the last three. Tokens count once, however many n fit."""
    n_tokens = len(tokens)
    marked = [False] * n_tokens
    for n in range(1, MAX_NGRAM + 1):
        for i in range(n, n_tokens - n + 1):
            if tokens[i : i + n] == tokens[i - n : i]:
                for j in range(i, i + n):
                    marked[j] = True
    return sum(marked)


def repeated_share(tokens: list[int] | list[str]) -> float:
    """The share of tokens that repeat the n-gram just before them (`repeated`)."""
    return repeated(tokens) / len(tokens) if tokens else 0.0


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def copied_share(source: str, target: str) -> tuple[float, int]:
    """The share of the target's words that occur among the source's, and the target's word count."""
    target_words = words(target)
    if not target_words:
        return 0.0, 0
    source_words = set(words(source))
    return sum(w in source_words for w in target_words) / len(target_words), len(target_words)


@dataclass
class LengthModel:
    """The typical log length ratio (target tokens / source tokens) and its spread, from a development set."""

    median: float = 0.0
    spread: float = 0.35  # the half-width of the middle 68% of log ratios (one standard deviation of a normal)

    def distance(self, source_tokens: int, target_tokens: int) -> float:
        ratio = math.log(max(target_tokens, 1) / max(source_tokens, 1))
        return abs(ratio - self.median) / max(self.spread, 1e-3)


def signals(
    source_ids: list[int], token_ids: list[int], logprobs: list[float], source: str, target: str,
    length: LengthModel | None = None, forced: int | Collection[int] = 0,
) -> Signals:  # fmt: skip
    """A translation's signals. `source_ids`: what the encoder read (`</s>` and any language code included);
    `token_ids` and `logprobs`: what decoding generated (its logprobs count `</s>` too); `forced`: how many of the
    first tokens the caller forced (a target prefix), or the positions of those it forced (a glossary's terms too):
    their probabilities say nothing of the model's choices."""
    length = length or LengthModel()
    skip = range(forced) if isinstance(forced, int) else set(forced)
    chosen = [lp for i, lp in enumerate(logprobs) if i not in skip] or logprobs
    mean = sum(chosen) / len(chosen) if chosen else 0.0
    low = min(chosen) if chosen else 0.0
    excess = max(0, repeated(token_ids) - repeated(source_ids))  # the source's own repetition is not held against it
    copied, n_words = copied_share(source, target)
    return Signals(
        mean_logprob=mean, min_logprob=low, length=length.distance(len(source_ids), len(logprobs)),
        repetition=excess / len(token_ids) if token_ids else 0.0, copied=copied, words=n_words,
    )  # fmt: skip


@dataclass
class Calibration:
    """A logistic regression from the signals to the probability that a sentence's chrF clears `chrf_threshold`,
    the flags' thresholds and the length model: `confidence.json` in a checkpoint directory."""

    weights: list[float]
    bias: float
    mean: list[float]  # the features are standardised with these before the weights apply
    scale: list[float]
    chrf_threshold: float = 50.0
    length: LengthModel = field(default_factory=LengthModel)
    thresholds: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    features: tuple[str, ...] = FEATURES
    fitted_on: dict[str, Any] = field(default_factory=dict)  # what it was fitted on and how well it did there

    def probability(self, s: Signals) -> float:
        x = (np.asarray(s.vector()) - np.asarray(self.mean)) / np.asarray(self.scale)
        return float(1.0 / (1.0 + math.exp(-float(np.clip(x @ np.asarray(self.weights) + self.bias, -50, 50)))))

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / CALIBRATION
        path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self) | {"features": list(self.features), "meaning": self.meaning}
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    @property
    def meaning(self) -> str:
        return f"the probability that the sentence's chrF against a human reference is at least {self.chrf_threshold:g}"

    @classmethod
    def load(cls, directory: str | Path) -> Calibration | None:
        """The directory's calibration, or None where it has none; a file that does not fit raises ValueError."""
        path = Path(directory) / CALIBRATION
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            data.pop("meaning", None)
            if tuple(data.get("features", FEATURES)) != FEATURES:
                raise ValueError(f"features {data.get('features')} are not this version's {list(FEATURES)}")
            data["features"] = FEATURES
            data["length"] = LengthModel(**data.get("length", {}))
            data["thresholds"] = DEFAULT_THRESHOLDS | data.get("thresholds", {})
            calibration = cls(**data)
            if not len(calibration.weights) == len(calibration.mean) == len(calibration.scale) == len(FEATURES):
                raise ValueError(f"weights, mean and scale need {len(FEATURES)} values each")
            return calibration
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}: not a calibration nmt-calibrate wrote ({e})") from e


def flags(s: Signals, thresholds: dict[str, float]) -> list[str]:
    """The flags a translation's signals raise, in FLAGS order."""
    raised = {
        "repetition": s.repetition >= thresholds["repetition"],
        "length": s.length >= thresholds["length"],
        "copy": s.words >= COPY_MIN_WORDS and s.copied >= thresholds["copy"],
        "hallucination": s.mean_logprob < thresholds["hallucination"],
    }
    return [f for f in FLAGS if raised[f]]


def assess(s: Signals, calibration: Calibration | None) -> Quality:
    """The confidence and flags of one translation's signals."""
    if calibration is None:
        return Quality(round(math.exp(s.mean_logprob), DIGITS), False, flags(s, DEFAULT_THRESHOLDS), s)
    return Quality(round(calibration.probability(s), DIGITS), True, flags(s, calibration.thresholds), s)


def judge(
    source_ids: list[int], token_ids: list[int], logprobs: list[float], source: str, target: str,
    calibration: Calibration | None, forced: int = 0, terms: Collection[int] = (),
) -> Quality:  # fmt: skip
    """One translation's signals (against the calibration's length model) and what they come to (`assess`); the
    `forced` first tokens (a target prefix) and those at the positions `terms` (a glossary's) were the caller's."""
    length = calibration.length if calibration is not None else None
    skip = set(range(forced)) | set(terms) if terms else forced
    return assess(signals(source_ids, token_ids, logprobs, source, target, length, skip), calibration)


def fit(
    rows: list[Signals], good: list[bool], *, chrf_threshold: float, length: LengthModel, l2: float = 1e-2,
    iterations: int = 50,
) -> Calibration:  # fmt: skip
    """A logistic regression of `good` (the sentence's chrF cleared chrf_threshold) on the signals, by Newton's
    method (iteratively reweighted least squares) with a little L2 on the weights."""
    x = np.asarray([r.vector() for r in rows], dtype=np.float64)
    y = np.asarray(good, dtype=np.float64)
    mean, scale = x.mean(0), x.std(0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = np.diag([l2] * (z.shape[1] - 1) + [0.0])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -50, 50)))
        gradient = z.T @ (p - y) + penalty @ w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return Calibration(
        weights=w[:-1].tolist(), bias=float(w[-1]), mean=mean.tolist(), scale=scale.tolist(),
        chrf_threshold=chrf_threshold, length=length,
    )  # fmt: skip


def length_model(source_lengths: list[int], target_lengths: list[int]) -> LengthModel:
    """The median log ratio and half the spread of its middle 68%, from a development set's token counts."""
    ratios = np.log(np.maximum(np.asarray(target_lengths), 1) / np.maximum(np.asarray(source_lengths), 1))
    lo, median, hi = np.quantile(ratios, [0.16, 0.5, 0.84])
    return LengthModel(median=float(median), spread=float(max((hi - lo) / 2, 0.05)))
