"""A tiny synthetic English->German corpus made from templates, for fast tests (never the shared data)."""

from __future__ import annotations

import random

SUBJECTS = [
    ("a man", "ein Mann"), ("a woman", "eine Frau"), ("a dog", "ein Hund"), ("a child", "ein Kind"),
    ("two girls", "zwei Mädchen"), ("the boy", "der Junge"), ("an old man", "ein alter Mann"),
    ("a young woman", "eine junge Frau"), ("three people", "drei Leute"), ("the cat", "die Katze"),
]  # fmt: skip
VERBS = [
    ("is running", "läuft"), ("is sitting", "sitzt"), ("is playing", "spielt"), ("is eating", "isst"),
    ("is sleeping", "schläft"), ("is jumping", "springt"), ("is standing", "steht"),
]  # fmt: skip
PLACES = [
    ("in the park", "im Park"), ("on the street", "auf der Straße"), ("at the beach", "am Strand"),
    ("in the snow", "im Schnee"), ("near the water", "in der Nähe des Wassers"), ("in a café", "in einem Café"),
]  # fmt: skip


def synthetic_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n (English, German) sentence pairs."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        (se, sd), (ve, vd), (pe, pd) = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES)
        en, de = f"{se} {ve} {pe}.", f"{sd} {vd} {pd}."
        out.append((en[0].upper() + en[1:], de[0].upper() + de[1:]))
    return out
