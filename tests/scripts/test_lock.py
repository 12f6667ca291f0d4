"""requirements/*.txt, the locked dependency sets: complete for pyproject.toml, hashed, consistent, torch-free."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.scripts.locks import LOCKS, entries

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETS = {"runtime": [], **{extra: [extra] for extra in PROJECT["project"]["optional-dependencies"]}}


def wanted(set_name: str) -> list[Requirement]:
    """What pyproject.toml asks of the set: the dependencies, its extra, and the build requirements."""
    listed = PROJECT["project"]["dependencies"] + [
        r for extra in SETS[set_name] for r in PROJECT["project"]["optional-dependencies"][extra]
    ]
    return [Requirement(r) for r in listed + PROJECT["build-system"]["requires"]]


@pytest.mark.parametrize("set_name", SETS)
def test_every_requirement_of_pyproject_is_pinned_at_a_version_it_allows(set_name):
    pinned: dict[str, list[str]] = {}
    for package, version, _, _ in entries(set_name):
        pinned.setdefault(package, []).append(version)
    for req in wanted(set_name):
        name = canonicalize_name(req.name)
        if name == "torch":
            continue  # installed apart (scripts/install.sh): kept when present, else requirements/torch.in's release
        assert name in pinned, f"{req} is in pyproject.toml but not in requirements/{set_name}.txt: run scripts/lock.sh"
        for version in pinned[name]:
            assert req.specifier.contains(version, prereleases=True), (
                f"requirements/{set_name}.txt pins {name}=={version}, outside pyproject.toml's {req}: run scripts/lock.sh"
            )


@pytest.mark.parametrize("set_name", [*SETS, "torch"])
def test_every_pin_is_exact_and_hashed_and_no_torch_or_cuda_package_is_locked(set_name):
    pins = entries(set_name)
    assert len(pins) >= 5
    for package, version, _, hashes in pins:
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), package
        assert package != "torch" and package != "triton" and not package.startswith("nvidia-"), package
        assert "+" not in version, f"{package}=={version}: a local build, not a release from the index"


def test_a_package_has_one_version_across_all_sets_so_the_tested_set_is_the_served_set():
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for set_name in [*SETS, "torch"]:
        for package, version, marker, _ in entries(set_name):
            first = seen.setdefault((package, marker), (version, set_name))
            assert first[0] == version, f"{package}: {first[0]} in {first[1]}.txt, {version} in {set_name}.txt"


def test_the_sets_hold_what_pyproject_promises_them():
    names = {s: {p for p, *_ in entries(s)} for s in SETS}
    assert names["runtime"] < names["test"] and names["runtime"] < names["bench"]
    assert {"fastapi", "uvicorn", "tokenizers", "setuptools"} <= names["runtime"]
    assert "ctranslate2" in names["bench"] and "ctranslate2" not in names["runtime"]
    assert {"pytest", "schemathesis", "uv"} <= names["test"] - names["runtime"]
    # torch.txt is what torch needs; the packages only torch needs stay out of the sets, so a kept torch keeps its own.
    torch_only = {p for p, *_ in entries("torch")} - set().union(*names.values())
    assert {"sympy", "mpmath", "networkx"} <= torch_only


def test_the_readme_says_when_the_locks_were_last_refreshed():
    dates = {
        m.group(1)
        for p in LOCKS.glob("*.txt")
        if (m := re.search(r"last refreshed to the newest releases on (\d{4}-\d{2}-\d{2})", p.read_text()))
    }
    assert len(dates) == 1, f"the locks disagree on their refresh date: {dates}"
    readme = " ".join((ROOT / "README.md").read_text().split())  # wrapped lines read as one
    assert f"last refreshed on {dates.pop()}" in readme, "the README must say when the locks were last refreshed"
