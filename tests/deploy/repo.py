"""The deployment files as the tests read them: Dockerfile instructions, the build context, the compose model."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
SMOKE = ROOT / "scripts" / "docker-smoke.sh"
WORKDIR = "/app"  # where the Dockerfile puts the project


@cache
def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(DOCKERFILE))


def instructions(name: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, value) in file order, comments left out."""
    return [
        (i["instruction"], i["value"])
        for i in dockerfile().structure
        if i["instruction"] != "COMMENT" and (name is None or i["instruction"] == name)
    ]


def healthcheck() -> tuple[dict[str, str], list[str]]:
    """The HEALTHCHECK's options ({"interval": "15s", ...}) and its exec-form command."""
    (_, value), *more = instructions("HEALTHCHECK")
    assert not more, "more than one HEALTHCHECK"
    options, _, command = value.partition(" CMD ")
    flags = dict(re.findall(r"--([a-z-]+)=(\S+)", options))
    return {k.replace("-", "_"): v for k, v in flags.items()}, json.loads(command)


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY from the build context (COPY --from=stage is not from the repo)."""
    out = []
    for _, value in instructions("COPY"):
        words = value.split()
        assert not any(w.startswith("--from") for w in words), "COPY --from: update this helper"
        words = [w for w in words if not w.startswith("--")]
        out.append((words[:-1], words[-1]))
    return out


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@cache
def build_context() -> frozenset[str]:
    """The files `docker build .` sends, by the Docker SDK's implementation of the .dockerignore rules."""
    from docker.utils.build import exclude_paths

    return frozenset(exclude_paths(str(ROOT), dockerignore_patterns()))


@cache
def compose() -> dict:
    """docker-compose.yml as written: `${VAR:-default}` unresolved, YAML anchors and `<<` merges applied."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\})")


def interpolate(value, host_env: dict[str, str]):
    """Compose's interpolation of `${VAR}`, `${VAR:-default}`, `${VAR-default}` and `$$`, through lists and maps."""
    if isinstance(value, dict):
        return {k: interpolate(v, host_env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, host_env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group("name"), m.group("op"), m.group("default") or ""
        if op == ":-":
            return host_env.get(name) or default
        if op == "-":
            return host_env.get(name, default)
        return host_env.get(name, "")

    return VARIABLE.sub(one, value)


def resolved_compose(host_env: dict[str, str] | None = None) -> dict:
    """The compose model as `docker compose config` would see it with only `host_env` set on the host."""
    return interpolate(compose(), host_env or {})


def published(service: dict) -> list[tuple[str, int]]:
    """(host port, container port) for each short-syntax `ports:` entry of a resolved service."""
    out = []
    for entry in service.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        out.append((host, int(container)))
    return out
