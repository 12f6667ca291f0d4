"""The worst shapes of structured input, sent at 1x, 2x and 4x their size to a real nmt-serve: does the work grow
faster than the input?

    python bench/hostile_shapes.py [--model-dir DIR] [--threads 2] [--repeat 3] [--only NAME ...]

Each shape is a request whose structure is what hurts: markup nested thousands deep, thousands of `<br>`, comments
or kept elements in one sentence, many tiny sentences, one huge sentence, blank lines and format characters, long
lists, forms (the LibreTranslate routes). Its 4x size fits the default limits (NMT_MAX_REQUEST_CHARS 20,000
characters, NMT_MAX_REQUEST_SEQUENCES, NMT_MAX_BATCH_TEXTS, NMT_MAX_INPUT_TOKENS with `truncate`), so every size
gets its 200 and the time measured is the work. The server is the bundled model, eager (NMT_COMPILE=off), on a
free loopback port, and nothing else runs on it: each size is sent --repeat times, one at a time, and the median
kept. A row prints the status and seconds at each size and the ratios 2x/1x and 4x/1x: linear work gives at most
2 and 4 (less where a fixed cost, the decoding of the same sentence, dominates); a ratio over 1.5 times that is
flagged `SUPERLINEAR`. Then the CPU and one JSON line. Exits 1 if a shape is superlinear or is not answered 200.

`corpus()` is the same shapes at their largest size plus the malformed variants, each with the status it must
get: tests/app/test_structure.py and bench/chaos.py's `hostile-structure` scenario replay it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import DEFAULT_MODEL, cpu_description
from bench.server import eager_server

SIZES = (1, 2, 4)
SLACK = 1.5  # a ratio over SLACK x the size ratio is flagged superlinear (timing noise stays well under it)
LIBRE = "/libretranslate"
FORMAT_CHARACTERS = "e\u0301\u200d\u202e\U0001f469\u200d\U0001f467 \u2066a\u2069\u00ad\ufeff "


@dataclass(frozen=True)
class Shape:
    name: str
    path: str
    count: int  # repetitions of the shape's unit at 1x
    fields: Callable[[int], dict]  # repetitions -> the request's fields
    encoding: str = "json"  # or "form", "multipart" (the LibreTranslate routes read both)

    def request(self, scale: int) -> tuple[bytes, str]:
        """The body and its content type at `scale` x the shape's size."""
        return encode(self.fields(self.count * scale), self.encoding)


def encode(fields: dict, encoding: str) -> tuple[bytes, str]:
    if encoding == "json":
        return json.dumps(fields, ensure_ascii=False).encode(), "application/json"
    if encoding == "form":
        return urlencode(fields).encode(), "application/x-www-form-urlencoded"
    boundary = "nmt-hostile-shapes"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    return ("".join(parts) + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}"


def html(page: str) -> dict:
    return {"text": page, "format": "html", "truncate": True}


def libre(q, **more) -> dict:
    return {"q": q, "source": "en", "target": "de", **more}


