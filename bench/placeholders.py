"""Protected spans: does every one come back verbatim exactly once, and what do they cost the rest of the translation.

    python bench/placeholders.py [--pairs en-de en-fr] [--limit N] [--seed 0] [--data DIR]

For each pair, takes Multi30k's test_2016_flickr English sources (read from --data, never copied) and puts 1 to 3
spans into each sentence at random word boundaries (seeded), then translates through the serving engine in
process (greedy, app/protect/'s masking and restoring) with every kind, the terms and the patterns protected:

- text, one kind at a time (placeholders, tags, urls, emails, code, terms, patterns): each sentence one text;
- documents: the sentences five at a time, each with spans of any kind, joined into one text (the engine splits it),
  against the clean sentences joined and translated as documents;
- html: each sentence a page, `<p>` with its spans as text and its last word in `<b>`;
- stream: each sentence with spans of any kind, streamed; its tokens' texts joined.

Prints the CPU, then one JSON line per pair and case: `kept_pct`, the share of texts in which every span comes
back verbatim exactly as many times as it was sent (goal: 100; by construction, since the model never reads a
span), and BLEU (sacrebleu) of the rest, the spans taken out of the translations and their spaces tidied:
`bleu_vs_clean` against the translations of the clean sources (100: the same words), and against Multi30k's
human references beside the clean translations' (`bleu_vs_reference`, `clean_bleu_vs_reference`; goal: within
1.0). A stream's case also checks that its tokens' texts add up to its last event's text (`deltas_add_up_pct`).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.text.streaming import Token
from bench.common import cpu_description
from bench.confidence import DATA, checkpoint
from model.tokenizer import read_lines

PAIRS = ("en-de", "en-fr")
SPLIT = "test_2016_flickr"
CHUNK = 64  # texts per engine call
STREAMS = 32  # streams at once
DOCUMENT = 5  # sentences a document
TERMS = ["nmt-serve", "Multi30k", "OpenStreetMap", "PyTorch"]
PATTERNS = [r"\b[A-Z]{2,}-\d+\b", r"#[0-9A-F]{6}\b"]
NAMES = ["name", "user", "count", "city", "total", "id"]


def span(kind: str, rng: random.Random) -> str:
    """One span of a kind, drawn at random."""
    name, n = rng.choice(NAMES), rng.randint(0, 99)
    return rng.choice({
        "placeholders": [f"{{{name}}}", f"{{{n % 10}}}", f"{{{{ {name} }}}}", "%s", "%d", f"%{n % 9 + 1}$s",
                         f"%({name})d", f"${{{name}}}"],
        "tags": [f'<x id="{n}"/>', f"<bx id='{n}'/>", f'<ph id="{n}"/>'],
        "urls": [f"https://example.com/{name}?id={n}", f"www.{name}{n}.org/photos"],
        "emails": [f"{name}.{n}@example.org", f"{name}@mail.example.co.uk"],
        "code": [f"`ls -l {name}`", f"`{name}()`", f"``x = {n}``"],
        "terms": TERMS,
        "patterns": [f"JIRA-{n + 100}", f"#{n:02X}A7F3"],
    }[kind])  # fmt: skip


def inject(sentence: str, kinds: list[str], rng: random.Random) -> tuple[str, list[str]]:
    """The sentence with 1 to 3 spans (of `kinds`, drawn) at random word boundaries, and the spans. Two tags may
    come as a pair around a run of words: <g id="n"> ... </g>."""
    words, spans, wanted = sentence.split(), [], rng.randint(1, 3)
    while len(spans) < wanted:
        kind = rng.choice(kinds)
        if kind == "tags" and wanted - len(spans) >= 2 and rng.random() < 0.5:
            a = rng.randint(0, len(words) - 1)
            b = rng.randint(a + 1, len(words))
            opening = f'<g id="{rng.randint(0, 99)}">'
            words[a:b] = [opening, *words[a:b], "</g>"]
            spans += [opening, "</g>"]
            continue
        spans.append(span(kind, rng))
        words.insert(rng.randint(0, len(words)), spans[-1])
    return " ".join(words), spans


def page(text: str, word: str) -> str:
    """The text as an HTML paragraph, its spans as text, `word` (its last occurrence) in <b>."""
    i, e = text.rfind(word), lambda t: html.escape(t, quote=False)
    return f"<p>{e(text[:i])}<b>{e(word)}</b>{e(text[i + len(word) :])}</p>"


def kept(source: str, out: str, spans: list[str]) -> bool:
    return all(out.count(s) == source.count(s) for s in set(spans))


def rest(text: str, spans: list[str]) -> str:
    """A translation without its spans (each with the whitespace before it), its spaces tidied."""
    if spans:
        text = re.sub(r"\s*(?:" + "|".join(map(re.escape, sorted(set(spans), key=len, reverse=True))) + ")", "", text)
    return re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s+", " ", text)).strip()


async def translate(engine, texts: list[str], protect, format: str = "text", chunk: int = CHUNK) -> list[str]:
    out = []
    for i in range(0, len(texts), chunk):
        out += [t.text for t in await engine.translate(texts[i : i + chunk], format=format, protect=protect)]
        print(f"  {len(out)}/{len(texts)}", file=sys.stderr, end="\r", flush=True)
    return out


async def stream(engine, texts: list[str], protect) -> list[tuple[str, str]]:
    """Each text streamed: (its tokens' texts joined, its last event's text)."""

    async def one(text: str) -> tuple[str, str]:
        deltas, last = [], None
        async for event in await engine.translate_stream(text, protect=protect):
            if isinstance(event, Token):
                deltas.append(event.text)
            else:
                last = event.text
        return "".join(deltas), last

    out = []
    for i in range(0, len(texts), STREAMS):
        out += await asyncio.gather(*(one(t) for t in texts[i : i + STREAMS]))
    return out


def scores(case: dict, outs: list[str], spans: list[list[str]], clean: list[str], refs: list[str], base: float):
    import sacrebleu

    rests = [rest(o, s) for o, s in zip(outs, spans, strict=True)]
    return case | {
        "bleu_vs_clean": round(sacrebleu.corpus_bleu(rests, [clean]).score, 2),
        "bleu_vs_reference": round(sacrebleu.corpus_bleu(rests, [refs]).score, 2),
        "clean_bleu_vs_reference": round(base, 2),
        "goal": "kept_pct 100; bleu_vs_reference within 1.0 of clean_bleu_vs_reference",
    }


def pct(flags: list[bool]) -> float:
    return round(100 * sum(flags) / max(len(flags), 1), 2)


async def measure(pair: str, data: Path, limit: int | None, seed: int) -> list[dict]:
    import sacrebleu

    from app.loading import load_engine
    from app.protect.spans import KINDS, protection
    from app.settings import Settings

    target = pair.split("-")[1]
    sources = list(read_lines(data / f"{SPLIT}.en.gz"))[:limit]
    refs = list(read_lines(data / f"{SPLIT}.{target}.gz"))[:limit]
    protect = protection(True, TERMS, PATTERNS)
    settings = Settings(model_dir=checkpoint(pair), compile="off", max_batch_texts=CHUNK, request_timeout_s=3600)
    engine = load_engine(settings)
    engine.core.batcher.start()
    results, kinds = [], [*KINDS, "terms", "patterns"]
    try:
        clean = await translate(engine, sources, None)
        base = sacrebleu.corpus_bleu(clean, [refs]).score
        for kind in kinds:  # one kind at a time, one sentence a text
            rng = random.Random(f"{seed}-{kind}")
            texts, spans = zip(*(inject(s, [kind], rng) for s in sources))
            outs = await translate(engine, list(texts), protect)
            case = {"pair": pair, "mode": "text", "kind": kind, "texts": len(texts), "spans": sum(map(len, spans)),
                    "kept_pct": pct([kept(t, o, s) for t, o, s in zip(texts, outs, spans)])}  # fmt: skip
            results.append(scores(case, outs, list(spans), clean, refs, base))
            print(json.dumps(results[-1]), flush=True)
        rng = random.Random(f"{seed}-mixed")
        texts, spans = (list(x) for x in zip(*(inject(s, kinds, rng) for s in sources)))
        # documents: five sentences a text, against the clean documents translated as documents (Multi30k's
        # captions often have no full stop: the splitter cannot always tell them apart, with spans or without)
        starts = range(0, len(texts), DOCUMENT)
        docs, clean_docs = ([" ".join(xs[i : i + DOCUMENT]) for i in starts] for xs in (texts, sources))
        outs = await translate(engine, docs, protect, chunk=CHUNK // DOCUMENT)  # within NMT_MAX_REQUEST_CHARS
        doc_clean = await translate(engine, clean_docs, None, chunk=CHUNK // DOCUMENT)
        doc_spans = [[s for ss in spans[i : i + DOCUMENT] for s in ss] for i in starts]
        doc_refs = [" ".join(refs[i : i + DOCUMENT]) for i in starts]
        doc_base = sacrebleu.corpus_bleu(doc_clean, [doc_refs]).score
        case = {"pair": pair, "mode": "documents", "kind": "all", "texts": len(docs), "spans": sum(map(len, spans)),
                "kept_pct": pct([kept(t, o, s) for t, o, s in zip(docs, outs, doc_spans)])}  # fmt: skip
        results.append(scores(case, outs, doc_spans, doc_clean, doc_refs, doc_base))
        print(json.dumps(results[-1]), flush=True)
        # html: the spans as text (escaped), the sentence's last word in <b>
        pages = [page(t, s.split()[-1]) for t, s in zip(texts, sources, strict=True)]
        outs = await translate(engine, pages, protect, format="html")
        escaped = [[html.escape(s, quote=False) for s in ss] for ss in spans]
        case = {"pair": pair, "mode": "html", "kind": "all", "texts": len(pages), "spans": sum(map(len, spans)),
                "kept_pct": pct([kept(p, o, s) for p, o, s in zip(pages, outs, escaped)]),
                "tags_kept_pct": pct([re.findall(r"</?[pb]>", o) == ["<p>", "<b>", "</b>", "</p>"] for o in outs])}  # fmt: skip
        texts_out = [html.unescape(re.sub(r"</?[pb]>", "", o)) for o in outs]
        results.append(scores(case, texts_out, spans, clean, refs, base))
        print(json.dumps(results[-1]), flush=True)
        # streams
        streamed = await stream(engine, texts, protect)
        case = {"pair": pair, "mode": "stream", "kind": "all", "texts": len(texts), "spans": sum(map(len, spans)),
                "kept_pct": pct([kept(t, d, s) for t, (d, _), s in zip(texts, streamed, spans)]),
                "deltas_add_up_pct": pct([d == last for d, last in streamed])}  # fmt: skip
        results.append(scores(case, [d for d, _ in streamed], spans, clean, refs, base))
        print(json.dumps(results[-1]), flush=True)
    finally:
        engine.stop()
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=PAIRS)
    p.add_argument("--limit", type=int, help="the first N sentences only (a quick run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=DATA, help=f"Multi30k's directory (default {DATA})")
    args = p.parse_args(argv)
    print(f"CPU: {cpu_description()}", flush=True)
    return [r for pair in args.pairs for r in asyncio.run(measure(pair, args.data, args.limit, args.seed))]


if __name__ == "__main__":
    main()
