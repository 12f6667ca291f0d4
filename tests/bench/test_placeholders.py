"""bench/placeholders.py: its spans go in at word boundaries, and a tiny run keeps every one of them and prints a line
a case."""

from __future__ import annotations

import json
import random

from bench.placeholders import inject, kept, main, rest
from tests.bench.calibration_fixture import needs_data

SENTENCE = "Two young men are playing football in the park."


def test_spans_go_in_at_word_boundaries_one_to_three_a_sentence():
    rng = random.Random(0)
    for kind in ("placeholders", "tags", "urls", "emails", "code", "terms", "patterns"):
        for _ in range(20):
            text, spans = inject(SENTENCE, [kind], rng)
            assert 1 <= len(spans) <= 3 and all(s in text.split(" ") or " " in s for s in spans)
            assert rest(text, spans) == SENTENCE and kept(text, text, spans)
    assert not kept("a {x} b", "a b", ["{x}"]) and not kept("a {x} b", "a {x} {x} b", ["{x}"])


@needs_data
def test_a_tiny_run_keeps_every_span_in_every_mode(capsys):
    results = main(["--pairs", "en-de", "--limit", "10"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("CPU: ") and [json.loads(line) for line in lines[1:]] == results
    assert [(r["mode"], r["kind"]) for r in results] == [
        *(("text", k) for k in ("placeholders", "tags", "urls", "emails", "code", "terms", "patterns")),
        ("documents", "all"), ("html", "all"), ("stream", "all"),
    ]  # fmt: skip
    for r in results:
        assert r["kept_pct"] == 100.0 and r["spans"] >= r["texts"], r
        assert r["bleu_vs_clean"] > 90, r  # the model reads the same words as without the spans
    assert results[-2]["tags_kept_pct"] == 100.0 and results[-1]["deltas_add_up_pct"] == 100.0
