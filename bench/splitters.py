"""The sentence splitters considered for /translate's `split: "sentences"`, on hard cases and on speed.

    python bench/splitters.py [--repeat 20]

HARD_CASES are English texts with the sentences a reader would split them into: abbreviations ("Dr.", "U.S.",
"e.g.", "a.m."), decimals and prices, quotes, ellipses, e-mail and web addresses, lines without a full stop or a
capital letter. Each installed splitter is scored on how many texts it splits exactly so, and timed on all of them
repeated --repeat times as one text. nmt-serve uses sentencex (app/segment.py); pysbd and syntok are measured when
installed (`pip install pysbd syntok`). NLTK's punkt is left out: its model is a separate download from NLTK's data
hub, which a server must not need.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HARD_CASES: list[tuple[str, list[str]]] = [
    ("A woman with a red umbrella walks down a busy street. A dog follows her. It is raining.",
     ["A woman with a red umbrella walks down a busy street.", "A dog follows her.", "It is raining."]),
    ("Dr. Smith arrived at 10 a.m. and left early.", ["Dr. Smith arrived at 10 a.m. and left early."]),
    ("Mr. and Mrs. Brown live in the U.S. They moved there in 2010.",
     ["Mr. and Mrs. Brown live in the U.S.", "They moved there in 2010."]),
    ("The price rose by 3.5 percent. Analysts were surprised.",
     ["The price rose by 3.5 percent.", "Analysts were surprised."]),
    ("Bring fruit, e.g. apples or pears. Do not bring nuts.", ["Bring fruit, e.g. apples or pears.", "Do not bring nuts."]),
    ('He said, "Stop right there." Then he left.', ['He said, "Stop right there."', "Then he left."]),
    ('"Is it raining?" she asked. Nobody answered.', ['"Is it raining?" she asked.', "Nobody answered."]),
    ("Wait… what happened? I don't know!", ["Wait… what happened?", "I don't know!"]),
    ("I waited... and waited. Nobody came.", ["I waited... and waited.", "Nobody came."]),
    ("Version 2.0 was released on Jan. 5. It fixed many bugs.",
     ["Version 2.0 was released on Jan. 5.", "It fixed many bugs."]),
    ("Visit www.example.com for details. It is free.", ["Visit www.example.com for details.", "It is free."]),
    ("Write to info@example.org. We answer quickly.", ["Write to info@example.org.", "We answer quickly."]),
    ("The meeting is at 5 p.m. Please be on time.", ["The meeting is at 5 p.m.", "Please be on time."]),
    ("See Fig. 3 for the results. They are clear.", ["See Fig. 3 for the results.", "They are clear."]),
    ("Prof. Jones teaches at MIT. Her course is popular.", ["Prof. Jones teaches at MIT.", "Her course is popular."]),
    ("He works for Apple Inc. in California.", ["He works for Apple Inc. in California."]),
    ("What a day! We finally won.", ["What a day!", "We finally won."]),
    ("Is this right? Yes. It is.", ["Is this right?", "Yes.", "It is."]),
    ("The ratio was 1:2 (see note 4.). It held.", ["The ratio was 1:2 (see note 4.).", "It held."]),
    ("She bought eggs, milk, etc. and went home.", ["She bought eggs, milk, etc. and went home."]),
    ("A man sleeps on a bench", ["A man sleeps on a bench"]),
    ("two children play in the sand. their mother watches", ["two children play in the sand.", "their mother watches"]),
    ("He scored 9.5/10. Impressive!", ["He scored 9.5/10.", "Impressive!"]),
    ("The U.K. voted. The E.U. responded.", ["The U.K. voted.", "The E.U. responded."]),
    ("I live on St. James St. near the park.", ["I live on St. James St. near the park."]),
    ("(This is a note.) The text goes on.", ["(This is a note.)", "The text goes on."]),
    ("It cost $4.99. That is cheap.", ["It cost $4.99.", "That is cheap."]),
    ("Chapter 1. The Beginning", ["Chapter 1.", "The Beginning"]),
    ("No. 5 is my favourite. No. 7 is not.", ["No. 5 is my favourite.", "No. 7 is not."]),
    ("She asked: 'Why?' He shrugged.", ["She asked: 'Why?'", "He shrugged."]),
    ("The temperature was -3.2 °C. Roads froze.", ["The temperature was -3.2 °C.", "Roads froze."]),
]  # fmt: skip


def splitters() -> dict:
    """name -> (version, function text -> sentences), for each splitter installed."""
    found = {}
    import sentencex

    found["sentencex"] = (_version("sentencex"), lambda t: [s.strip() for s in sentencex.segment("en", t) if s.strip()])
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False)
        found["pysbd"] = (_version("pysbd"), lambda t: [s.strip() for s in seg.segment(t) if s.strip()])
    except ImportError:
        pass
    try:
        import syntok.segmenter as syntok

        def by_syntok(t: str) -> list[str]:
            return ["".join(tok.spacing + tok.value for tok in s).strip() for p in syntok.analyze(t) for s in p]

        found["syntok"] = (_version("syntok"), by_syntok)
    except ImportError:
        pass
    return found


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=20, help="the cases joined into one text this many times, timed")
    args = p.parse_args()
    from bench.common import cpu_description

    print(f"CPU: {cpu_description()}")
    text = " ".join(t for t, _ in HARD_CASES * args.repeat)
    for name, (version, split) in splitters().items():
        wrong = [(t, got) for t, want in HARD_CASES if (got := split(t)) != want]
        split(text)  # warm-up
        t0 = time.perf_counter()
        split(text)
        seconds = time.perf_counter() - t0
        print(f"{name} {version}: {len(HARD_CASES) - len(wrong)}/{len(HARD_CASES)} split right, "
              f"{len(text) / seconds / 1e6:.2f} M characters/s ({len(text):,} characters in {seconds * 1e3:.1f} ms)")  # fmt: skip
        for t, got in wrong:
            print(f"    {t!r} -> {got!r}")


if __name__ == "__main__":
    main()
