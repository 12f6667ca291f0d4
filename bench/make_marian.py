"""A Marian model of OPUS-MT's size with seeded random weights, in Hugging Face's layout, for bench/peers.py.

    python bench/make_marian.py --out /tmp/opus-size-hf
    nmt-import marian /tmp/opus-size-hf --out /tmp/opus-size
    python bench/peers.py --model-dir /tmp/opus-size --src ../shared/data/multi30k/test_2016_flickr.en.gz

d_model 512, 6 + 6 layers, 8 heads, FFN 2048, swish, a shared vocabulary of 58,101 (SentencePiece models trained on
Multi30k's training text, padded with pieces no text produces), as Helsinki-NLP/opus-mt-en-de has. The weights are
random, so the translations are nonsense of full length; the speed is a real model's. Needs the test set
(transformers, sentencepiece).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.importers.marian_fixture import build_marian


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    build_marian(
        args.out, shared=True, seed=args.seed, d_model=512, layers=6, heads=8, ffn=2048, spm_vocab=6000,
        init_std=0.1, vocab_size=58101, lines=29000,
    )  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
