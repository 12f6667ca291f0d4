"""What the tests of the bench scripts share: a few sentences to translate, and stand-ins for the hardware and the
packages an argument check looks for."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

SENTENCES = ["A dog runs in the park.", "Two men play chess.", "A girl in a red dress.", "People walk.", "A cat."]


def pretend_a_gpu(monkeypatch) -> None:
    """PyTorch finds one CUDA device: for the argument checks that refuse --device cuda without one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def pretend_no_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def without_ctranslate2(monkeypatch) -> None:
    """importlib finds no ctranslate2, as where the bench extra is not installed."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "ctranslate2" else find_spec(name, *a, **k)
    )


def refused(capsys, main: Callable, argv: list[str]) -> str:
    """A script's refusal of `argv`: argparse's exit status 2, nothing printed before it and no traceback; its
    message."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and not out and "Traceback" not in err, err
    return err
