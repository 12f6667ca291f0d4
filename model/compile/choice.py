"""The GEMMs of the large-row decoder steps, chosen on this CPU by timing the graph built each way.

Which GEMM kernels serve a 32-row decoder step fastest depends on the CPU, and not as one would guess: with AVX-512
oneDNN's packed kernels (Inductor's default mode) ran the bundled model's step in 3.2-3.3 ms against max-autotune's
3.5-3.7 ms, while on a 2-core AMD EPYC with AVX2 only max-autotune's (its C++ GEMM templates, chosen per linear
against oneDNN's) took 5.3-6.7 ms against the default's 6.5-7.5 (docs/performance-history.md). Max-autotune times
each linear alone; the whole step, its attention and its memory traffic included, is what serves. So where the
server is asked to tune (`compile_mode=max-autotune`, the default), a step graph from LARGE_ROWS rows on is built in
each of CANDIDATES, each is timed on the serving cache's own tensors at the graph's tuned row count (the candidates
taking turns, best of ROUNDS), and the fastest serves. The choice is written beside the packages with what it was
measured on (`environment`: the CPU, its vector ISA, torch, the thread count, this code), so a later start loads the
chosen package at once, and a package directory carried to another CPU is measured again there. The losing package
is removed.

    choice = read(record, expected)          # None: not measured for this environment
    timings = time_graphs(runs, inputs)      # {candidate: ms a step}
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from model.compile.store import put, temporary_for

CANDIDATES = ("default", "max-autotune")  # Inductor's modes: oneDNN's packed GEMMs; the best per linear, benchmarked
ROUNDS = 5  # each candidate timed this many times, in turns
ROUND_S = 0.1  # a round runs a candidate's step for at least this long (and at least MIN_STEPS steps)
MIN_STEPS = 3
WINDOW = 24  # cached tokens (and source tokens) of the timed step: a sentence's middle


@dataclass(frozen=True)
class Choice:
    """What serves a graph: `chosen` (one of CANDIDATES), from `ms` a step each, measured at `rows` rows."""

    chosen: str
    ms: dict[str, float]
    rows: int
    window: int

    def describe(self) -> str:
        others = ", ".join(f"{m} {ms:.2f} ms" for m, ms in self.ms.items() if m != self.chosen)
        return f"{self.chosen}'s GEMMs ({self.ms[self.chosen]:.2f} ms a {self.rows}-row step; {others})"


def package(record: Path, mode: str) -> Path:
    """The package of the candidate built in `mode`, for the graph whose choice `record` holds."""
    return record.with_name(record.name.removesuffix("-measured.json") + f"-{mode}.pt2")


def read(record: Path, expected: Mapping[str, str]) -> Choice | None:
    """The choice written in `record` when it was measured in the `expected` environment, else None."""
    try:
        found = json.loads(record.read_text())
        if found.get("environment") != dict(expected) or found["chosen"] not in CANDIDATES:
            return None
        return Choice(found["chosen"], {k: float(v) for k, v in found["ms"].items()}, found["rows"], found["window"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, torn or of another shape: measure
        return None


def write(record: Path, choice: Choice, expected: Mapping[str, str]) -> None:
    """Write the choice whole or not at all (store.put), with the environment it was measured in."""
    tmp = temporary_for(record).with_suffix(".json")
    try:
        tmp.write_text(json.dumps({**asdict(choice), "environment": dict(expected)}, indent=1) + "\n")
        put(tmp, record)
    finally:
        tmp.unlink(missing_ok=True)


def time_graphs(runs: Mapping[str, Callable[[list[torch.Tensor]], list[torch.Tensor]]], inputs: list[torch.Tensor],
                rounds: int = ROUNDS) -> dict[str, float]:  # fmt: skip
    """Each graph's milliseconds a step on `inputs`: the best of `rounds` rounds, the graphs taking turns (the
    machine's speed drifts; turns keep the comparison fair)."""
    for run in runs.values():
        run(inputs)  # first calls allocate and fault pages in
    best = dict.fromkeys(runs, float("inf"))
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            steps, t0 = 0, time.perf_counter()
            while steps < MIN_STEPS or time.perf_counter() - t0 < ROUND_S:
                runs[name](inputs)
                steps += 1
            best[name] = min(best[name], (time.perf_counter() - t0) / steps * 1e3)
    return {name: round(ms, 3) for name, ms in best.items()}
