"""The package directory on disk: where packages go, how one is written whole and loaded, what a crash leaves.

Packages are written to a temporary name, flushed to disk and renamed into place, so that servers starting together
on one directory, and a start after a crash or a power cut, each find a whole package or none. A package that cannot
be loaded (its bytes changed on disk since: a member failing its CRC-32), or that was built for another environment
(model/compile/identity.py), is ignored with a warning and built again; a temporary package left by a build killed
while writing it is removed once nothing has written to it for LEFTOVER_S.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from model.compile import shared

log = logging.getLogger("model.compile")  # one logger for the package
PACKAGE_DIR = "nmt-serve-graphs"  # under Inductor's cache directory (NMT_COMPILE_CACHE_DIR)
LEFTOVER_S = 3600  # a temporary package nothing has written to for this long was left by a build that was killed


def default_dir() -> Path:
    """Where packages go: PACKAGE_DIR in Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, NMT_COMPILE_CACHE_DIR)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / PACKAGE_DIR


def use_cache_dir(path: str | os.PathLike) -> None:
    """Keep Inductor's on-disk caches (autotuning results, compiled kernels) and the packages in `path` from now on,
    for this process and the compiler processes it starts: a later start with the same directory loads the packages
    this one built."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path


def load(path: Path, expected: dict[str, str]):
    """The package's graph, a callable taking a list of tensors, when it was built for `expected`, else None (with a
    warning saying why).

    AOTInductor's own loader unpacks a package into a fresh directory under TMPDIR and removes it only when the runner
    is destroyed, which a server that is stopped or killed never does: every start left its graphs' libraries there
    (hundreds of MB for an OPUS-MT-sized model, in RAM where /tmp is a tmpfs). On CPU a graph is its shared library,
    which is all the runner needs once mapped: it is unpacked here, loaded, its constants shared with the graphs
    loaded before (model/compile/shared.py), and its directory removed. CUDA runners may load kernel binaries later:
    AOTInductor's loader keeps them."""
    try:
        with zipfile.ZipFile(path) as archive:  # AOTInductor reads members without checking their CRC-32
            broken = archive.testzip()
        if broken is not None:
            raise ValueError(f"{broken} fails its checksum")
        if not current(path, expected):
            return None
        if not expected["device"].startswith("cpu"):
            from torch._inductor import aoti_load_package

            return aoti_load_package(str(path)).loader.boxed_run
        return _load_on_cpu(path).run  # each in a directory of its own; shared.share takes its own lock
    except Exception as e:  # noqa: BLE001 - a corrupt or partial package is built again
        log.warning("ignoring the compiled graph %s: it cannot be loaded (%s); compiling it again", path, e)
        return None


def current(path: Path, expected: dict[str, str]) -> bool:
    """Whether the package at `path` was built for `expected` (its metadata only: `load` checks the rest); a warning
    says why not, where it is there."""
    if not path.exists():
        return False
    try:
        found = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(str(path), "model")
    except Exception as e:  # noqa: BLE001 - a corrupt or partial package is built again
        log.warning("ignoring the compiled graph %s: it cannot be loaded (%s); compiling it again", path, e)
        return False
    differ = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
    if differ:
        why = "; ".join(f"{k} {a!r} here {b!r}" for k, (a, b) in differ.items())
        log.warning("ignoring the compiled graph %s: it was built for %s; compiling it again", path, why)
    return not differ


def unpack_library(path: Path, directory: str | os.PathLike) -> Path:
    """The package's AOTInductor library (its one .so), written into `directory`."""
    with zipfile.ZipFile(path) as archive:
        (member,) = [m for m in archive.namelist() if m.endswith(".so") and "/aotinductor/" in m]
        return Path(archive.extract(member, directory))


def _load_on_cpu(path: Path) -> shared.Graph:
    with tempfile.TemporaryDirectory(prefix="nmt-serve-graph-") as directory:
        library = unpack_library(path, directory)
        graph = shared.share(torch._C._aoti.AOTIModelContainerRunnerCpu(str(library), 1))
        shared.drop_constant_pages(library)
    return graph


def temporary_for(path: Path) -> Path:
    """A name of this build's own to write `path`'s package to (its directory created): a build killed while
    compiling leaves nothing behind (the compiler creates the file only once it writes the package), one killed while
    writing leaves a temporary package (remove_leftovers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.stem}-{os.getpid()}-{secrets.token_hex(4)}.tmp.pt2")


def put(tmp: Path, path: Path) -> None:
    """Move the package written to `tmp` to `path`, whole or not at all, even across a power cut."""
    _sync(tmp)  # the bytes on disk before the name: after a power cut the package is whole or absent, not empty
    os.replace(tmp, path)  # whole or not at all, for another server starting on the same directory
    _sync(path.parent)  # the rename too


def _sync(path: Path) -> None:
    """Flush a file's or a directory's contents to disk (best effort: some file systems refuse a directory's)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_leftovers(directory: Path) -> None:
    """Remove the temporary packages (and GEMM choices: model/compile/choice.py) of builds killed while writing them:
    those nothing has written to for LEFTOVER_S (another server's build writes its package in seconds, and never
    after LEFTOVER_S)."""
    now = time.time()
    for tmp in [*directory.glob(".*.tmp.pt2"), *directory.glob(".*.tmp.json")]:
        try:
            if now - tmp.stat().st_mtime > LEFTOVER_S:
                tmp.unlink()
                log.warning("removed %s: a package a stopped build had left half-written", tmp)
        except OSError:  # another server removed it first, or the directory is read-only
            pass
