"""The CPU this process runs on, as Linux's /proc/cpuinfo names it: its model and its feature flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CPUInfo:
    """What /proc/cpuinfo says of the first processor that says it (on Linux every processor lists the same)."""

    model: str  # "model name": "Intel(R) Xeon(R) Platinum 8488C"; "" where there is none (many ARM kernels, no /proc)
    flags: tuple[str, ...]  # "flags", in the file's order: ("fpu", ..., "avx2", ...); () where there are none


def cpu_info(path: str | Path = "/proc/cpuinfo") -> CPUInfo:
    """The first non-empty "model name" and "flags" of `path`; empty ones where it has none or cannot be read."""
    model, flags = "", ()
    try:
        text = Path(path).read_text()
    except OSError:
        return CPUInfo(model, flags)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = tuple(value.split())
    return CPUInfo(model, flags)
