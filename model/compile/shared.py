"""Each constant once in memory, however many graphs of a process hold it.

An AOTInductor package carries its graph's frozen weights, and its runner copies them out of the shared library into
memory of its own when it loads. The graphs of one model hold mostly the same constants: the greedy and the full
step the same packed weights, the step graphs for 1 and for 2-15 rows the same GEMM blocks, every graph the same
embedding table. At NLLB-200-distilled-600M's size each float32 step graph held 2.8 GB of them and a one-row server
15.8 GB in all (docs/performance-history.md). So a runner's constants are compared with those of the graphs loaded
before it (by dtype, shape, strides, oneDNN's memory descriptor for its packed weights, then every byte): the runner
takes theirs where they are the same, copies of its own for the rest, and frees the copy it loaded. Its library's
pages of constants, read once while loading, are handed back too (`drop_constant_pages`).

    graph = share(runner)        # runner: an AOTIModelContainerRunnerCpu; graph.run runs it

A graph keeps the graphs whose constants it took alive; a graph nothing refers to any more is forgotten.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import threading
import weakref
from pathlib import Path

import torch

_AS_INTEGERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # compared bit for bit, not as numbers
_lock = threading.Lock()
_held: dict[tuple, list[tuple[weakref.ref, str]]] = {}  # constants by what they are: (graph, its constant's name)


class Graph:
    """A loaded graph: its runner, the constants it runs on, and the graphs it took some of them from."""

    __slots__ = ("__weakref__", "constants", "keeps", "runner")

    def __init__(self, runner, constants: dict[str, torch.Tensor], keeps: set[Graph]):
        self.runner, self.constants, self.keeps = runner, constants, keeps

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.runner.run(inputs)


def share(runner) -> Graph:
    """Point `runner` at the constants the graphs loaded before hold, where they are the same, and free its own copy
    of those. Constants a runner folds at run time (none in our packages) leave it as loaded."""
    fqns = runner.get_constant_names_to_original_fqns()  # the runner's constant names -> the constants
    loaded = runner.extract_constants_map(False)  # by constant: views of the runner's own copy
    if set(fqns.values()) != set(loaded):
        return Graph(runner, loaded, set())
    with _lock:
        found = {fqn: hit for fqn, t in loaded.items() if (hit := _find(t)) is not None}
        if not found:
            graph = Graph(runner, loaded, set())
        else:
            constants = {fqn: found[fqn][1] if fqn in found else t.clone() for fqn, t in loaded.items()}
            # user-managed: the runner keeps pointers to these tensors; the Graph keeps them (and their owners) alive
            runner.update_constant_buffer({name: constants[fqn] for name, fqn in fqns.items()}, True, True, True)
            runner.swap_constant_buffer()
            runner.free_inactive_constant_buffer()  # the copy the runner loaded
            graph = Graph(runner, constants, {owner for owner, _ in found.values()})
        for fqn, t in graph.constants.items():
            if fqn not in found and _bytes(t).numel():
                _held.setdefault(_kind(t), []).append((weakref.ref(graph), fqn))
    return graph


def _find(t: torch.Tensor) -> tuple[Graph, torch.Tensor] | None:
    """A graph holding a constant identical to `t`, and that constant."""
    mine = _bytes(t)
    if not mine.numel():
        return None
    entries = _held.get(_kind(t), [])
    entries[:] = [e for e in entries if e[0]() is not None]  # graphs gone since
    for ref, fqn in entries:
        graph = ref()
        if graph is None:
            continue
        theirs = graph.constants[fqn]
        other = _bytes(theirs)
        if torch.equal(other[:256], mine[:256]) and torch.equal(other, mine):  # most differ within their first bytes
            return graph, theirs
    return None


def _kind(t: torch.Tensor) -> tuple:
    if t.is_mkldnn:  # an opaque packed weight: its layout is in oneDNN's memory descriptor
        return "mkldnn", t.dtype, tuple(t.shape), bytes(torch.ops.mkldnn._get_mkldnn_serialized_md(t).tolist())
    return "strided", t.dtype, tuple(t.shape), t.stride(), t.storage_offset()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """t's contents as integers (bits, not values: -0.0 is not 0.0, and NaN equals itself), without a copy."""
    if t.is_mkldnn:
        size = torch.ops.mkldnn._nbytes(t)
        if not size:
            return torch.empty(0, dtype=torch.uint8)
        memory = (ctypes.c_char * size).from_address(torch.ops.mkldnn.data_ptr(t))
        return torch.frombuffer(memory, dtype=torch.uint8)
    return t.view(_AS_INTEGERS[t.element_size()])


def drop_constant_pages(library: Path) -> int:
    """Hand back the pages of `library`'s constants this process has read (the runner copies them out while it
    loads, and never reads them again): they stay resident otherwise, as many bytes as the constants. Only whole
    pages inside the constants' section of a read-only mapping of the file; a page read again would come back from
    the file. Returns the bytes handed back."""
    section = _section(library, ".lrodata")  # where AOTInductor puts them on x86-64
    if section is None:
        return 0
    offset, size = section
    libc, dropped = ctypes.CDLL(None, use_errno=True), 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] != str(library) or fields[1] != "r--p":
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        mapped_at = int(fields[2], 16)  # the file offset the mapping starts at
        lo = max(start, start + offset - mapped_at)
        hi = min(end, start + offset + size - mapped_at)
        lo, hi = -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE, hi // mmap.PAGESIZE * mmap.PAGESIZE
        if hi > lo and libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), 4) == 0:  # MADV_DONTNEED
            dropped += hi - lo
    return dropped


def _section(library: Path, name: str) -> tuple[int, int] | None:
    """(file offset, size) of a section of a 64-bit little-endian ELF file, or None."""
    with open(library, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
            return None
        (table_at,) = struct.unpack_from("<Q", head, 0x28)
        entry, count, names_index = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(table_at)
        table = f.read(entry * count)
        headers = [struct.unpack_from("<IIQQQQ", table, i * entry) for i in range(count)]
        f.seek(headers[names_index][4])
        names = f.read(headers[names_index][5])
    for name_at, _, _, _, at, size in headers:
        if names[name_at : names.find(b"\0", name_at)] == name.encode():
            return at, size
    return None
