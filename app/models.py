"""Several models in one server (NMT_MODELS): an Engine each, with its own KV cache, batch and worker thread, picked
per request by name or by language pair. One model (NMT_MODEL_DIR) is the case of a list of one."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from pathlib import Path
from typing import Any, Literal

from app.engine import EngineUnavailable, InvalidRequest
from app.languages import cut, fits, other_script, same, short
from app.loading import load_engine
from app.metrics import Metrics
from app.settings import Settings
from app.text import Engine

log = logging.getLogger("nmt_serve")
State = Literal["loading", "ready", "failed", "stopped"]


def torch_threads() -> int:
    """The threads torch would use: the cores the models share out."""
    import torch

    return torch.get_num_threads()


def threads_each(settings: Settings, cores: int) -> int:
    """CPU threads per model: NMT_THREADS, else the cores shared out among the models (at least one each), so that
    busy models do not oversubscribe the cores with their OpenMP teams."""
    return settings.threads or max(1, cores // len(settings.model_dirs()))


class UnknownModel(InvalidRequest):
    """The request names a model, or a language pair, that this server does not serve."""


class Models:
    """The server's engines by name, in NMT_MODELS order; the first is the default."""

    def __init__(self, settings: Settings, metrics: Metrics):
        self.settings, self.metrics = settings, metrics
        self.dirs = {name or Path(d).name: d for name, d in settings.model_dirs().items()}
        self.named = bool(settings.models)  # NMT_MODELS names them; one NMT_MODEL_DIR is named by its checkpoint
        self.engines: dict[str, Engine] = {}
        self.errors: dict[str, str] = {}
        # read once, before any engine narrows its loading thread to one; a front-end's models have their threads in
        # the engine process, and it never imports torch
        self.cores = 0 if settings.engine_address else torch_threads()

    @property
    def names(self) -> list[str]:
        return list(self.dirs)

    @property
    def default(self) -> str:
        return self.names[0]

    def threads(self) -> int:
        return threads_each(self.settings, self.cores)

    async def load(self) -> None:
        """Load and start every model in turn, off the event loop; a model that fails is recorded, the rest load."""
        n = len(self.dirs)
        served = await self._connect() if self.settings.engine_address else {}
        for k, (name, directory) in enumerate(list(self.dirs.items())):
            t0 = time.perf_counter()
            try:
                if self.settings.engine_address:
                    engine = await self._front(name, directory, served)
                else:
                    # On a GPU each model sizes its KV cache from its share of NMT_GPU_MEMORY_FRACTION: the k-th may
                    # fill up to k/n of it, the models before it holding the rest.
                    engine = await asyncio.to_thread(
                        load_engine, self.settings, self.metrics, model_dir=directory,
                        name=name if self.named else None, threads=self.threads(),
                        gpu_memory_fraction=self.settings.gpu_memory_fraction * (k + 1) / n,
                    )  # fmt: skip
                if not self.named and engine.name != name:  # one model: named by its checkpoint's metadata
                    self.dirs = {engine.name: directory}
                    name = engine.name
                self.engines[name] = engine
                await engine.start()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.errors[name] = str(e)
                log.error("could not load the model %s from %s: %s", name, directory, e,
                          exc_info=not isinstance(e, ValueError))  # fmt: skip
                continue
            info = engine.info()
            log.info(
                "ready: %s (%s, %d parameters) on %s, %s, in %.1fs", name, self.pair(name), info["parameters"],
                info["device"], info["dtype"], time.perf_counter() - t0,
            )  # fmt: skip

    async def _connect(self) -> dict[str, Any]:
        """A front-end (NMT_FRONTENDS): connect to the engine process and wait until it serves its models."""
        from app.engine.remote import Connection

        self.connection, self.loop = Connection(self.settings.engine_address), asyncio.get_running_loop()
        self.connection.start("models")
        # however long the engine process takes to load its models (a front-end, without torch, is up long before it);
        # an engine that dies stops the server (app/frontends.py)
        return await self.connection.refresh(timeout=math.inf)

    async def _front(self, name: str, directory: Path, served: dict[str, Any]) -> Engine:
        """A front-end's engine for a model of the engine process: its text side here, its core there."""
        from app.engine.remote import RemoteCore
        from app.loading import front_engine

        if not self.named and len(served) == 1:  # one model: the engine process named it from its checkpoint
            name = next(iter(served))
            self.dirs = {name: directory}
        if why := served.get(name, {}).get("failed"):  # the engine process's reason, as one process gives it
            raise ValueError(why)
        if name not in served:
            raise ValueError(f"the engine process does not serve {name!r} (it serves {sorted(served)})")
        core = RemoteCore(self.connection, name, frontends=self.settings.frontends)
        return await asyncio.to_thread(front_engine, self.settings, core, directory, name, self.metrics)

    def stop(self) -> None:
        """Stop every engine (blocking, from any thread); a front-end's, on the event loop its connection runs on."""
        if self.settings.engine_address and hasattr(self, "connection"):
            if _running_loop() is self.loop:
                self._stop()
            else:
                self.loop.call_soon_threadsafe(self._stop)
            return
        self._stop()

    def _stop(self) -> None:
        for engine in self.engines.values():
            engine.stop()
        if self.settings.engine_address and hasattr(self, "connection"):
            self.connection.stop("models")  # the last user: it says bye to the engine process

    def state(self, name: str) -> State:
        engine = self.engines.get(name)
        if name in self.errors:
            return "failed"
        if engine is None or not (engine.ready or engine.stopped):
            return "loading"
        return "ready" if engine.ready else "stopped"

    def states(self) -> dict[str, State]:
        return {name: self.state(name) for name in self.names}

    def unavailable(self) -> str | None:
        """Why the loaded models cannot translate now (a front-end's engine process is not answering), or None."""
        return next((why for engine in self.engines.values() if (why := engine.unavailable)), None)

    def languages(self, name: str) -> dict[str, str]:
        """The model's language pair from its checkpoint's metadata (unknown until it has loaded)."""
        engine = self.engines.get(name)
        return engine.languages if engine else {"source": "unknown", "target": "unknown"}

    def pair(self, name: str) -> str:
        langs = self.languages(name)
        return f"{langs['source']}->{langs['target']}"

    def listing(self) -> str:
        return ", ".join(f"{name} ({self.pair(name)})" for name in self.names)

    def pick(self, model: str | None = None, source: str | None = None, target: str | None = None) -> Engine:
        """The engine a request asks for: by `model`, else by its languages, else the default; a 422 for a name or
        a pair no model serves, a 503 while the chosen model loads or after it failed to."""
        if model is not None and model not in self.dirs:
            raise UnknownModel(f"there is no model {short(model)}; this server has {self.listing()} (GET /models)")
        if model is None and (source or target):
            model = self.by_languages(source, target)
        elif model is not None and (source or target) and self.state(model) == "ready":
            engine = self.engines[model]
            if engine.codes is None:
                langs = self.languages(model)
                for side, code in (("source", source), ("target", target)):
                    if code and not (fits(langs[side], code) or side == "source" and code == "auto"):
                        script = other_script(langs[side], code) if same(langs[side], code) else None
                        raise UnknownModel(
                            f"the model {model!r} translates {self.pair(model)}, not {side} {short(code)}"
                            + (f" (it does not write the {script} script)" if script else "")
                            + '; leave out "model" to pick one by language, or see GET /models'
                        )
        name = model or self.default
        engine = self.engines.get(name)
        if engine is None or not engine.ready:
            raise EngineUnavailable(self.not_ready(name))
        return engine

    def by_languages(self, source: str | None, target: str | None) -> str:
        """The first model (in NMT_MODELS order) whose languages match the ones given."""
        for name in self.names:  # a pair model by its pair; a many-to-many one by any code it resolves
            engine = self.engines.get(name)
            if engine is not None and engine.directions.serves(source, target):
                return name
        wanted = f"{cut(source or 'any')}->{cut(target or 'any')}"
        loading = [name for name in self.names if self.state(name) == "loading"]
        if loading:  # not yet a 422: a model still loading may be the one
            raise EngineUnavailable(f"no loaded model translates {wanted} yet; {self.not_ready(loading[0])}")
        many = [(name, e) for name, e in self.engines.items() if e.codes is not None]
        if len(self.names) == 1 and many:  # one many-to-many model: what is wrong with the codes for it
            raise UnknownModel(many[0][1].directions.why_not(source, target) or f"no model here translates {wanted}")
        reasons = "".join(f"; {name}: {e.directions.why_not(source, target)}" for name, e in many)
        raise UnknownModel(
            f"no model here translates {wanted}; this server has {self.listing()} (GET /models){reasons}"
        )

    def sources_into(self, target: str | None) -> tuple[str, ...]:
        """The languages the loaded models translate into `target` from (a pair model's source, a many-to-many
        model's languages by their short names), where more than one model does: what "auto" chooses the model
        among. Empty where one model or none does (or no target is named): that one is the request's."""
        if not target or len(self.names) < 2:  # every plain /translate asks: one model answers at once
            return ()
        into = [e for name in self.names if (e := self.engines.get(name)) is not None and e.ready
                and e.directions.serves(None, target)]  # fmt: skip
        if len(into) < 2:
            return ()
        return tuple(dict.fromkeys(
            code for e in into for code in (e.codes.names.values() if e.codes else [e.languages["source"]])
        ))  # fmt: skip

    def find(self, model: str | None, source: str | None, target: str | None) -> Engine | None:
        """pick()'s engine, or None where pick() would raise."""
        try:
            return self.pick(model, source, target)
        except (InvalidRequest, EngineUnavailable):
            return None

    def not_ready(self, name: str) -> str:
        prefix = f"the model {name!r}" if len(self.dirs) > 1 else "the model"
        if name in self.errors:
            return f"{prefix} failed to load: {self.errors[name]}"
        engine = self.engines.get(name)
        if engine is not None and engine.stopped:
            return "the server is shutting down"
        return f"{prefix} is still loading; poll GET /ready"

    def describe(self, name: str) -> dict[str, Any]:
        """A model's entry in GET /models."""
        engine, state = self.engines.get(name), self.state(name)
        out: dict[str, Any] = {
            "name": name, "state": state, "default": name == self.default, "directory": str(self.dirs[name]),
            **self.languages(name), "error": self.errors.get(name),
        }  # fmt: skip
        if engine is not None:
            info = engine.info()
            out |= {
                "limits": info["limits"], "device": info["device"], "dtype": info["dtype"], "threads": info["threads"],
                "parameters": info["parameters"], "metadata": engine.metadata,
            }  # fmt: skip
            if engine.codes:  # a many-to-many model: each language by its own code and its short name
                out["languages"] = [{"code": c, "name": n} for c, n in engine.codes.names.items()]
        return out


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
