"""An in-process app on the tiny checkpoint, with its lifespan run, and an httpx client on it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from contextlib import asynccontextmanager, contextmanager

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.frontends import serve_cores
from app.main import create_app
from app.metrics import Metrics
from app.models import Models
from app.settings import Settings
from model.checkpoint import save_checkpoint


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@asynccontextmanager
async def serve(settings: Settings, startup_timeout: float = 60):
    """Run the app's lifespan, wait until the model is ready, and yield (app, client)."""
    app = create_app(settings)
    async with LifespanManager(app, startup_timeout=startup_timeout, shutdown_timeout=60):
        await app.state.loading
        assert app.state.engine is not None and app.state.engine.ready, app.state.load_error
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://nmt") as client:
            yield app, client


MODES = ("one process", "front-end")  # a server whole, or a front-end whose models an engine process serves


@contextmanager
def engine_process(settings: Settings):
    """The settings' models loaded and served as NMT_FRONTENDS's engine process serves them (app/frontends.py's
    serve_cores, on a thread and event loop of their own, over ZeroMQ on a private ipc socket); yields the settings of a
    front-end of it and the models (their cores: what the engine process holds). Blocks while the models load."""
    settings = settings.model_copy(update={"frontends": 1})
    private = tempfile.mkdtemp(prefix="nmt-test-engine-")  # mode 0700, as the server's
    address, loaded, held = f"ipc://{private}/engine", threading.Event(), {}

    async def main() -> None:
        held["loop"], held["stop"] = asyncio.get_running_loop(), asyncio.Event()
        try:
            held["models"] = Models(settings, Metrics())
            await held["models"].load()
        finally:
            loaded.set()
        await serve_cores(held["models"], address, held["stop"])

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="test-engine-process", daemon=True)
    thread.start()
    loaded.wait()
    try:
        assert held["models"].engines, held["models"].errors
        yield settings.model_copy(update={"engine_address": address}), held["models"]
    finally:
        held["loop"].call_soon_threadsafe(held["stop"].set)
        thread.join(60)
        shutil.rmtree(private, ignore_errors=True)


@asynccontextmanager
async def serve_in(mode: str, settings: Settings, startup_timeout: float = 60):
    """`serve` in one of MODES: the app whole, or a front-end whose models an engine process (`engine_process`) serves;
    yields (app, client) alike. Behind a front-end, app.state.behind holds the engine process's models."""
    if mode == "front-end":
        with engine_process(settings) as (front, models):
            async with serve(front, startup_timeout) as (app, client):
                app.state.behind = models
                yield app, client
    else:
        assert mode == "one process", mode
        async with serve(settings, startup_timeout) as pair:
            yield pair


async def served_in(settings: Settings, request: pytest.FixtureRequest):
    """A module's `served` in the mode its parameter names: `served = pytest.fixture(scope="module", params=MODES,
    name="served")(served_in)` runs its tests against one process and against a front-end."""
    async with serve_in(request.param, settings) as pair:
        yield pair


def engine_side(app) -> Models:
    """The models whose cores serve the app: its own in one process, the engine process's behind a front-end."""
    return getattr(app.state, "behind", None) or app.state.models


def core_of(app, model: str | None = None):
    """The EngineCore that serves the app's model (its default), wherever it runs (`engine_side`)."""
    return engine_side(app).engines[model or app.state.engine.name].core


def english_to(target: str, tmp_path_factory, model, tokenizer):
    """The tiny random model saved as an English->`target` one (by its metadata), named tiny-`target`."""
    path = tmp_path_factory.mktemp(target) / f"tiny-{target}"
    metadata = {"name": f"tiny-{target}", "source_language": "en", "target_language": target}
    save_checkpoint(path, model, tokenizer, metadata)
    return path


@pytest.fixture(scope="session")
def german(tmp_path_factory, tiny_model, tokenizer):
    """The tiny random model as an English->German one."""
    return english_to("de", tmp_path_factory, tiny_model, tokenizer)


@pytest.fixture(scope="session")
def french(tmp_path_factory, tiny_model, tokenizer):
    """A second model, English->French by its metadata (the tiny random one)."""
    return english_to("fr", tmp_path_factory, tiny_model, tokenizer)


@pytest.fixture(scope="module")
def settings(tiny_checkpoint) -> Settings:
    return Settings(model_dir=tiny_checkpoint, max_input_tokens=64, max_new_tokens=40, max_batch_texts=8, compile=False)


@pytest.fixture(scope="module")
async def served(settings):
    async with serve(settings) as pair:
        yield pair


@pytest.fixture
def app(served):
    return served[0]


@pytest.fixture
def client(served) -> httpx.AsyncClient:
    return served[1]


class StepGate:
    """Wraps a model's greedy decoder step: records each step's batch size, and can hold the worker at a chosen step."""

    def __init__(self, model, monkeypatch, timeout: float = 30):
        self.sizes: list[int] = []
        self.paused, self._go, self._hold = threading.Event(), threading.Event(), None
        real = model.decode_greedy

        def decode_greedy(tokens, cache):
            self.sizes.append(tokens.size(0))
            if self._hold is not None and self._hold(self.sizes):
                self._hold = None
                self._go.clear()
                self.paused.set()
                self._go.wait(timeout)
            return real(tokens, cache)

        monkeypatch.setattr(model, "decode_greedy", decode_greedy)

    def hold(self, when) -> None:
        """Pause the worker (once) at the first step where when(sizes) is true, before the step runs."""
        self._hold = when

    def release(self) -> None:
        """Let a paused worker go on (a hold set meanwhile stays armed)."""
        self.paused.clear()
        self._go.set()


def failing_on_step(decode_greedy, n: int):
    """decode_greedy that raises RuntimeError("injected fault") on its n-th call and works otherwise."""
    calls = []

    def flaky(tokens, cache):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError("injected fault")
        return decode_greedy(tokens, cache)

    return flaky


@pytest.fixture(scope="module")
async def trained(trained_checkpoint):
    """A server (app, client) on the tiny model trained on the synthetic sentences: their translations do not hang
    on near-ties, so they are the same in any batch."""
    async with serve(Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False)) as pair:
        yield pair


async def trained_in(trained_checkpoint, request: pytest.FixtureRequest):
    """A module's `trained` in the mode its parameter names, as `served_in`."""
    settings = Settings(model_dir=trained_checkpoint, max_new_tokens=40, compile=False)
    async with serve_in(request.param, settings) as pair:
        yield pair
