"""requirements/*.txt, the locked dependency sets, read: the pins of a set (tests/scripts' tests share them)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
ENTRY = re.compile(r"^([A-Za-z0-9][\w.-]*)==(\S+?)(?: ; (.+?))? \\$")


@cache
def entries(name: str) -> list[tuple[str, str, str, list[str]]]:
    """(package, version, marker, hashes) of each pin in requirements/NAME.txt."""
    out = []
    for line in (LOCKS / f"{name}.txt").read_text().splitlines():
        if m := ENTRY.match(line):
            out.append((canonicalize_name(m.group(1)), m.group(2), m.group(3) or "", []))
        elif line.strip().startswith("--hash="):
            out[-1][3].append(line.strip().removeprefix("--hash=").rstrip(" \\"))
    return out
