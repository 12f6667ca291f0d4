"""Files through their formats: an identity translator (a test double that gives each unit back as it is) and the
bundled English->German model's engine, and `translated()` to run a file through either."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.files import FORMATS, FileLimits, Unit
from app.files.translate import translate_units
from app.loading import load_engine
from app.settings import Settings

BUNDLED = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"
Translator = Callable[[list[Unit]], Awaitable[list[str]]]


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


async def identity(units: list[Unit]) -> list[str]:
    return [u.text for u in units]


@pytest.fixture(scope="module")
async def bundled() -> Translator:
    """The bundled en->de model's engine as a translator of units (eager, greedy)."""
    engine = load_engine(Settings(model_dir=BUNDLED, compile="off", max_new_tokens=128))
    await engine.start()
    try:

        async def translate(units: list[Unit]) -> list[str]:
            step = engine.limits.max_batch_texts
            out: list[str] = []
            for i in range(0, len(units), step):
                out += await translate_units(engine, units[i : i + step])
            return out

        yield translate
    finally:
        engine.stop()


async def translated(fmt: str, data: bytes, translate: Translator, limits: FileLimits | None = None) -> bytes:
    """`data` read as format `fmt`, its units translated, the file written back."""
    extracted = FORMATS[fmt].read(data, limits or FileLimits())
    return extracted.write(await translate(extracted.units))
