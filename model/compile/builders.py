"""Graphs built in processes of their own, several at once (`Builders`), and how many at once (`jobs_for`).

One graph's build keeps about one core busy (exporting and lowering it in Python, then one g++ of its wrapper), so
graphs built one after another leave a host's other cores idle through a first start. compile_graphs hands every
package it lacks to Builders: each build runs in a child process (`main`, its spec in a JSON file) that
loads the model (saved once, memory-mapped by every child), builds its graph with graphs.py's `build` as the
compiling thread would, with the same thread count, and exits; compile_graphs loads the packages in its own order as
they are written.

    with Builders(model, cache, jobs=4) as builders:
        builders.submit(graph, path, metadata, mode)   # for each package to build, in the order they are needed
        builders.wait(path, cancelled)                 # the package is at `path` (or RuntimeError: why not)
        with builders.paused():                        # the children stopped while graphs are timed
            ...

Timings want quiet cores. Max-autotune chooses a GEMM kernel by timing each candidate; timed beside other builds
(two children on two cores) it chose oneDNN over its own C++ kernels for every linear of the one-row step, which
then decoded at 0.47x the speed (docs/performance-history.md). So a child times nothing until it has the cores:
each of Inductor's CPU timings takes a lock the children share and asks the parent to stop the other children
(SIGSTOP, their compilers too), and begins once the parent says they are stopped (`_quiet`; the parent answers
from `wait`); they go on when it ends. compile_graphs' own timing of the large-row steps runs in `paused()`.

A child dies with the thread that started it (a server killed while compiling leaves no builds running), and
`close` (leaving the `with`) kills those still running, their compilers too. The model saved for the children, and
the files they are told their builds by, are in a directory beside the packages (not in /tmp, a RAM-backed tmpfs on
many systems, which would hold a copy of the weights in memory through the builds); one left by a server killed
meanwhile is removed by the next Builders on that directory (model/workspace.py).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import fcntl
import itertools
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

import torch

from model.compile.graphs import Graph, build
from model.decoding import KVCache
from model.steps import Steps
from model.transformer import Transformer
from model.workspace import Workspace

# What a build holds at its peak besides the model's weights, and per byte of them (the weights loaded, frozen,
# packed and compiled into its library), its compiler included: at most 1.0 GiB for the bundled model's 30 MB of
# weights, 2.9 GiB for an OPUS-MT-sized model's 296 MB (docs/performance-history.md). jobs_for starts no more
# children than the available memory holds at this much each.
BUILD_BASE_BYTES = 1_200_000_000
BUILD_BYTES_PER_WEIGHT_BYTE = 8
WORKSPACE = ".builders-"  # the prefix of the directories Builders keep their files in, beside the packages
POLL_S = 0.01  # how often a waiting compile_graphs looks at its children and their asks for quiet
CGROUP = Path("/sys/fs/cgroup")  # a container's limits (cgroup v2): its CPU quota and its memory
LOG_TAIL = 2000  # the characters of a failed child's stderr its error repeats


def jobs_for(model: Transformer, builds: int, jobs: int = 0) -> int:
    """How many graphs to build at once: `jobs` (0: one per core this process may run on, as many as the available
    memory holds), never more than `builds`."""
    if jobs <= 0:
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        per_build = BUILD_BASE_BYTES + BUILD_BYTES_PER_WEIGHT_BYTE * weights
        memory = available_memory()
        jobs = usable_cores() if memory is None else max(1, min(usable_cores(), memory // per_build))
    return max(1, min(jobs, builds))


def usable_cores() -> int:
    """The cores this process may run on, fewer where a container's CPU quota (cgroup cpu.max) allows fewer."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = (CGROUP / "cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    return cores


def available_memory() -> int | None:
    """Bytes this process could still take: the kernel's MemAvailable, or less where a container's memory limit
    (cgroup memory.max) leaves less; None where neither says."""
    found = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((CGROUP / "memory.current").read_text()))
    return min(found) if found else None


@dataclass
class _Build:
    path: Path  # the package it writes
    spec: Path  # what the child is told (main's argument)
    stderr: Path
    process: subprocess.Popen | None = None


def command(spec: Path) -> list[str]:
    """The child's command line."""
    return [sys.executable, "-c", "import sys; from model.compile.builders import main; main(sys.argv[1])", str(spec)]