SHAPES = [
    Shape("html-inline-depth", "/translate", 700, lambda k: html("<p>" + "<b>" * k + "A dog runs." + "</b>" * k + "</p>")),
    Shape("html-inline-depth-text", "/translate", 300, lambda k: html("<p>" + "<span>a " * k + "</span>" * k + "</p>")),
    Shape("html-block-depth", "/translate", 450, lambda k: html("<div>" * k + "A dog runs." + "</div>" * k)),
    Shape("html-inline-in-block-depth", "/translate", 700,
          lambda k: html("<a>" * k + "<h3>A dog runs.</h3>" + "</a>" * k)),
    Shape("html-untranslated-depth", "/translate", 190,
          lambda k: html('<div translate="no">' * k + "A dog." + "</div>" * k + "<p>A dog runs.</p>")),
    Shape("html-br-storm", "/translate", 1200, lambda k: html("<p>A dog" + "<br>" * k + "runs.</p>")),
    Shape("html-inline-siblings", "/translate", 550, lambda k: html("<p>" + "<b>a</b> " * k + "</p>")),
    Shape("html-kept-siblings", "/translate", 330, lambda k: html("<p>" + "<code>x</code> " * k + "</p>")),
    Shape("html-comments", "/translate", 490, lambda k: html("<p>A dog" + "<!-- c -->" * k + " runs.</p>")),
    Shape("html-attributes", "/translate", 450,
          lambda k: html("<p " + 'data-a="b" ' * k + 'title="A dog.">A cat runs.</p>')),
    Shape("html-entities", "/translate", 190, lambda k: html("<p>" + "&amp;&#x1F600;&bogus;&#0; " * k + "</p>")),
    Shape("html-tags-only", "/translate", 380, lambda k: html("<span></span>" * k)),
    Shape("html-unclosed-paragraphs", "/translate", 30, lambda k: html("<p>A dog." * k)),
    Shape("html-script", "/translate", 1600, lambda k: html("<script>" + "<a " * k + "</script><p>A dog.</p>")),
    Shape("html-text-with-lt", "/translate", 800, lambda k: html("<p>" + "a < b " * k + "</p>")),
    Shape("text-tiny-sentences", "/translate", 30, lambda k: {"text": "A dog. " * k}),
    Shape("text-tiny-lines", "/translate", 30, lambda k: {"text": "A dog\r\n" * k, "split": "lines"}),
    Shape("text-blank-lines", "/translate", 990, lambda k: {"text": "\r\n \u2028\t" * k + "A dog runs."}),
    Shape("text-one-huge-sentence", "/translate", 990, lambda k: {"text": "word " * k, "truncate": True}),
    Shape("text-format-characters", "/translate", 350, lambda k: {"text": FORMAT_CHARACTERS * k, "truncate": True}),
    Shape("text-many-texts", "/translate", 16, lambda k: {"text": ["A dog."] * k}),
    Shape("tokenize-long", "/tokenize", 380, lambda k: {"text": "A café runs. " * k}),
    Shape("detokenize-long", "/detokenize", 40_000, lambda k: {"ids": [5, 120, 7, 2] * (k // 4)}),
    Shape("libre-q-list", f"{LIBRE}/translate", 16, lambda k: libre(["A dog."] * k)),
    Shape("libre-html", f"{LIBRE}/translate", 1200,
          lambda k: libre("<p>A <i>dog</i>" + "<br>" * k + "runs.</p>", format="html")),
    Shape("libre-form", f"{LIBRE}/translate", 30, lambda k: libre("A dog. " * k), "form"),
    Shape("libre-multipart", f"{LIBRE}/translate", 30, lambda k: libre("A dog. " * k), "multipart"),
]  # fmt: skip
# (name, path, body, content type, status): malformed or over-limit variants, and each one's documented answer
MALFORMED = [
    ("html-crossing-deep", "/translate", html("<p>" + "<b><i>" * 500 + "x" + "</b></i>" * 500 + "</p>"), 422),
    ("html-unclosed-inline-deep", "/translate", html("<p>" + "<b>" * 2000 + "x</p>"), 422),
    ("html-stray-end-tags", "/translate", html("</b>" * 3000 + "<p>x</p>"), 422),
    ("html-unterminated-comment", "/translate", html("<p>x<!--" + "-" * 10_000), 422),
    ("html-unterminated-tags", "/translate", html("<a " * 5000), 422),
    ("html-over-the-limit", "/translate", html("<p>" + "<b>" * 3000 + "x" + "</b>" * 3000 + "</p>"), 413),
    ("text-too-many-sentences", "/translate", {"text": "A. " * 5000}, 413),
    ("text-huge-sentence", "/translate", {"text": "word " * 3000}, 413),
    ("tokenize-over-the-limit", "/tokenize", {"text": "a" * 30_000}, 413),
    ("detokenize-past-the-vocabulary", "/detokenize", {"ids": [[0] * 1000, [10**9]]}, 422),
    ("libre-q-wrong-type", f"{LIBRE}/translate", libre({"a": [1, 2]}), 400),
    ("libre-q-too-many", f"{LIBRE}/translate", libre(["a"] * 1000), 400),
    ("libre-q-over-the-limit", f"{LIBRE}/translate", libre("a. " * 8000), 400),
]  # fmt: skip


def corpus() -> list[tuple[str, str, bytes, str, int]]:
    """(name, path, body, content type, status): every shape at 4x (a 200), then the malformed variants."""
    out = [(s.name, s.path, *s.request(SIZES[-1]), 200) for s in SHAPES]
    return out + [(name, path, *encode(fields, "json"), status) for name, path, fields, status in MALFORMED]


def timed(client: httpx.Client, shape: Shape, scale: int, repeat: int) -> tuple[int, float]:
    """The status (0: none, the connection closed) and the median seconds of `repeat` requests of the shape at
    `scale`."""
    body, content_type = shape.request(scale)
    seconds, statuses = [], set()
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            statuses.add(client.post(shape.path, content=body, headers={"content-type": content_type}).status_code)
        except httpx.HTTPError:  # no answer: the connection was closed or reset
            statuses.add(0)
        seconds.append(time.perf_counter() - t0)
    return (0 if 0 in statuses else max(statuses)), statistics.median(seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(DEFAULT_MODEL))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", nargs="*", help="shape names (default: all)")
    args = p.parse_args()
    shapes = [s for s in SHAPES if not args.only or s.name in args.only]
    rows, bad = [], 0
    header = f"{'shape':28s} {'bytes at 1x':>11s} " + " ".join(f"{f'{s}x':>14s}" for s in SIZES) + "  2x/1x  4x/1x"
    print(header)
    server = eager_server(args.model_dir, args.threads)
    with server, httpx.Client(base_url=server.base, timeout=600) as client:
        for shape in shapes:
            results = [timed(client, shape, scale, args.repeat) for scale in SIZES]
            ratios = [t / results[0][1] for _, t in results[1:]]
            superlinear = any(r > SLACK * s for r, s in zip(ratios, SIZES[1:]))
            failed = any(status != 200 for status, _ in results)
            bad += superlinear or failed
            size = len(shape.request(1)[0])
            cells = " ".join(f"{status} {t:8.3f}s" for status, t in results)
            flag = "  SUPERLINEAR" if superlinear else "  NOT ANSWERED 200" if failed else ""
            print(f"{shape.name:28s} {size:11d} {cells}  {ratios[0]:5.2f}  {ratios[1]:5.2f}{flag}", flush=True)
            rows.append({"shape": shape.name, "bytes_1x": size, "status": [s for s, _ in results],
                         "seconds": [round(t, 4) for _, t in results], "ratios": [round(r, 2) for r in ratios]})  # fmt: skip
    cpu = cpu_description()
    print(f"CPU: {cpu}")
    print(json.dumps({"shapes": rows, "repeat": args.repeat, "threads": args.threads, "cpu": cpu, "ok": not bad}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
