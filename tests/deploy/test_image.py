"""scripts/image-check.sh: the CPU image built from Debian with no image registry, run as deploy/k8s runs it.

The tests that build and run the image take minutes, so they run only when asked for (`pytest -m image
tests/deploy/test_image.py`; .ci/run does), and skip, saying why, where the script has nothing to run with: no
podman and no Docker daemon, or no root to make the base image with debootstrap.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.deploy.repo import DOCKERFILE, ROOT, healthcheck

IMAGE_CHECK = ROOT / "scripts" / "image-check.sh"
NOT_RUN_HERE = 77  # the script's exit status when it has nothing to run with


def image_check(*args: str, timeout: float, **env: str) -> subprocess.CompletedProcess:
    """The script as a user runs it: none of the test run's NMT_* or Inductor settings reach it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NMT_", "TORCHINDUCTOR_"))}
    return subprocess.run(
        ["bash", str(IMAGE_CHECK), *args], env=clean | env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def asked_for(request):
    if "image" not in (request.config.option.markexpr or ""):
        pytest.skip("builds and runs the container image for minutes: `pytest -m image tests/deploy/test_image.py`")


def ran(out: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if out.returncode == NOT_RUN_HERE:
        pytest.skip(out.stderr.strip().splitlines()[-1])
    print(out.stdout)  # the figures: `pytest -rP` shows them
    return out


@pytest.mark.image
def test_the_cpu_image_builds_without_a_registry_serves_the_readme_translation_read_only_and_drains(asked_for):
    out = ran(image_check(timeout=3600))
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    summary = out.stdout.split("image-check: passed\n", 1)[1]
    for line in ("image ", "cold build", "cached build", "without the GIL", "second start", "SIGTERM        exit 0"):
        assert line in summary


@pytest.mark.image
def test_an_image_whose_healthcheck_never_passes_fails_the_check(asked_for, tmp_path):
    _, command = healthcheck()
    broken = DOCKERFILE.read_text().replace(command[-1], command[-1].replace("/ready", "/not-ready"))
    assert broken != DOCKERFILE.read_text()
    (tmp_path / "Dockerfile").write_text(broken)
    out = ran(
        image_check("--cached", "--dockerfile", str(tmp_path / "Dockerfile"), "--tag", "nmt-serve:broken", timeout=900,
                    TMPDIR=str(tmp_path))  # the log a failed check keeps goes with the test's files
    )  # fmt: skip
    assert out.returncode == 1, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    assert "the image's healthcheck" in out.stderr and "image-check: passed" not in out.stdout
    assert '"GET /not-ready HTTP/1.1" 404' in out.stderr, "the container's log comes with the failure"


def test_help_says_what_it_checks():
    out = image_check("--help", timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("# The container image, built and run for real")
    for what in ("debootstrap", "--gpu-build", "SIGTERM", "read-only", "Exit status 77"):
        assert what in out.stdout


@pytest.mark.parametrize("args", [["--bogus"], ["--dockerfile", "no/such/Dockerfile"], ["--base"]])
def test_bad_options_are_refused_before_anything_runs(args):
    out = image_check(*args, timeout=30, CONTAINER_ENGINE="false")
    assert out.returncode == 2 and "usage:" in out.stderr


def test_without_a_container_engine_it_says_it_did_not_run():
    out = image_check(timeout=30, CONTAINER_ENGINE="no-such-engine")
    assert out.returncode == NOT_RUN_HERE and out.stdout == ""
    assert out.stderr.strip() == "image-check: skipped: CONTAINER_ENGINE=no-such-engine is not installed"
