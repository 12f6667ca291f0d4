"""How an engine gets its compiled graphs (NMT_COMPILE): in the background while it serves, before it serves, or never.

In the background (the default) the eager model answers from the first second. The graphs for the serving cache's
shape are loaded from the package directory or compiled into it (model/compile/) on a thread of their own, and the
worker adopts them one by one as they are ready, between two decoder steps (the greedy steps first; until its graph
is there, a step runs eagerly). The cache holds the same keys and values either way, so sequences in flight go on,
and decode the same tokens. A restart finds the packages and is compiled within seconds.

On CUDA the decoder step is captured as CUDA graphs instead (model/cuda_graphs.py): in seconds, on the worker itself,
one graph per hop between two steps in the background, all of them before `/ready` when blocking.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, get_args

import torch

from app.engine.errors import EngineUnavailable
from app.engine.metrics import Metrics
from app.engine.scheduler import Batcher
from model.compile import PACKAGE_DIR, Cancelled, Compiled, adopt, compile_graphs, nogil, uncompile, use_cache_dir
from model.cuda_graphs import GraphedSteps, capture_graphs, graph_name
from model.cuda_graphs import compiled as captured_so_far
from model.transformer import Transformer

log = logging.getLogger("nmt_serve.compile")
Mode = Literal["background", "blocking", "off"]
State = Literal["off", "pending", "compiling", "compiled", "failed"]


class Compiler:
    """One engine's compiled graphs: its mode, their state, and how long compiling them took."""

    def __init__(
        self, model: Transformer, batcher: Batcher, mode: Mode, metrics: Metrics, cache_dir: Path | None = None,
        kernels: str = "max-autotune", jobs: int = 1,
    ):  # fmt: skip
        if mode not in get_args(Mode):
            raise ValueError(f"compile={mode!r}: one of {', '.join(get_args(Mode))}")
        self.model, self.batcher, self.mode, self.metrics, self.kernels = model, batcher, mode, metrics, kernels
        self.jobs = jobs  # graphs built at once (model/compile/builders.py): 0 as many as the cores and memory allow
        self.cuda = batcher.cache.kv.device.type == "cuda"  # CUDA graphs rather than AOTInductor packages
        self.cache_dir = cache_dir  # None: Inductor's cache directory
        if cache_dir is not None and mode != "off":
            use_cache_dir(cache_dir)
        self.state: State = "off" if mode == "off" else "pending"
        self.seconds: float | None = None  # from the start of compiling to the graphs serving
        self.graphs: Compiled | None = None
        self.serving: list[str] = []  # the graphs the worker has adopted
        self.built = threading.Event()  # background mode: the graphs are compiled, for the worker to adopt
        self._stop = threading.Event()
        self._task: asyncio.Task | None = None

    @property
    def compiled(self) -> bool:
        return self.state == "compiled"

    def info(self) -> dict[str, Any]:
        seconds = None if self.seconds is None else round(self.seconds, 1)
        built, loaded, jobs = (None, None, None) if self.graphs is None else (
            len(self.graphs.built), len(self.graphs.loaded), None if self.cuda else self.graphs.jobs)  # fmt: skip
        gemms = {} if self.graphs is None else {name: asdict(c) for name, c in self.graphs.choices.items()}
        gil = None if self.cuda or self.mode == "off" else "released" if nogil.released() else "held"  # a CPU's graphs
        return {
            "mode": self.mode, "state": self.state, "seconds": seconds, "built": built, "loaded": loaded,
            "serving": self.serving, "graphs": "cuda" if self.cuda else "aotinductor", "kernels": self.kernels,
            "gemms": gemms, "gil": gil, "jobs": jobs,
        }  # fmt: skip

    async def before_ready(self) -> None:
        """Blocking mode: compile (or load) every graph on the worker, before any request."""
        if self.mode == "blocking":
            self.state, t0 = "compiling", time.perf_counter()
            ok = await self.batcher.call(self._compile_in_place)
            self._finished(ok, time.perf_counter() - t0)

    def after_ready(self) -> None:
        """Background mode: start compiling beside serving."""
        if self.mode == "background":
            self._task = asyncio.create_task(self._compile_beside(), name="nmt-compile")

    async def done(self) -> None:
        """Wait until compiling has ended (compiled, failed or stopped); at once when nothing compiles."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def precompile(self) -> Compiled:
        """Build (or check) every graph the serving cache needs into the package directory, on this thread, whatever
        the mode: `nmt-serve --precompile`, so that an image build or an init container ships them."""
        torch.set_num_threads(self.batcher.threads)  # the thread count the worker will load them with
        if self.cache_dir is not None:
            use_cache_dir(self.cache_dir)
        return self._graphs()

    def stop(self) -> None:
        """Stop compiling: the compiling thread ends before its next graph (one graph can take a while)."""
        self._stop.set()

    def _compile_in_place(self) -> bool:
        try:
            self.graphs = self._graphs()
            adopt(self.model, self.graphs)
            self.serving = self.graphs.names
        except Exception as e:  # noqa: BLE001 - a compiler problem must not keep the model from serving
            _failed(e)
            uncompile(self.model)
            return False
        return True

    async def _compile_beside(self) -> None:
        self.state, t0 = "compiling", time.perf_counter()
        log.info("serving the eager model while compiling in the background")
        loop = asyncio.get_running_loop()
        try:
            if self.cuda:
                self.graphs = await self._capture_beside()
            else:
                self.graphs = await on_own_thread(lambda: self._compile_graphs(loop), "nmt-compile")
            await self.batcher.call(self._adopt, self.graphs)  # between two decoder steps
        except (Cancelled, EngineUnavailable):  # the server is stopping
            self.state = "pending"
            return
        except Exception as e:  # noqa: BLE001 - a compiler problem must not keep the model from serving
            _failed(e)
            self._finished(False, time.perf_counter() - t0)
            return
        self._finished(True, time.perf_counter() - t0)

    def _compile_graphs(self, loop: asyncio.AbstractEventLoop) -> Compiled:
        # As many threads as the worker: Inductor writes the compiling thread's thread count into its C++ kernels
        # (one thread here made the compiled graphs decode at eager speed; docs/performance.md, Start-up)
        torch.set_num_threads(self.batcher.threads)

        def ready(so_far: Compiled) -> None:  # each graph serves as soon as it is there: the worker adopts it
            try:  # between two steps, in order; compiling goes on meanwhile
                asyncio.run_coroutine_threadsafe(self.batcher.call(self._adopt, so_far), loop)
            except RuntimeError as e:  # the event loop has closed: the server has stopped
                raise Cancelled("the server has stopped") from e

        graphs = self._graphs(self._stop.is_set, ready, building=lower_priority)  # loading packages is quick
        self.built.set()
        return graphs

    async def _capture_beside(self) -> Compiled:
        """CUDA: each graph captured on the worker between two steps, and serving from the next."""
        steps = GraphedSteps(self.model, self.batcher.cache)
        plan, t0 = steps.plan(), time.perf_counter()
        order = [graph_name(*key) for key in plan]

        def capture(key: tuple[str, int, int]) -> None:
            steps.capture(*key)
            self._adopt(captured_so_far(steps, t0, order))

        for key in plan:
            if self._stop.is_set():
                raise Cancelled("capturing cancelled")
            await self.batcher.call(capture, key)
        self.built.set()
        log.info("captured %d CUDA graphs of the decoder step in %.1f s", len(plan), time.perf_counter() - t0)
        return captured_so_far(steps, t0, order)

    def _adopt(self, graphs: Compiled) -> None:
        names = graphs.names
        if len(names) >= len(self.serving):  # never fewer graphs than serve already
            adopt(self.model, graphs)
            self.serving = names

    def _graphs(
        self, cancelled: Callable[[], bool] | None = None, ready: Callable[[Compiled], None] | None = None,
        building: Callable[[], None] | None = None,
    ) -> Compiled:  # fmt: skip
        if self.cuda:  # on the thread that steps the cache
            return capture_graphs(self.model, self.batcher.cache, log.info, cancelled, ready)
        directory = None if self.cache_dir is None else Path(self.cache_dir) / PACKAGE_DIR
        return compile_graphs(self.model, self.batcher.cache, log.info, cancelled, directory=directory,
                              mode=self.kernels, ready=ready, building=building, jobs=self.jobs)  # fmt: skip

    def _finished(self, ok: bool, seconds: float) -> None:
        self.state, self.seconds = ("compiled" if ok else "failed"), seconds
        if ok:
            self.metrics.compiled.set(1)
            self.metrics.compile_duration.set(seconds)
            g = self.graphs
            if self.cuda:
                log.info("%d CUDA graphs of the decoder step serve, captured in %.1f s", len(g.built), seconds)
                return
            log.info("compiled the encoder and the decoder steps in %.0f s (%d graphs built, %d loaded from %s); the "
                     "compiled graphs serve", seconds, len(g.built), len(g.loaded), g.directory)  # fmt: skip


def lower_priority(nice: int = 10) -> None:
    """This thread (and the compiler processes it starts) yields the cores to the serving threads: a niceness of its
    own (Linux schedules threads one by one); elsewhere nothing changes."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # no setpriority (Windows), or not allowed
        pass


def _failed(e: Exception) -> None:
    log.warning("compiling failed, serving the eager model: %s", e, exc_info=True)


async def on_own_thread(fn: Callable[[], Any], name: str) -> Any:
    """fn() on a new daemon thread (a long job that must not hold a pool's thread, nor keep the process from
    exiting), awaited here."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not result.done():
            result.set_exception(error) if error is not None else result.set_result(value)

    def run() -> None:
        try:
            outcome = (fn(), None)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            outcome = (None, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the event loop has closed: nobody is waiting any more
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return await result
