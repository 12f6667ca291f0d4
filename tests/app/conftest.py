"""An in-process app on the tiny checkpoint, with its lifespan run, and an httpx client on it."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.main import create_app
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
