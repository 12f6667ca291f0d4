"""The CUDA tests: each module is marked `cuda` and skipped where torch sees no GPU.

NMT_TEST_DEVICE picks the device (default `cuda`); NMT_TEST_DEVICE=cpu runs the test bodies on the CPU in float32,
so that they can be checked where there is no GPU (what needs CUDA itself, half precision and TF32, is skipped there;
the out-of-memory drill injects its errors instead). NMT_TEST_DATA is the directory with test2016
(test_2016_flickr.{en,de}.gz), by default the repository's ../shared/data/multi30k.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from app.settings import BUNDLED_MODEL_DIR
from model.tokenizer import read_lines

ROOT = Path(__file__).resolve().parents[2]
DEVICE = os.environ.get("NMT_TEST_DEVICE", "cuda")
if DEVICE != "cpu" and not DEVICE.startswith("cuda"):
    raise ValueError(f"NMT_TEST_DEVICE={DEVICE!r}: use cuda, cuda:N or cpu")
ON_CUDA = DEVICE != "cpu"
DATA_DIR = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data" / "multi30k")
TEST2016 = ("test_2016_flickr.en.gz", "test_2016_flickr.de.gz")

# Every module here: pytestmark = CUDA
CUDA = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        ON_CUDA and not torch.cuda.is_available(),
        reason="needs a CUDA device (NMT_TEST_DEVICE=cpu runs these tests' bodies on the CPU)",
    ),
]
cuda_only = pytest.mark.skipif(not ON_CUDA, reason="needs CUDA itself (NMT_TEST_DEVICE=cpu)")


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def bundled() -> Path:
    """The bundled checkpoint's directory."""
    if not (BUNDLED_MODEL_DIR / "model.safetensors").is_file():
        pytest.skip(f"the bundled checkpoint is not in {BUNDLED_MODEL_DIR}")
    return BUNDLED_MODEL_DIR


@pytest.fixture(scope="module")
def test2016() -> tuple[list[str], list[str]]:
    """test2016's 1000 English sentences and their German references."""
    src, ref = (DATA_DIR / name for name in TEST2016)
    if not (src.is_file() and ref.is_file()):
        pytest.skip(
            f"test2016 is not in {DATA_DIR} (set NMT_TEST_DATA to the directory holding {' and '.join(TEST2016)})"
        )
    sentences, references = list(read_lines(src)), list(read_lines(ref))
    assert len(sentences) == len(references) == 1000
    return sentences, references


@pytest.fixture
def report(record_property, capsys) -> Callable[..., None]:
    """report(name=value, ...): each value into the junit XML (record_property) and a line on the terminal, shown
    even when pytest captures output, so that the GPU check's log carries the figures."""

    def report_(**values: Any) -> None:
        for name, value in values.items():
            record_property(name, value)
        with capsys.disabled():
            print(f"\n[{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}] "
                  + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)  # fmt: skip

    return report_


@contextmanager
def float32_without_tf32():
    """float32 matmuls and convolutions in full float32 (TF32 off) on CUDA; the settings are restored after."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def synchronize() -> None:
    """Wait for the GPU's queued work (timings); nothing on the CPU."""
    if ON_CUDA:
        torch.cuda.synchronize(DEVICE)