class Builders:
    """Up to `jobs` child processes building packages, started in the order the builds were submitted."""

    def __init__(self, model: Transformer, cache: KVCache, jobs: int, where: Path):
        """`where`: the directory the packages are built into; the children's files are kept in one of its own
        there, removed on `close`."""
        self.jobs, self.started = jobs, 0
        self.most = 0  # the most children that ran at once
        self.peak_bytes = 0  # the most memory a build held: its process and its compiler's, at their peaks
        self._workspace = Workspace(where, WORKSPACE)  # a killed server's is removed by the next one here
        self._root = self._workspace.path
        try:
            twin = copy.copy(model)  # its steps may be graphs already (background mode), which do not pickle
            twin.steps = None
            torch.save(twin, self._root / "model.pt")
        except BaseException:
            self._workspace.remove()
            raise
        self._cache = {
            "max_batch": cache.max_batch, "max_len": cache.max_len, "max_src_len": cache.max_src_len,
            "dtype": str(cache.kv.dtype).removeprefix("torch."),
        }  # fmt: skip
        self._threads = torch.get_num_threads()  # Inductor builds the thread count it compiles with into the kernels
        self._env = {**os.environ, "PYTHONPATH": os.pathsep.join([_root_of_model(), os.environ.get("PYTHONPATH", "")])}
        self._env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # the children are the parallelism: no pools
        self._waiting: list[_Build] = []
        self._running: list[_Build] = []
        self._by_path: dict[Path, _Build] = {}
        self._failed: dict[Path, str] = {}
        self._quiet_for: str | None = None  # the ask for quiet answered ("pid n"): its child times on stopped others
        self._quieted: list[_Build] = []  # the children stopped for it

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, graph: Graph, path: Path, metadata: dict[str, str], mode: str) -> None:
        """Build `graph` into the package `path` (in mode `mode`, with `metadata`) once a child is free."""
        n = len(self._by_path)
        spec = {
            "model": str(self._root / "model.pt"), "cache": self._cache, "threads": self._threads,
            "graph": asdict(graph), "path": str(path), "metadata": metadata, "mode": mode, "parent": os.getpid(),
        }  # fmt: skip
        job = _Build(path, self._root / f"{n}.json", self._root / f"{n}.err")
        job.spec.write_text(json.dumps(spec))
        self._waiting.append(job)
        self._by_path[path] = job
        self._start()

    def __contains__(self, path: Path) -> bool:
        return path in self._by_path

    def wait(self, path: Path, cancelled: Callable[[], bool] | None = None) -> None:
        """Until the package at `path` is built, starting waiting builds as children end; RuntimeError if its child
        failed (what it wrote to stderr), InterruptedError once `cancelled()` is True."""
        job = self._by_path[path]
        while True:
            self._reap()
            self._start()
            self._keep_quiet()
            if path in self._failed:
                raise RuntimeError(f"building the graph {path.name} failed in a child process: {self._failed[path]}")
            if job.process is not None and job.process.returncode == 0:
                return
            if cancelled is not None and cancelled():
                raise InterruptedError("cancelled")
            time.sleep(POLL_S)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The running children (and their compilers) stopped meanwhile: for timing graphs on quiet cores."""
        running = list(self._running)
        for job in running:
            _signal(job, signal.SIGSTOP)
        try:
            yield
        finally:
            for job in running:
                if job not in self._quieted:  # those stay stopped until the child timing alone is done
                    _signal(job, signal.SIGCONT)

    def close(self) -> None:
        """Kill the children still running (their compilers too); remove the saved model."""
        for job in self._running:
            _signal(job, signal.SIGKILL)
            job.process.wait()
        self._running, self._waiting = [], []
        self._workspace.remove()

    def _start(self) -> None:
        while self._waiting and len(self._running) < self.jobs:
            job = self._waiting.pop(0)
            with job.stderr.open("wb") as err:  # a group of its own, to stop or kill it with its compilers
                job.process = subprocess.Popen(command(job.spec), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=err, env=self._env, start_new_session=True)  # fmt: skip
            self._running.append(job)
            self.started += 1
            self.most = max(self.most, len(self._running))

    def _keep_quiet(self) -> None:
        """Answer the children's asks for quiet cores (`_quiet`): stop every other child for the one asking, and
        let them go on once it is done."""
        want, ok = self._root / "quiet.want", self._root / "quiet.ok"
        try:
            asked = want.read_text() or None
        except OSError:
            asked = None
        asker = None if asked is None else asked.split()[0]  # the pid of "pid n"
        if asker is not None and all(str(job.process.pid) != asker for job in self._running):
            want.unlink(missing_ok=True)  # its child has ended (killed while timing): nobody is waiting
            asked = None
        if asked == self._quiet_for:
            return
        for job in self._quieted:
            _signal(job, signal.SIGCONT)
        self._quieted, self._quiet_for = [], None
        if asked is not None:
            self._quieted = [job for job in self._running if str(job.process.pid) != asker]
            for job in self._quieted:
                _signal(job, signal.SIGSTOP)
            _until_stopped(self._quieted)
            self._quiet_for = asked
            _write(ok, asked)

    def _reap(self) -> None:
        for job in list(self._running):
            code = job.process.poll()
            if code is None:
                continue
            self._running.remove(job)
            with contextlib.suppress(OSError, ValueError):
                self.peak_bytes = max(self.peak_bytes, int(job.spec.with_suffix(".peak").read_text()))
            if code != 0:
                tail = job.stderr.read_text(errors="replace")[-LOG_TAIL:].strip()
                self._failed[job.path] = f"exit status {code}: {tail or '(nothing on stderr)'}"


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` whole (a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def _quiet(root: Path, asks: Iterator[int]) -> Iterator[None]:
    """In a child: until the block ends, the other children are stopped (asked of the parent through files in
    `root`, one child at a time by a lock they share)."""
    with (root / "quiet.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        want, ok = root / "quiet.want", root / "quiet.ok"
        ask = f"{os.getpid()} {next(asks)}"  # a new one each time: an earlier answer never stands for it
        try:
            _write(want, ask)
            while True:
                with contextlib.suppress(OSError):
                    if ok.read_text() == ask:
                        break
                time.sleep(0.001)
            yield
        finally:
            want.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _timed_on_quiet_cores(root: Path) -> None:
    """In a child: every CPU timing Inductor takes (max-autotune's of each candidate kernel) within `_quiet`."""
    from torch._inductor.runtime import benchmarking

    timing, asks = benchmarking.Benchmarker.benchmark_cpu, itertools.count()

    def benchmark_cpu(self, *args, **kwargs):
        with _quiet(root, asks):
            return timing(self, *args, **kwargs)

    benchmarking.Benchmarker.benchmark_cpu = benchmark_cpu


def _until_stopped(jobs: list[_Build], timeout: float = 1.0) -> None:
    """Until each child has stopped (a signal takes effect when the kernel next schedules it), at most `timeout`."""
    deadline = time.monotonic() + timeout
    for job in jobs:
        while time.monotonic() < deadline:
            try:  # the state, after the command's name (which may hold spaces and parentheses)
                if Path(f"/proc/{job.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "tTZX":
                    break
            except (OSError, IndexError):  # gone, or no /proc (not Linux): nothing to wait for
                break
            time.sleep(0.0005)


def _signal(job: _Build, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.process.pid, sig)


def _root_of_model() -> str:
    """The directory `import model` finds this package in, for the children's PYTHONPATH."""
    return str(Path(__file__).resolve().parents[2])


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the thread that started it ends (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def main(spec_path: str) -> None:
    """A child: build the one graph its spec names."""
    spec = json.loads(Path(spec_path).read_text())
    _die_with_parent(spec["parent"])
    _timed_on_quiet_cores(Path(spec_path).parent)
    torch.set_num_threads(spec["threads"])
    model = torch.load(spec["model"], weights_only=False, mmap=True)
    model.steps = Steps.eager(model)
    c = spec["cache"]
    cache = KVCache(model, c["max_batch"], c["max_len"], c["max_src_len"], dtype=getattr(torch, c["dtype"]))
    build(model, cache, Graph(**spec["graph"]), Path(spec["path"]), spec["metadata"], spec["mode"])
    peak_kib = sum(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    Path(spec_path).with_suffix(".peak").write_text(str(peak_kib * 1024))  # for the log: what NMT_COMPILE_JOBS costs
