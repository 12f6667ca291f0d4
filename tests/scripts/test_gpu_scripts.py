"""scripts/gpu-check.sh refuses a host without CUDA; scripts/gpu-wheels.sh asks pip for the locked wheels the check
needs, for the GPU host's Python and platform, and for nothing it must not touch (torch, its CUDA packages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker

from tests.scripts.locks import entries

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="this Python's torch sees a GPU: the check would run"
)
def test_gpu_check_refuses_a_python_whose_torch_sees_no_gpu_before_installing_anything(tmp_path):
    out = run("scripts/gpu-check.sh", "--wheels", str(tmp_path / "none"), "--out", str(tmp_path / "out"),
              PYTHON=sys.executable)  # fmt: skip
    assert out.returncode == 1
    assert "no CUDA GPU" in out.stderr and "a CUDA build of torch" in out.stderr and "torch 2." in out.stderr
    assert not (tmp_path / "out").exists()


def test_gpu_check_says_when_the_python_has_no_torch(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "python3").write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    (bare / "python3").chmod(0o755)
    out = run("scripts/gpu-check.sh", PYTHON=str(bare / "python3"))
    assert out.returncode == 1 and "cannot import torch" in out.stderr


@pytest.mark.parametrize("script", ["gpu-check.sh", "gpu-wheels.sh"])
def test_unknown_options_are_refused_with_the_usage(script):
    out = run(f"scripts/{script}", "--bogus")
    assert out.returncode == 2 and "usage:" in out.stderr


def test_gpu_wheels_needs_a_directory_and_a_python_version_it_understands(tmp_path):
    assert run("scripts/gpu-wheels.sh").returncode == 2
    out = run("scripts/gpu-wheels.sh", str(tmp_path), "--python-version", "312")
    assert out.returncode == 2 and "X.Y" in out.stderr


def pip_download_request(tmp_path: Path, version: str) -> list[str]:
    """The arguments gpu-wheels.sh gives `pip download`, caught by a Python that answers that call itself."""
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1 $2 $3" = "-m pip download" ]; then printf "%s\\n" "$@" > {tmp_path}/args; exit 0; fi\n'
        f'exec {shutil.which("python3") or sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    out = run("scripts/gpu-wheels.sh", str(tmp_path / "wheels"), "--python-version", version, PYTHON=str(fake))
    assert out.returncode == 0, out.stderr
    return (tmp_path / "args").read_text().splitlines()


def test_gpu_wheels_asks_for_the_locked_runtime_and_test_pins_for_the_target_python(tmp_path):
    args = pip_download_request(tmp_path, "3.12")
    pins = {a.split("==")[0]: a.split("==")[1] for a in args if "==" in a}
    for flag in (
        "--no-deps",
        "--only-binary=:all:",
        "--implementation",
        "manylinux_2_28_x86_64",
        "manylinux2014_x86_64",
    ):
        assert flag in args
    assert args[args.index("--python-version") + 1] == "3.12"
    cpython_linux = {"python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
                     "platform_python_implementation": "CPython", "sys_platform": "linux", "os_name": "posix",
                     "platform_system": "Linux", "platform_machine": "x86_64"}  # fmt: skip
    runtime = {p: v for p, v, marker, _ in entries("runtime") if not marker or Marker(marker).evaluate(cpython_linux)}
    assert runtime.items() <= pins.items(), "every runtime pin, at its locked version"
    test = {p: v for p, v, _, _ in entries("test")}
    for needed in ("pytest", "hypothesis", "asgi-lifespan", "pluggy", "iniconfig", "sniffio", "sortedcontainers"):
        assert pins[needed] == test[needed], needed
    for not_needed in ("torch", "triton", "schemathesis", "selenium", "ctranslate2", "sphinx", "transformers"):
        assert not_needed not in pins
    assert not [p for p in pins if p.startswith("nvidia-")]
    assert "httpx2-jsfetch" not in pins and "colorama" in pins


def test_gpu_wheels_picks_the_pins_whose_markers_hold_for_that_python(tmp_path):
    args = pip_download_request(tmp_path, "3.11")
    numpy = [a for a in args if a.startswith("numpy==")]
    assert numpy == [next(f"numpy=={v}" for p, v, m, _ in entries("runtime") if p == "numpy" and "< '3.12'" in m)]
