"""Hallucinations: how well the `hallucination` and `repetition` flags find them, on inputs made to cause them.

    python bench/hallucinations.py [--pairs en-de en-fr] [--calibration-dir DIR ...] [--limit N] [--dump FILE]

For each pair, builds a set of inputs for checkpoints/multi30k-<pair> twice, from Multi30k's val and from its
test_2016_flickr, translates them through the serving engine as bench/confidence.py does (app/calibrate.py's
translate_file, with the calibration in --calibration-dir, default the checkpoint's own), labels every output by the
rule below, and measures the flags' precision and recall on the test2016 set: with the calibration's thresholds
(nmt-calibrate's choice), and with thresholds chosen on the val set (`best_threshold`, `best_loops`: for each flag
the highest recall at precision 0.8 or more there). Goal (issue #57): recall >= 0.9 at precision >= 0.8.

The set, after Lee et al. (2018), Raunak et al. (2021) and Guerreiro et al. (EACL 2023, ACL 2023):
- natural: every source line as it is;
- perturbed: every source line the model translates well (chrF at least the calibration's threshold, 50) changed
  five ways: a frequent word inserted at the start (insert-frequent), an odd token inserted there (insert-odd), two
  letters of a word swapped (misspelt), a word dropped (word-dropped), a word doubled (word-doubled);
- target-language and other-language: the sentence's own line in the target language, and in Multi30k's third
  language, fed to the English-to-X model;
- degenerate: greetings, a word repeated, lone punctuation, numbers (bench/hallucination_inputs.py: half of them in
  each set), and strings of random letters drawn for each set; those without a letter (punctuation, numbers) the
  server keeps as written, which no model sees: they are left out of the judged set;
- off-domain: hand-written sentences from news, medicine, law, software and travel, with their translations (half
  in each set).

Labelling rule: an output is a hallucination when it is oscillatory or detached (Guerreiro et al.'s categories).
- Oscillatory: it repeats itself where its input does not: one word n-gram (n <= 4) three times in a row, or one
  string of up to four letters four times in a row or more over eight letters or more ("Serererer", "Trrrrrrrr";
  not a stutter such as "fiiiii"), where the input has no such run.
- Detached, for an input with a reference (every kind but degenerate): the output has a word, and its sentence chrF
  against the reference and against the input itself (a copy is untranslated, not invented) are both below B90,
  the 90th percentile of the chrF of the set's natural translations against the reference of another sentence (the
  one half the set away): nine translations of an unrelated sentence in ten are as close to what it should say. What
  sentences share by chance (the captions' "Ein Mann in einem ...") lies inside B90. It is attached (no
  hallucination) when one of the two is B99 or more, the 99th percentile: closer than an unrelated sentence's
  translation comes but once in a hundred times; a translation with a wrong word or two lies well above it. Between
  the two the rule cannot tell a poor translation from a partly detached one (Guerreiro et al.'s "strongly
  detached"): such an output is left unlabelled, out of precision and recall, and counted ("unclear", and the
  precision were they all called no hallucination). Perturbed inputs come only from sentences translated well, so a
  detached output is the perturbation's doing (Lee et al.'s rule: good before, detached after).
- Detached, for a degenerate input (nothing to translate, so no chrF means much): half or more of the output's words
  (those with a letter) are neither the input's nor among the renderings listed beside it: "Zwei." for "." and
  "Ein Mann." for "a" are; "Welt!" for "Hello world!" and "1244." for "12345" are not.
An output with no word (say "...") is an omission, no hallucination. A poor but attached output (a wrong word, a
phrase missing) is no hallucination either: a flag raised on it counts against the flag's precision. The
`hallucination` flag is judged against all hallucinations, `repetition` against the oscillatory ones, and the two
together ("either") against all; `coverage` (part of the source left out) against all hallucinations too, and the
three together ("any").

The `repetition` flag's rule on words (an n-gram `loop` times in a row where the source has no such run) is, at 3,
the oscillatory label's own rule on words: what its precision and recall measure is the rest, its rule on the model's
tokens (`token_loop`) against the label's loops of letters and the false alarms it raises.

Prints the CPU, then one JSON line a pair: the bounds B, each kind's cases, hallucinations and flags raised on the
test set, the thresholds (the calibration's, those chosen on val), and the flags' precision and recall on the test
set with each, and the same on the val set (where the choice was made). --dump FILE writes every case of every set as
a JSON line (input, output, labels, signals, flags), to read what the rule decided.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.calibrate import sentence_chrf, translate_file
from bench.confidence import checkpoint, each_pair, load_calibration, pair_arguments
from bench.hallucination_inputs import DEGENERATE, FREQUENT, ODD, OFF_DOMAIN
from model.confidence import Calibration, Signals, flags, words
from model.tokenizer import read_lines

SETS = ("val", "test_2016_flickr")  # thresholds are chosen on the first, reported on the second
LANGUAGES = ("en", "de", "fr")  # Multi30k's: each line in all three
DETACHED, ATTACHED = 0.9, 0.99  # B90 and B99: quantiles of the chrF of translations against unrelated references
RUN_NGRAM, RUN_WORDS = 4, 3  # oscillatory: an n-gram of up to 4 words, 3 times in a row,
RUN_LETTERS = re.compile(r"([^\W\d_]{1,4})\1{3,}")  # or up to 4 letters 4 times in a row or more,
LETTERS_SPANNED = 8  # over 8 letters or more: "Serererer", "SSSSSSSS", not "fiiiii"
RANDOM_STRINGS = 8  # strings of random letters in each set's degenerate inputs
GOAL = {"precision": 0.8, "recall": 0.9}
LOOP_CHOICES = 8  # the repetition flag's thresholds tried: 2 to 8 copies in a row


@dataclass
class Case:
    kind: str
    source: str
    reference: str | None = None  # what the output should say; None for a degenerate input
    acceptable: frozenset[str] = field(default_factory=frozenset)  # a degenerate input's: its renderings' words


@dataclass
class Judged:
    case: Case
    output: str
    signals: Signals
    detached: bool | None  # None: between B90 and B99, where the rule cannot tell
    oscillatory: bool

    @property
    def hallucination(self) -> bool | None:
        return True if self.oscillatory else self.detached


def oscillates(text: str) -> bool:
    """A word n-gram (n <= RUN_NGRAM) RUN_WORDS times in a row, or up to four letters over LETTERS_SPANNED letters."""
    w = words(text)
    for n in range(1, RUN_NGRAM + 1):
        for i in range(len(w) - RUN_WORDS * n + 1):
            if all(w[i + k * n : i + (k + 1) * n] == w[i : i + n] for k in range(1, RUN_WORDS)):
                return True
    return any(len(m.group(0)) >= LETTERS_SPANNED for m in RUN_LETTERS.finditer(text))


def letter_words(text: str) -> list[str]:
    return [w for w in words(text) if any(c.isalpha() for c in w)]


def perturbations(sentence: str, rng: random.Random) -> list[tuple[str, str]]:
    """The sentence changed five ways (fewer where it is too short for some), each (kind, text)."""
    tokens = sentence.split()
    out = [("insert-frequent", f"{rng.choice(FREQUENT)} {sentence}"), ("insert-odd", f"{rng.choice(ODD)} {sentence}")]
    long = [i for i, t in enumerate(tokens) if len(t) >= 4 and t.isalpha()]
    if long:
        i = rng.choice(long)
        j, t = rng.randrange(1, len(tokens[i]) - 2), tokens[i]  # two inner letters swapped: the first and last stay
        out.append(("misspelt", " ".join(tokens[:i] + [t[:j] + t[j + 1] + t[j] + t[j + 2 :]] + tokens[i + 1 :])))
    if len(tokens) >= 3:
        i = rng.randrange(len(tokens))
        out.append(("word-dropped", " ".join(tokens[:i] + tokens[i + 1 :])))
    if tokens:
        i = rng.randrange(len(tokens))
        out.append(("word-doubled", " ".join(tokens[: i + 1] + tokens[i:])))
    return out


def handwritten(split: str, target: str, rng: random.Random) -> list[Case]:
    """The set's half of the degenerate and off-domain inputs, and its strings of random letters."""
    half = SETS.index(split)
    side = LANGUAGES.index(target)  # the German renderings, then the French ones
    cases = [Case("degenerate", d[0], None, frozenset(d[side].split())) for d in DEGENERATE[half::2]]
    for _ in range(RANDOM_STRINGS):
        letters = ("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 8))) for _ in range(3))
        cases.append(Case("degenerate", " ".join(list(letters)[: rng.randint(1, 3)])))
    return cases + [Case("off-domain", s[0], s[side]) for s in OFF_DOMAIN[half::2]]


def bounds(hypotheses: list[str], references: list[str]) -> tuple[float, float]:
    """B90 and B99: quantiles of the translations' chrF against the reference half the set away."""
    other = references[len(references) // 2 :] + references[: len(references) // 2]
    b90, b99 = np.quantile(sentence_chrf(hypotheses, other), [DETACHED, ATTACHED])
    return float(b90), float(b99)


def judge(cases: list[Case], translations: list, b90: float, b99: float) -> list[Judged]:
    """Each case's output labelled by the module's rule."""
    with_reference = [i for i, c in enumerate(cases) if c.reference is not None]
    outputs = [translations[i].text for i in with_reference]
    to_reference = sentence_chrf(outputs, [cases[i].reference for i in with_reference])
    to_source = sentence_chrf(outputs, [cases[i].source for i in with_reference])
    nearest = dict(zip(with_reference, np.maximum(to_reference, to_source)))
    judged = []
    for i, (case, t) in enumerate(zip(cases, translations, strict=True)):
        if t.quality is None:  # no letter in it ("42", "..."): the server keeps it as written, no model sees it
            continue
        said = letter_words(t.text)
        if not said:
            detached = False  # nothing said: an omission, not an invention
        elif case.reference is not None:
            detached = True if nearest[i] < b90 else False if nearest[i] >= b99 else None
        else:
            grounded = set(words(case.source)) | case.acceptable
            detached = sum(w not in grounded for w in said) * 2 >= len(said)
        oscillatory = oscillates(t.text) and not oscillates(case.source)
        judged.append(Judged(case, t.text, t.quality.signals, detached, oscillatory))
    return judged


def build_and_judge(pair: str, split: str, calibration: Calibration, data: Path, limit: int | None) -> tuple:
    """The set built from `split` for `pair`, translated and judged, and its bounds B90 and B99."""
    source, target = pair.split("-")
    third = next(x for x in LANGUAGES if x not in (source, target))
    lines = {x: list(read_lines(data / f"{split}.{x}.gz"))[:limit] for x in LANGUAGES}
    natural = [Case("natural", s, r) for s, r in zip(lines[source], lines[target], strict=True)]
    _, translated = asyncio.run(translate_file(checkpoint(pair), [c.source for c in natural], None, None, calibration))
    b90, b99 = bounds([t.text for t in translated], lines[target])
    chrf = sentence_chrf([t.text for t in translated], lines[target])
    rng = random.Random(f"{pair} {split}")
    cases = [
        Case(kind, text, c.reference)
        for c, score in zip(natural, chrf)
        if score >= calibration.chrf_threshold
        for kind, text in perturbations(c.source, rng)
    ]
    cases += [Case("target-language", r, r) for r in lines[target]]
    cases += [Case("other-language", o, r) for o, r in zip(lines[third], lines[target], strict=True)]
    cases += handwritten(split, target, rng)
    _, more = asyncio.run(translate_file(checkpoint(pair), [c.source for c in cases], None, None, calibration))
    return judge(natural + cases, translated + more, b90, b99), (b90, b99)


def best_threshold(scores: list[float] | np.ndarray, positives: list[bool] | np.ndarray, precision: float) -> float:
    """The threshold of a flag raised at `scores` at or above it: of the cuts between two different scores, the one
    with the highest recall among those whose precision here is at least `precision` (where none is, the best F1),
    placed halfway to the next score down."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="mergesort")
    s, p = np.asarray(scores, dtype=np.float64)[order], np.asarray(positives, dtype=bool)[order]
    cut = np.r_[s[1:] < s[:-1], True]  # flagging the first k + 1 is a threshold only where the next score differs
    hits = np.cumsum(p)
    precisions, recalls = hits / np.arange(1, len(s) + 1), hits / max(int(p.sum()), 1)
    good = cut & (precisions >= precision)
    if good.any():
        k = int(np.flatnonzero(good)[-1])
    else:
        f1 = 2 * precisions * recalls / np.maximum(precisions + recalls, 1e-12)
        k = int(np.where(cut, f1, -1).argmax())
    return float((s[k] + s[k + 1]) / 2) if k + 1 < len(s) else float(np.nextafter(s[k], -np.inf))


def precision_recall(flagged: np.ndarray, labels: list[bool | None]) -> dict[str, float | int | None]:
    """How a flag does against labels (None: unlabelled, left out but counted)."""
    known = np.asarray([x is not None for x in labels])
    positives = np.asarray([x is True for x in labels])
    hits, raised = int((flagged & positives).sum()), int((flagged & known).sum())
    return {
        "flagged": raised, "labelled": int(positives.sum()), "found": hits,
        "precision": round(hits / raised, 4) if raised else None,
        "recall": round(hits / positives.sum(), 4) if positives.any() else None,
        "flagged_unclear": int((flagged & ~known).sum()),
        "precision_unclear_as_negatives": round(hits / flagged.sum(), 4) if flagged.any() else None,
    }  # fmt: skip


def scores(judged: list[Judged], thresholds: dict[str, float]) -> dict[str, dict]:
    """The flags' precision and recall on a judged set, raised by model/confidence.py's rule with `thresholds`."""
    raised = [flags(j.signals, thresholds) for j in judged]
    by_hallucination = np.asarray(["hallucination" in r for r in raised])
    by_repetition = np.asarray(["repetition" in r for r in raised])
    by_coverage = np.asarray(["coverage" in r for r in raised])
    hallucinated = [j.hallucination for j in judged]
    return {
        "hallucination": precision_recall(by_hallucination, hallucinated),
        "repetition": precision_recall(by_repetition, [j.oscillatory for j in judged]),
        "coverage": precision_recall(by_coverage, hallucinated),
        "either": precision_recall(by_hallucination | by_repetition, hallucinated),
        "any": precision_recall(by_hallucination | by_repetition | by_coverage, hallucinated),
    }


def best_loops(signals: list[Signals], positives: list[bool], precision: float) -> dict[str, int]:
    """The repetition flag's two thresholds (copies in a row in the words, in the tokens: `loop`, `token_loop`) with
    the highest recall among those whose precision here is at least `precision`, the surer first where two find as
    many (where none is that sure, the best F1)."""
    y = np.asarray(positives, dtype=bool)
    words, tokens = (np.asarray([getattr(s, f) for s in signals]) for f in ("loop", "token_loop"))
    tried = []
    for in_words in range(2, LOOP_CHOICES + 1):
        for in_tokens in range(2, LOOP_CHOICES + 1):
            flagged = (words >= in_words) | (tokens >= in_tokens)
            hits, raised = int((flagged & y).sum()), int(flagged.sum())
            p, r = hits / max(raised, 1), hits / max(int(y.sum()), 1)
            f1 = 2 * p * r / max(p + r, 1e-12)
            rank = (p >= precision, r if p >= precision else f1, p)
            tried.append((rank, {"loop": in_words, "token_loop": in_tokens}))
    return max(tried, key=lambda t: t[0])[1]


def choose(judged: list[Judged], thresholds: dict[str, float]) -> dict[str, float]:
    """`thresholds` with the hallucination and repetition flags' chosen on a judged set: for each, the highest recall
    at GOAL's precision there (`best_threshold`, `best_loops`), against what the flag names (unlabelled outputs left
    out)."""
    known = [j for j in judged if j.hallucination is not None]
    means = np.asarray([j.signals.mean_logprob for j in known])
    hallucinated = np.asarray([j.hallucination for j in known])
    loops = best_loops([j.signals for j in judged], [j.oscillatory for j in judged], GOAL["precision"])
    return thresholds | loops | {"hallucination": round(-best_threshold(-means, hallucinated, GOAL["precision"]), 4)}


def kinds(judged: list[Judged], thresholds: dict[str, float]) -> dict[str, dict[str, int]]:
    """Each kind of input's cases, hallucinations (detached, oscillatory), unlabelled outputs and flags raised."""
    out: dict[str, dict[str, int]] = {}
    for j in judged:
        raised = flags(j.signals, thresholds)
        counts = {"cases": True, "hallucinations": j.hallucination is True, "detached": j.detached is True,
                  "oscillatory": j.oscillatory, "unclear": j.hallucination is None,
                  "flagged_hallucination": "hallucination" in raised, "flagged_repetition": "repetition" in raised,
                  "flagged_coverage": "coverage" in raised}  # fmt: skip
        row = out.setdefault(j.case.kind, dict.fromkeys(counts, 0))
        for key, count in counts.items():
            row[key] += int(count)
    return out


def dump(path: Path, pair: str, split: str, judged: list[Judged], thresholds: dict[str, float]) -> None:
    with path.open("a") as f:
        for j in judged:
            f.write(json.dumps({
                "pair": pair, "set": split, "kind": j.case.kind, "input": j.case.source, "reference": j.case.reference,
                "output": j.output, "hallucination": j.hallucination, "detached": j.detached,
                "oscillatory": j.oscillatory, "signals": j.signals.as_dict(), "flags": flags(j.signals, thresholds),
            }, ensure_ascii=False) + "\n")  # fmt: skip


def measure(pair: str, calibration_dir: Path, data: Path, limit: int | None, dump_to: Path | None) -> dict:
    """One pair's sets built, judged and scored: the calibration's thresholds and those chosen on val."""
    calibration = load_calibration(calibration_dir, SETS[1])
    (val, val_bounds), (test, test_bounds) = (build_and_judge(pair, s, calibration, data, limit) for s in SETS)
    chosen = choose(val, calibration.thresholds)
    if dump_to is not None:
        for split, judged in zip(SETS, (val, test)):
            dump(dump_to, pair, split, judged, calibration.thresholds)
    keys = ("hallucination", "loop", "token_loop")
    return {
        "pair": pair, "calibration": str(calibration_dir / "confidence.json"),
        "bounds_chrf": {s: {"b90": round(b[0], 2), "b99": round(b[1], 2)}
                        for s, b in zip(SETS, (val_bounds, test_bounds))},
        "kinds": kinds(test, calibration.thresholds),
        "thresholds": {"calibration": {k: calibration.thresholds[k] for k in keys},
                       "chosen_on_val": {k: chosen[k] for k in keys}},
        "test": {"calibration": scores(test, calibration.thresholds), "chosen_on_val": scores(test, chosen)},
        "val": {"calibration": scores(val, calibration.thresholds), "chosen_on_val": scores(val, chosen)},
        "goal": GOAL,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict]:
    p = pair_arguments(__doc__)
    p.add_argument("--limit", type=int, help="the first N lines of each set only (the hand-written inputs all)")
    p.add_argument("--dump", type=Path, help="write every judged case here, one JSON line each")
    args = p.parse_args(argv)
    if args.dump is not None:
        args.dump.write_text("")
    return each_pair(p, args, lambda pair, directory: measure(pair, directory, args.data, args.limit, args.dump))


if __name__ == "__main__":
    main()
