"""Each constant once in memory, however many graphs of a process hold it.

An AOTInductor package carries its graph's frozen weights, and its runner copies them out of the shared library into
memory of its own when it loads. The graphs of one model hold mostly the same constants: the greedy and the full
step the same packed weights, the step graphs for 1 and for 2-15 rows the same GEMM blocks, every graph the same
embedding table. At NLLB-200-distilled-600M's size each float32 step graph held 2.8 GB of them and a one-row server
15.8 GB in all (docs/performance-history.md). So a runner's constants are compared with those of the graphs loaded
before it (by dtype, shape, strides, oneDNN's memory descriptor for its packed weights, then every byte): the runner
takes theirs where they are the same, and the pages of its own copy of those go back to the system. Its library's
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

from model.compile import nogil

# Compared and handed back with the C library's memcmp and madvise: one thread, the GIL released. torch's ops would
# start OpenMP teams beside the engine's, decoding meanwhile: on 2 cores both crawled (a load took 5x as long).
_libc = ctypes.CDLL(None)
_libc.memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MADV_DONTNEED = 4
_lock = threading.Lock()
_held: dict[tuple, list[tuple[weakref.ref, str]]] = {}  # constants by what they are: (graph, its constant's name)


class Graph:
    """A loaded graph: its runner, the constants it runs on, and the graphs it took some of them from."""

    __slots__ = ("__weakref__", "constants", "keeps", "runner")

    def __init__(self, runner, constants: dict[str, torch.Tensor], keeps: set[Graph]):
        self.runner, self.constants, self.keeps = runner, constants, keeps

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return nogil.run(self.runner, inputs)  # the GIL released while it runs, once the extension is there


def share(runner) -> Graph:
    """Point `runner` at the constants the graphs loaded before hold, where they are the same, and hand back the
    pages of its own copy of those. Constants a runner folds at run time (none in our packages) leave it as loaded."""
    fqns = runner.get_constant_names_to_original_fqns()  # the runner's constant names -> the constants
    loaded = runner.extract_constants_map(False)  # by constant: views of the runner's own copy
    if set(fqns.values()) != set(loaded):
        return Graph(runner, loaded, set())
    names: dict[str, list[str]] = {}
    for name, fqn in fqns.items():
        names.setdefault(fqn, []).append(name)
    with _lock:  # a constant several names stand for (max-autotune's GEMM blocks) stays: its tensor is one name's
        found = {fqn: hit for fqn, t in loaded.items() if len(names[fqn]) == 1 and (hit := _find(t)) is not None}
        if found:  # user-managed: the runner keeps pointers to these tensors; the Graph keeps their owners alive
            runner.update_constant_buffer({names[fqn][0]: t for fqn, (_, t) in found.items()}, False, False, True)
            for fqn in found:
                _hand_back(*_span(loaded[fqn]))  # the runner's copy: nothing reads it any more
        constants = {fqn: found[fqn][1] if fqn in found else t for fqn, t in loaded.items()}
        graph = Graph(runner, constants, {owner for owner, _ in found.values()})
        for fqn, t in constants.items():
            if fqn not in found and _span(t) is not None:
                _held.setdefault(_kind(t), []).append((weakref.ref(graph), fqn))
    return graph


def _find(t: torch.Tensor) -> tuple[Graph, torch.Tensor] | None:
    """A graph holding a constant identical to `t`, and that constant."""
    if _span(t) is None:
        return None
    entries = _held.get(_kind(t), [])
    entries[:] = [e for e in entries if e[0]() is not None]  # graphs gone since
    for ref, fqn in entries:
        graph = ref()
        if graph is not None and same(graph.constants[fqn], t):
            return graph, graph.constants[fqn]
    return None


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two constants are the same bit for bit (-0.0 is not 0.0; a NaN equals itself) in the same layout."""
    spans = _span(a), _span(b)
    if None in spans or _kind(a) != _kind(b) or spans[0][1] != spans[1][1]:
        return False
    return _libc.memcmp(spans[0][0], spans[1][0], spans[0][1]) == 0


def _kind(t: torch.Tensor) -> tuple:
    if t.is_mkldnn:  # an opaque packed weight: its layout is in oneDNN's memory descriptor
        return "mkldnn", t.dtype, tuple(t.shape), bytes(torch.ops.mkldnn._get_mkldnn_serialized_md(t).tolist())
    return "strided", t.dtype, tuple(t.shape), t.stride()


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    """(address, bytes) of a constant's contents, None where they are not one dense run of bytes (not shared)."""
    if t.is_mkldnn:
        size = torch.ops.mkldnn._nbytes(t)
        return (torch.ops.mkldnn.data_ptr(t), size) if size else None
    return (t.data_ptr(), t.numel() * t.element_size()) if t.numel() and t.is_contiguous() else None


def _hand_back(address: int, size: int) -> int:
    """Hand the whole pages of [address, address + size) back to the system (they read as zeros if touched again);
    returns the bytes handed back."""
    lo = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = (address + size) // mmap.PAGESIZE * mmap.PAGESIZE
    return hi - lo if hi > lo and _libc.madvise(lo, hi - lo, _MADV_DONTNEED) == 0 else 0


def drop_constant_pages(library: Path) -> int:
    """Hand back the pages of `library`'s constants this process has read (the runner copies them out while it
    loads, and never reads them again): they stay resident otherwise, as many bytes as the constants. Only whole
    pages between the constants' start and end symbols, in private mappings of the file: a page read again would
    come back from the file. Returns the bytes handed back."""
    span = _constants_span(library)
    if span is None:
        return 0
    first, last = span
    dropped = 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] != str(library) or not fields[1].endswith("p"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        mapped_at = int(fields[2], 16)  # the file offset the mapping starts at
        lo, hi = max(start, start + first - mapped_at), min(end, start + last - mapped_at)
        if hi > lo:
            dropped += _hand_back(lo, hi - lo)
    return dropped


def _constants_span(library: Path) -> tuple[int, int] | None:
    """The file offsets of AOTInductor's constants in a 64-bit little-endian ELF library, or None: between its symbols
    _binary_constants_bin_start and _end, or (over 2 GB) at the end of the file, which the runner maps itself."""
    with open(library, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with data:
        if data[:6] != b"\x7fELF\x02\x01":
            return None
        (table_at,) = struct.unpack_from("<Q", data, 0x28)
        entry, count = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, table_at + i * entry) for i in range(count)]
        found = {}
        for _, kind, _, _, at, size, link, _, _, sym_size in sections:
            if kind != 2:  # SHT_SYMTAB
                continue
            names_at = sections[link][4]
            for i in range(size // sym_size):
                name_at, _, _, index, value, _ = struct.unpack_from("<IBBHQQ", data, at + i * sym_size)
                name = data[names_at + name_at : data.find(b"\0", names_at + name_at)]
                if name in (b"_binary_constants_bin_start", b"_binary_constants_bin_end") and index < count:
                    _, _, _, address, offset, _, _, _, _, _ = sections[index]
                    found[name] = offset + value - address
        if len(found) < 2:
            return None
        first, last = found[b"_binary_constants_bin_start"], found[b"_binary_constants_bin_end"]
        if last - first == 16:  # over 2 GB: appended to the file, the symbols holding their size and a magic number
            size, magic = struct.unpack_from("<QQ", data, first)
            if not 16 <= size <= len(data) or struct.unpack_from("<Q", data, len(data) - 8)[0] != magic:
                return None
            return len(data) - size, len(data)
        return first, last
