"""Glossaries forced in decoding: do the terms appear, what happens to BLEU, and what do they cost.

    python bench/glossary.py [--pair en-de] [--split val] [--limit N] [--beam-size 1] [--rounds 3]

Builds a term set from Multi30k (--split, default val; report test_2016_flickr once): for each sentence, the words
of its reference that the model's greedy translation does not use, each with the source word it aligns to (the
model's cross-attention over the reference, teacher-forced: model/search.py's alignment), 1 to 3 of them a sentence
(seeded). Each such sentence is then one request with its own inline glossary (source word -> reference word),
all of them at once in the running batch, through the serving engine (app/engine). Prints the CPU, then JSON lines:

- terms: the share of constrained translations holding every term as a whole word (goal: 1.0), how many put one
  after the sentence's end or lose its closing punctuation (`Ein Hund. Köter`; goal: 0), and BLEU against the
  references of those sentences' unconstrained and constrained translations (goal: constrained >= unconstrained);
- identical: whether a glossary none of whose terms occur leaves every translation bit-identical (goal: true);
- speed (medians of --rounds): a batch of 32 constrained requests against the same 32 without glossaries (goal:
  at most 1.5x the time), and 32 plain requests sharing the batch with 32 constrained ones against sharing it with
  32 plain ones (the plain requests' speed; goal: at least 0.95x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import cpu_description
from model.search import alignment
from model.tokenizer import read_lines

DATA = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data" / "multi30k")
SPLITS = {"val": "val", "test2016": "test_2016_flickr"}
WORD = re.compile(r"\w+")
BATCH = 32
COMMON = 100  # the most frequent words of each side are not terms (articles, prepositions, "man", "Frau")


def has_term(text: str, term: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


END = re.compile(r"[.!?…]+[\"'»“”)]*(?=\s+\S)")  # a sentence's end with more text after it


def after_the_end(text: str, terms) -> bool:
    """Whether a term stands after the translation's sentence ended (`Ein Hund. Köter`), or ends it without the
    punctuation the translation without terms ends with (caught by the caller)."""
    ends = list(END.finditer(text))
    return bool(ends) and any(has_term(text[ends[-1].end() :], t) for _, t in terms)


def words(text: str) -> list[str]:
    return [w for w in WORD.findall(text) if len(w) >= 3 and w.isalpha()]


def term_set(engine, sources: list[str], references: list[str], plain: list[str], seed: int) -> dict[int, tuple]:
    """Per sentence index: its glossary, (source word, reference word) pairs the greedy translation misses."""
    rng, tok, model = random.Random(seed), engine.tokenizer, engine.core.model
    common = {w for side in (sources, references) for w, _ in Counter(
        x.lower() for line in side for x in WORD.findall(line)).most_common(COMMON)}  # fmt: skip
    out = {}
    for i, (src, ref, hyp) in enumerate(zip(sources, references, plain)):
        used = {w.lower() for w in WORD.findall(hyp)}
        missing = [w for w in dict.fromkeys(words(ref)) if w.lower() not in used | common]
        if not missing:
            continue
        src_tokens = tok.tokenize(src, "source")
        ref_tokens = tok.tokenize(ref, "target", add_special_tokens=False)
        (aligned,) = alignment(model, [t.id for t in src_tokens], [[t.id for t in ref_tokens]])
        pairs = {}
        for word in missing:
            at = next((j for j, t in enumerate(ref_tokens) if t.start <= ref.find(word) < t.end), None)
            if at is None or ref.count(word) != 1:
                continue
            s = src_tokens[aligned[at]]
            source_word = next((w for w in words(src) if src.find(w) <= s.start < src.find(w) + len(w)), None)
            if (
                source_word
                and src.count(source_word) == 1
                and source_word not in pairs
                and source_word.lower() not in common
            ):
                pairs[source_word] = word
        if pairs:
            chosen = rng.sample(sorted(pairs.items()), min(len(pairs), rng.randint(1, 3)))
            out[i] = tuple(chosen)
    return out


async def translate(engine, texts: list[str], glossaries: list[tuple], decoding) -> list[str]:
    """Each text as its own request with its own glossary, all at once."""

    async def one(text, glossary):
        (t,) = await engine.translate([text], decoding=replace(decoding, glossary=glossary), split="none")
        return t.text

    out = []
    for i in range(0, len(texts), BATCH):
        out += await asyncio.gather(*(one(t, g) for t, g in zip(texts[i : i + BATCH], glossaries[i : i + BATCH])))
    return out


async def timed(engine, groups: list[tuple[list[str], list[tuple]]], decoding) -> list[float]:
    """Seconds until each group of requests, all sent at once, is answered."""
    t0 = time.perf_counter()

    async def group(texts, glossaries):
        await asyncio.gather(*(engine.translate([t], decoding=replace(decoding, glossary=g), split="none")
                               for t, g in zip(texts, glossaries)))  # fmt: skip
        return time.perf_counter() - t0

    return list(await asyncio.gather(*(group(t, g) for t, g in groups)))


async def main(args: argparse.Namespace) -> None:
    import sacrebleu

    from app.loading import load_engine
    from app.settings import Settings
    from app.text.limits import Decoding

    src_lang, tgt_lang = args.pair.split("-")
    split = SPLITS[args.split]
    sources = list(read_lines(DATA / f"{split}.{src_lang}.gz"))
    references = list(read_lines(DATA / f"{split}.{tgt_lang}.gz"))
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    engine = load_engine(Settings(
        model_dir=ROOT / "checkpoints" / f"multi30k-{args.pair}", compile="off", threads=args.threads,
        max_batch_size=64, max_queue=256,
    ))  # fmt: skip
    engine.core.batcher.start()
    decoding = Decoding(beam_size=args.beam_size)
    try:
        print(cpu_description(), flush=True)
        plain = await translate(engine, sources, [()] * len(sources), decoding)
        terms = await engine.core.batcher.call(term_set, engine, sources, references, plain, args.seed)
        idx = sorted(terms)
        figures = {
            "pair": args.pair, "split": args.split, "beam_size": args.beam_size, "sentences": len(sources),
            "with_terms": len(idx), "terms": sum(map(len, terms.values())), "all_terms_held": None,
            "term_after_the_end": None, "bleu_unconstrained": None, "bleu_constrained": None,
        }  # fmt: skip
        if idx:
            forced = await translate(engine, [sources[i] for i in idx], [terms[i] for i in idx], decoding)
            held = [all(has_term(f, t) for _, t in terms[i]) for i, f in zip(idx, forced)]
            refs = [references[i] for i in idx]
            stop = re.compile(r"[.!?…][\"'»“”)]*$")
            figures["all_terms_held"] = sum(held) / len(held)
            figures["term_after_the_end"] = sum(
                after_the_end(f, terms[i]) or (bool(stop.search(plain[i].strip())) and not stop.search(f.strip()))
                for i, f in zip(idx, forced)
            )
            figures["bleu_unconstrained"] = round(sacrebleu.corpus_bleu([plain[i] for i in idx], [refs]).score, 2)
            figures["bleu_constrained"] = round(sacrebleu.corpus_bleu(forced, [refs]).score, 2)
        else:
            print(f"no sentence of the {len(sources)} got a term (a reference word the greedy translation misses, "
                  "aligned to one source word): no term figures and no speed rounds; take more sentences (--limit)",
                  file=sys.stderr, flush=True)  # fmt: skip
        print(json.dumps(figures), flush=True)
        nowhere = (("zqxj", "Quux"), ("glossary term that never occurs", "nie"))
        other = await translate(engine, sources, [nowhere] * len(sources), decoding)
        print(json.dumps({"identical": other == plain, "differing": sum(a != b for a, b in zip(other, plain))}))
        if not args.rounds or not idx:  # the quality figures only
            return
        batch = idx[:BATCH]
        with_terms, none = [terms[i] for i in batch], [()] * len(batch)
        texts = [sources[i] for i in batch]
        others = [sources[i] for i in idx[BATCH : 2 * BATCH]] or texts
        ratios, shared = [], []
        for _ in range(args.rounds):
            (t_plain,) = await timed(engine, [(texts, none)], decoding)
            (t_forced,) = await timed(engine, [(texts, with_terms)], decoding)
            ratios.append(t_forced / t_plain)
            alone, _ = await timed(engine, [(others, [()] * len(others)), (texts, none)], decoding)
            beside, _ = await timed(engine, [(others, [()] * len(others)), (texts, with_terms)], decoding)
            shared.append(alone / beside)
        print(json.dumps({
            "batch": len(batch), "constrained_time_ratio": round(statistics.median(ratios), 3),
            "rounds": [round(r, 3) for r in ratios], "goal_at_most": 1.5,
            "plain_speed_beside_constrained": round(statistics.median(shared), 3),
            "rounds_beside": [round(r, 3) for r in shared], "goal_at_least": 0.95,
        }), flush=True)  # fmt: skip
    finally:
        engine.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", default="en-de", choices=["en-de", "en-fr"])
    p.add_argument("--split", default="val", choices=sorted(SPLITS))
    p.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="speed rounds (0: measure no speed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if args.limit < 0:
        p.error(f"--limit {args.limit}: a number of sentences, at least 0 (0 = all)")
    asyncio.run(main(args))
