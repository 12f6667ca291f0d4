"""bench/soak.py's start, without a server: --no-compile reaches the server, and a compiling start says so."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from bench import soak


class Started(Exception):
    """Raised by the stand-in server: the test ends where the load would begin."""


@pytest.fixture
def started(monkeypatch):
    """Whether soak.main asked running_server (bench/load.py's) for a compiled server, each time."""
    seen = []

    @contextmanager
    def running_server(model_dir, threads, server_args=(), compile=True, settings=None):
        seen.append(compile)
        raise Started
        yield  # never reached

    monkeypatch.setattr(soak, "running_server", running_server)
    monkeypatch.delenv("NMT_COMPILE", raising=False)
    return seen


def start(argv: list[str]) -> None:
    with pytest.raises(Started):
        soak.main(argv)


def test_by_default_the_server_compiles_first_and_the_wait_is_announced(started, capsys):
    start([])
    assert started == [True]
    out = capsys.readouterr().out
    assert "compiles its graphs before it serves" in out and "--no-compile" in out


def test_no_compile_serves_the_eager_model(started, capsys):
    start(["--no-compile"])
    assert started == [False]
    assert "eager model (NMT_COMPILE=off)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["off", "false", "OFF", "blocking", "background"])
def test_nmt_compile_off_in_the_environment_is_heeded(monkeypatch, value):
    monkeypatch.setenv("NMT_COMPILE", value)
    assert soak.parse_args([]).compile is (value.lower() not in ("off", "false"))
