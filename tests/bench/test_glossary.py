"""bench/glossary.py: a tiny run builds its term set from Multi30k and every forced translation holds its terms."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.calibration_fixture import needs_data

ROOT = Path(__file__).resolve().parents[2]


@needs_data
def test_a_tiny_run_holds_every_term_and_leaves_unmatched_glossaries_alone():
    out = subprocess.run(
        [sys.executable, "bench/glossary.py", "--limit", "24", "--rounds", "0", "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert "cores, flags:" in out[0]
    terms, identical = json.loads(out[1]), json.loads(out[2])
    assert terms["with_terms"] > 5 and terms["terms"] >= terms["with_terms"]
    assert terms["all_terms_held"] == 1.0
    assert identical == {"identical": True, "differing": 0}


@needs_data
def test_a_run_where_no_sentence_gets_a_term_says_so_and_prints_what_it_can():
    done = subprocess.run(
        [sys.executable, "bench/glossary.py", "--limit", "1", "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    out = done.stdout.splitlines()
    terms, identical = json.loads(out[1]), json.loads(out[2])
    assert (terms["sentences"], terms["with_terms"], terms["terms"]) == (1, 0, 0)
    assert terms["all_terms_held"] is None and terms["bleu_constrained"] is None
    assert identical == {"identical": True, "differing": 0}
    assert len(out) == 3  # no speed rounds without a term
    assert "no sentence of the 1 got a term" in done.stderr
