"""What the confidence benches' tests share: Multi30k's presence, and a calibration made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.confidence import DATA
from model.confidence import Calibration

needs_data = pytest.mark.skipif(not (DATA / "test_2016_flickr.en.gz").is_file(), reason=f"Multi30k is not in {DATA}")


def saved_calibration(directory: Path, fitted_on: str) -> str:
    """A calibration whose confidence rises with mean_logprob alone (the others weigh nothing), saved in `directory`."""
    calibration = Calibration(
        weights=[1.0, 0.0, 0.0, 0.0, 0.0], bias=0.0, mean=[-0.3, 0.0, 0.0, 0.0, 0.0], scale=[0.2, 1.0, 1.0, 1.0, 1.0],
        fitted_on={"src": fitted_on},
    )  # fmt: skip
    calibration.save(directory)
    return str(directory)
