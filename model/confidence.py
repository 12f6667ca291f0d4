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
- `attention`: how far each step's cross-attention (the alignment layer's, averaged over heads) lay from attention
  spread evenly over the source, averaged over the steps (the Wasserstein-1 distance to uniform of Guerreiro et al.,
  ACL 2023): attention that rests on one token (the closing `</s>`, say) is what a model that stopped translating
  the source shows. The decoder step computes it beside the token (model/transformer.py's `attention_facts`).
- `coverage`: the share of the source's tokens (its closing `</s>` left out) that no token of the translation
  aligns to (each step's most attended source token): a dropped clause leaves its tokens uncovered.
- `tokens`: the log of the translation's token count: long sentences are harder.
- `sum_logprob`: the sum of the generated tokens' log-probabilities (the log of the probability of the whole
  translation: the mean times the token count).
- `loop`, `token_loop`: the most copies in a row of one n-gram (n <= 4) in the translation's words and in its tokens
  ("Welt Welt Welt Welt." loops 4 times), where the source has no loop as long (else 1): what the `repetition` flag
  looks at. A loop's words often come out as different pieces ("▁P o - P o - P o" is "Po-Po-Po"), and a loop inside
  a word ("Serererer") is one word of many pieces.

`Calibration` turns them into a `confidence` in [0, 1]: a logistic regression fitted by `nmt-calibrate` on a
development set with references, on the first five signals (FEATURES) and those of the others (EXTRA_FEATURES) that
cross-validation there finds to help (`select`), whose meaning it records: the probability that the sentence's chrF
against a human reference is at least `chrf_threshold` (50 by default). A model without a calibration file gets the raw
geometric mean of its tokens' probabilities (`exp(mean_logprob)`) with `calibrated: false`. The flags, from a fixed
vocabulary (FLAGS), use thresholds chosen on the same development set, or DEFAULT_THRESHOLDS.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION = "confidence.json"  # beside config.json in a checkpoint directory
FEATURES = ("mean_logprob", "min_logprob", "length", "repetition", "copied")  # every calibration's
EXTRA_FEATURES = ("attention", "coverage", "tokens", "sum_logprob")  # a calibration's where they help on its dev set
SIGNALS = FEATURES + EXTRA_FEATURES
LOOPS = ("loop", "token_loop")  # the repetition flag's: signals returned, not features of the confidence
FLAGS = ("repetition", "length", "copy", "coverage", "hallucination")
MAX_NGRAM = 4
DEFAULT_THRESHOLDS = {
    # repetition: a word n-gram 3 times in a row, or a token n-gram 4 times, more than the source has (the bundled
    # models' val sets: bench/hallucinations.py)
    "loop": 3,
    "token_loop": 4,
    "length": 4.0,  # the length ratio four spreads from the typical one
    "copy": 0.9,  # nine words of ten taken from the source (sentences of 4 words or more)
    "coverage": 0.6,  # six source tokens in ten aligned to by no token of the translation (sources of 4 or more)
    "hallucination": -2.5,  # a mean token log-probability below this (a geometric mean probability of 8%)
}
COPY_MIN_WORDS = 4
COVERAGE_MIN_TOKENS = 4  # a shorter source's coverage says little: one token of two is 0.5
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
    attention: float = math.nan  # nan where the decoding kept no attention facts (Hypothesis.attention)
    coverage: float = math.nan
    tokens: float = 0.0
    sum_logprob: float = 0.0
    loop: int = 0
    token_loop: int = 0
    words: int = field(default=0, repr=False)  # words in the translation (copy applies from COPY_MIN_WORDS)
    source_tokens: int = field(default=0, repr=False)  # source tokens coverage counts (from COVERAGE_MIN_TOKENS)

    def vector(self, features: tuple[str, ...] = FEATURES) -> list[float]:
        return [getattr(self, f) for f in features]

    def as_dict(self) -> dict[str, float | None]:
        return {f: None if math.isnan(v := getattr(self, f)) else round(v, 4) for f in SIGNALS} | {
            f: getattr(self, f) for f in LOOPS
        }


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


def copies(units: list[int] | list[str]) -> int:
    """The most copies in a row of one n-gram (n = 1..MAX_NGRAM): 4 in w w w w, 3 in a b a b a b c, 1 where nothing
    repeats, 0 for nothing."""
    most = 1 if units else 0
    for n in range(1, MAX_NGRAM + 1):
        same = bytes(map(operator.eq, units[n:], units))  # 1 where a unit equals the one n before it
        if 1 in same:  # a run of r such units is 1 + r // n copies of an n-gram
            most = max(most, 1 + max(map(len, same.split(b"\0"))) // n)
    return most


def loop(source: list[int] | list[str], target: list[int] | list[str]) -> int:
    """The target's most copies in a row of one n-gram, where the source has fewer; else 1 (0 for no target)."""
    found = copies(target)
    return found if found <= 1 or found > copies(source) else 1


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def copied_share(source: str, target: str) -> tuple[float, int]:
    """The share of the target's words that occur among the source's, and the target's word count."""
    return copied_words(words(source), words(target))


def copied_words(source_words: list[str], target_words: list[str]) -> tuple[float, int]:
    """`copied_share` of texts already split into words."""
    if not target_words:
        return 0.0, 0
    known = set(source_words)
    return sum(w in known for w in target_words) / len(target_words), len(target_words)


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
    length: LengthModel | None = None, forced: int | Collection[int] = 0, attention: list[float] = (),
    aligned: list[int] = (),
) -> Signals:  # fmt: skip
    """A translation's signals. `source_ids`: what the encoder read (`</s>` and any language code included);
    `token_ids` and `logprobs`: what decoding generated (its logprobs count `</s>` too); `forced`: how many of the
    first tokens the caller forced (a target prefix), or the positions of those it forced (a glossary's terms too):
    their probabilities say nothing of the model's choices; `attention` and `aligned`: each generated token's step's
    attention facts (Hypothesis.attention and .aligned), where the decoding kept them."""
    length = length or LengthModel()
    skip = range(forced) if isinstance(forced, int) else set(forced)
    chosen = [lp for i, lp in enumerate(logprobs) if i not in skip] or logprobs
    mean = sum(chosen) / len(chosen) if chosen else 0.0
    low = min(chosen) if chosen else 0.0
    excess = max(0, repeated(token_ids) - repeated(source_ids))  # the source's own repetition is not held against it
    source_words, target_words = words(source), words(target)  # each text split once, for copying and loops
    copied, n_words = copied_words(source_words, target_words)
    spread = [a for i, a in enumerate(attention) if i not in skip] or list(attention)
    covered = len(source_ids) - 1 if len(source_ids) > 1 else len(source_ids)  # the closing </s> left out
    uncovered = len(set(range(covered)) - set(aligned)) / covered if aligned and covered else math.nan
    return Signals(
        mean_logprob=mean, min_logprob=low, length=length.distance(len(source_ids), len(logprobs)),
        repetition=excess / len(token_ids) if token_ids else 0.0, copied=copied,
        attention=sum(spread) / len(spread) if spread else math.nan, coverage=uncovered,
        tokens=math.log(max(len(logprobs), 1)), sum_logprob=sum(chosen), loop=loop(source_words, target_words),
        token_loop=loop(source_ids, token_ids), words=n_words, source_tokens=covered,
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
        """P(chrF >= chrf_threshold) given the signals; a signal the decoding could not give (nan) counts as the
        development set's mean."""
        mean = np.asarray(self.mean)
        x = np.asarray(s.vector(self.features), dtype=np.float64)
        x = (np.where(np.isnan(x), mean, x) - mean) / np.asarray(self.scale)
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
            features = tuple(data.get("features", FEATURES))
            if unknown := [f for f in features if f not in SIGNALS]:
                raise ValueError(f"features {unknown} are not among this version's signals {list(SIGNALS)}")
            data["features"] = features
            data["length"] = LengthModel(**data.get("length", {}))
            # an older file's threshold for the repetition share (the flag's rule until loops replaced it) is dropped
            kept = {k: v for k, v in data.get("thresholds", {}).items() if k in DEFAULT_THRESHOLDS}
            data["thresholds"] = DEFAULT_THRESHOLDS | kept
            calibration = cls(**data)
            if not len(calibration.weights) == len(calibration.mean) == len(calibration.scale) == len(features):
                raise ValueError(f"weights, mean and scale need {len(features)} values each, one a feature")
            return calibration
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}: not a calibration nmt-calibrate wrote ({e})") from e


def flags(s: Signals, thresholds: dict[str, float]) -> list[str]:
    """The flags a translation's signals raise, in FLAGS order."""
    raised = {
        "repetition": s.loop >= thresholds["loop"] or s.token_loop >= thresholds["token_loop"],
        "length": s.length >= thresholds["length"],
        "copy": s.words >= COPY_MIN_WORDS and s.copied >= thresholds["copy"],
        "coverage": s.source_tokens >= COVERAGE_MIN_TOKENS and s.coverage >= thresholds["coverage"],  # nan: False
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
    calibration: Calibration | None, forced: int = 0, terms: Collection[int] = (), attention: list[float] = (),
    aligned: list[int] = (),
) -> Quality:  # fmt: skip
    """One translation's signals (against the calibration's length model) and what they come to (`assess`); the
    `forced` first tokens (a target prefix) and those at the positions `terms` (a glossary's) were the caller's;
    `attention` and `aligned`: the hypothesis's attention facts (Hypothesis.attention and .aligned)."""
    length = calibration.length if calibration is not None else None
    skip = set(range(forced)) | set(terms) if terms else forced
    found = signals(source_ids, token_ids, logprobs, source, target, length, skip, attention, aligned)
    quality = assess(found, calibration)
    if not logprobs:  # the budget ran out before the model chose a token: none of the source is translated
        quality.confidence = 0.0
    return quality


def fit(
    rows: list[Signals], good: list[bool], *, chrf_threshold: float, length: LengthModel, l2: float = 1e-2,
    iterations: int = 50, features: tuple[str, ...] = FEATURES,
) -> Calibration:  # fmt: skip
    """A logistic regression of `good` (the sentence's chrF cleared chrf_threshold) on the signals `features`, by
    Newton's method (iteratively reweighted least squares) with a little L2 on the weights."""
    x = np.asarray([r.vector(features) for r in rows], dtype=np.float64)
    mean = np.nanmean(x, 0) if len(x) else np.zeros(len(features))
    mean = np.where(np.isnan(mean), 0.0, mean)  # a signal no row has
    x = np.where(np.isnan(x), mean, x)
    w, scale = _logistic(x, np.asarray(good, dtype=np.float64), mean, l2, iterations)
    return Calibration(
        weights=w[:-1].tolist(), bias=float(w[-1]), mean=mean.tolist(), scale=scale.tolist(),
        chrf_threshold=chrf_threshold, length=length, features=tuple(features),
    )  # fmt: skip


def _logistic(x: np.ndarray, y: np.ndarray, mean: np.ndarray, l2: float, iterations: int) -> tuple:
    """Weights (the bias last) of a logistic regression on x standardised by `mean` and its spread, and the spread."""
    scale = x.std(0)
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
    return w, scale


def ranks(values: list[float] | np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank."""
    v = np.asarray(values, dtype=np.float64)
    order = v.argsort(kind="mergesort")
    out, sorted_v, i = np.empty(len(v)), v[order], 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def auroc(scores: list[float] | np.ndarray, positives: list[bool] | np.ndarray) -> float:
    """The probability that a positive scores above a negative (ties count half): the area under the ROC curve."""
    p = np.asarray(positives, dtype=bool)
    if p.all() or not p.any():
        return float("nan")
    n_pos, n_neg = p.sum(), (~p).sum()
    return float((ranks(scores)[p].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


SELECT_FOLDS, SELECT_REPEATS = 10, 5  # `select`'s cross-validation: 10 folds, drawn 5 times
SELECT_GAIN = 0.005  # an extra signal joins where it raises the cross-validated AUROC by this much


def select(rows: list[Signals], chrf: np.ndarray, threshold: float, worst: float = 0.10) -> tuple[tuple, dict]:
    """The features a calibration uses: FEATURES, and each of EXTRA_FEATURES (greedily, the best first) that raises
    the cross-validated AUROC at finding the development set's worst `worst` share of sentences by chrF by
    SELECT_GAIN or more. Returns them and the AUROC of each set tried."""
    chrf = np.asarray(chrf, dtype=np.float64)
    good, bad = (chrf >= threshold).astype(np.float64), chrf <= np.quantile(chrf, worst)

    def scored(features: tuple[str, ...]) -> float:
        x = np.asarray([r.vector(features) for r in rows], dtype=np.float64)
        x = np.where(np.isnan(x), np.nan_to_num(np.nanmean(x, 0)), x)
        out = []
        for repeat in range(SELECT_REPEATS):
            order, predicted = np.random.default_rng(repeat).permutation(len(x)), np.zeros(len(x))
            for fold in range(SELECT_FOLDS):
                held = order[fold::SELECT_FOLDS]
                train = np.setdiff1d(order, held)
                mean = x[train].mean(0)
                w, scale = _logistic(x[train], good[train], mean, 1e-2, 50)
                predicted[held] = ((x[held] - mean) / scale) @ w[:-1] + w[-1]
            out.append(auroc(-predicted, bad))
        return float(np.mean(out))

    chosen, tried = FEATURES, {}
    best = tried[",".join(chosen)] = round(scored(chosen), 4)
    left = [f for f in EXTRA_FEATURES if not all(math.isnan(getattr(r, f)) for r in rows)]
    while left:
        trials = {f: scored(chosen + (f,)) for f in left}
        for f, a in trials.items():
            tried[",".join(chosen + (f,))] = round(a, 4)
        pick = max(trials, key=trials.get)
        if trials[pick] < best + SELECT_GAIN:
            break
        chosen, best = chosen + (pick,), trials[pick]
        left.remove(pick)
    return chosen, tried


def length_model(source_lengths: list[int], target_lengths: list[int]) -> LengthModel:
    """The median log ratio and half the spread of its middle 68%, from a development set's token counts."""
    ratios = np.log(np.maximum(np.asarray(target_lengths), 1) / np.maximum(np.asarray(source_lengths), 1))
    lo, median, hi = np.quantile(ratios, [0.16, 0.5, 0.84])
    return LengthModel(median=float(median), spread=float(max((hi - lo) / 2, 0.05)))
