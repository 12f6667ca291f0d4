"""docker-compose.yml: valid Compose, the GPU reserved, the settings passed through, replicas behind nginx."""

from __future__ import annotations

import copy
import json
import os
import re
from importlib.resources import files

import crossplane
import jsonschema
import pytest

from app.engine.device import resolve_device
from app.main import FORM_BYTES
from app.settings import BUNDLED_MODEL_DIR, MAX_BODY_BYTES, Settings
from tests.deploy.repo import (
    NGINX_CONF,
    ROOT,
    WORKDIR,
    compose,
    dockerfile,
    healthcheck,
    instructions,
    interpolate,
    published,
    resolved_compose,
)

PORT = Settings.model_fields["port"].default
IN_IMAGE_MODEL_DIR = f"{WORKDIR}/{BUNDLED_MODEL_DIR.relative_to(ROOT).as_posix()}"
GPU_SERVICES, SERVING = ("nmt", "nmt-replica"), ("nmt", "nmt-cpu", "nmt-replica")
# Where the compose defaults differ from Settings' on purpose: a container listens on all its interfaces, the
# GPU services insist on CUDA (a container that cannot see the GPU should fail, not quietly run on the CPU),
# and the model is the one baked into the image.
CONTAINER_DEFAULTS = {
    "host": "0.0.0.0", "model_dir": IN_IMAGE_MODEL_DIR, "compile_cache_dir": "/var/cache/nmt-serve",
    "glossary_dir": "/var/lib/nmt-serve/glossaries",  # a volume: glossaries outlive the container
    "job_dir": "/var/lib/nmt-serve/jobs",  # a volume: file translations resume after a restart
}  # fmt: skip
DEVICE = {"nmt": "cuda", "nmt-replica": "cuda", "nmt-cpu": "cpu"}


@pytest.fixture(scope="module")
def compose_schema() -> dict:
    """The Compose Specification's JSON schema, as vendored by check-jsonschema (its licence is in
    check_jsonschema/builtin_schemas/vendor/licenses/LICENSE.compose-spec)."""
    return json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())


def schema_errors(schema: dict, document: dict) -> list[str]:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def services(host_env: dict[str, str] | None = None) -> dict[str, dict]:
    return resolved_compose(host_env)["services"]


def test_compose_file_is_valid_against_the_compose_specification(compose_schema):
    assert compose_schema["$id"] == "compose_spec.json"
    assert schema_errors(compose_schema, compose()) == []  # as written, ${...} included
    assert schema_errors(compose_schema, resolved_compose()) == []  # as Compose validates it, interpolated


@pytest.mark.parametrize(
    "break_it",
    [
        lambda c: c["services"]["nmt"]["deploy"]["resources"]["reservations"]["devices"][0].update(count=[1]),
        lambda c: c["services"]["nmt"].update(gpus_please=True),
        lambda c: c["services"]["nmt"]["healthcheck"].update(test=42),
    ],
    ids=["bad-count", "unknown-key", "bad-healthcheck"],
)
def test_the_schema_check_catches_mistakes(compose_schema, break_it):
    broken = copy.deepcopy(compose())
    break_it(broken)
    assert schema_errors(compose_schema, broken)


@pytest.mark.parametrize("name", GPU_SERVICES)
def test_gpu_is_reserved_the_compose_way(name):
    devices = services()[name]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def test_cpu_variant_and_load_balancer_reserve_no_gpu():
    for name in ("nmt-cpu", "lb"):
        assert "deploy" not in services()[name]


def test_profiles_default_gpu_cpu_variant_and_load_balanced_replicas():
    s = services()
    assert "profiles" not in s["nmt"], "`docker compose up` alone must start the GPU service"
    assert s["nmt-cpu"]["profiles"] == ["cpu"]
    assert s["nmt-replica"]["profiles"] == s["lb"]["profiles"] == ["lb"]


@pytest.mark.parametrize("name", SERVING)
def test_environment_is_exactly_the_service_settings_with_their_defaults(name):
    env = compose()["services"][name]["environment"]
    fields = Settings.model_fields
    keys = {k.removeprefix("NMT_").lower(): k for k in env}
    assert all(k.startswith("NMT_") for k in env), f"non-NMT_ variables: {[k for k in env if not k.startswith('NMT_')]}"
    assert set(keys) - set(fields) == set(), "environment keys that are not Settings fields"
    assert set(fields) - set(keys) == set(), "Settings fields docker-compose.yml does not pass through"

    resolved = interpolate(env, {})
    for field, key in keys.items():
        default = fields[field].default
        expected = {**CONTAINER_DEFAULTS, "device": DEVICE[name]}.get(field, "" if default is None else str(default))
        assert str(resolved[key]) == expected, f"{name}: {key} defaults to {resolved[key]!r}, expected {expected!r}"
        raw = str(env[key])
        if "${" in raw:  # a pass-through reads the host variable of the same name
            assert re.fullmatch(r"\$\{(\w+):-[^}]*\}", raw).group(1) == key


@pytest.mark.parametrize("name", SERVING)
def test_the_resolved_environment_is_accepted_by_settings(name, monkeypatch):
    for key in [k for k in os.environ if k.startswith("NMT_")]:
        monkeypatch.delenv(key)
    env = services({"NMT_DTYPE": "float16", "NMT_API_KEY": "s3cret"})[name]["environment"]
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    assert (settings.port, settings.host, str(settings.model_dir)) == (PORT, "0.0.0.0", IN_IMAGE_MODEL_DIR)
    assert settings.api_key.get_secret_value() == "s3cret"
    if name == "nmt-cpu":
        assert settings.dtype == "float32", "the CPU variant must not inherit a half-precision NMT_DTYPE"
        resolve_device(settings.device, settings.dtype)  # what nmt-serve checks before it starts
    else:
        assert (settings.device, settings.dtype) == ("cuda", "float16")


def test_an_operators_checkpoint_is_mounted_read_only_and_selected_by_nmt_model_dir():
    s = services({"CHECKPOINTS_DIR": "/srv/nmt", "NMT_MODEL_DIR": "/checkpoints/my-model"})
    for name in SERVING:
        mounts = [v for v in s[name]["volumes"] if v["target"] == "/checkpoints"]
        assert mounts == [{"type": "bind", "source": "/srv/nmt", "target": "/checkpoints", "read_only": True}]
        assert s[name]["environment"]["NMT_MODEL_DIR"] == "/checkpoints/my-model"
    default_source = services()["nmt"]["volumes"][0]["source"]
    assert (ROOT / default_source).resolve() == (ROOT / "checkpoints").resolve()


@pytest.mark.parametrize("setting", ["glossary_dir", "job_dir"])
def test_glossaries_and_jobs_live_on_volumes_the_replicas_share_in_directories_the_image_gives_the_service_user(setting):
    directory = CONTAINER_DEFAULTS[setting]
    assert dockerfile().envs[f"NMT_{setting.upper()}"] == directory
    made = [v for _, v in instructions("RUN") if directory in v]
    assert made and "mkdir -p" in made[0] and "chown 10001:10001" in made[0], made
    for name in SERVING:
        (mount,) = [v for v in services()[name]["volumes"] if v["target"] == directory]
        assert mount["type"] == "volume" and mount["source"] in compose()["volumes"]


def test_ports_publish_the_container_port_and_replicas_publish_none():
    s = services({"PUBLISH_PORT": "9000"})
    for name in ("nmt", "nmt-cpu"):
        assert published(s[name]) == [("9000", PORT)]
        assert s[name]["environment"]["NMT_PORT"] == str(PORT)
    assert "ports" not in s["nmt-replica"], "replicas cannot share a fixed host port; nginx publishes it"
    assert published(s["lb"]) == [("9000", PORT)]
    assert published(services()["nmt"]) == [(str(PORT), PORT)]
    assert not [n for n, svc in s.items() if "container_name" in svc], "container_name breaks --scale"


@pytest.mark.parametrize("name", SERVING)
def test_healthcheck_is_the_images_and_targets_ready(name):
    check = services()[name]["healthcheck"]
    options, command = healthcheck()
    assert check["test"] == ["CMD", *command]
    assert {k: str(check[k]) for k in options} == options, "the compose healthcheck timing differs from the image's"
    assert "/ready" in command[-1]


def test_every_long_running_service_restarts_and_stops_gracefully():
    for name, svc in services().items():
        assert svc.get("restart") in ("unless-stopped", "always"), f"{name} has no restart policy"
        assert "healthcheck" in svc, f"{name} has no healthcheck"
    for name in SERVING:  # nmt-serve drains in-flight requests for up to 30 s after SIGTERM; Docker waits 10 s
        assert int(services()[name]["stop_grace_period"].removesuffix("s")) > 30


def test_cpu_variant_builds_the_cpu_image():
    build = services()["nmt-cpu"]["build"]
    assert build["args"]["BASE_IMAGE"].startswith("python:3.1")
    # The slim images have no C++ compiler: the graphs would not compile (AOTInductor) and the eager model would serve.
    assert "slim" not in build["args"]["BASE_IMAGE"]
    assert build["args"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert services()["nmt-cpu"]["image"] != services()["nmt"]["image"]
    assert "args" not in services()["nmt"]["build"], "the GPU image is the Dockerfile's default"


# ---- the load balancer -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nginx(tmp_path_factory) -> list[dict]:
    """deploy/nginx.conf parsed as nginx would include it (inside http {}), with directive contexts checked."""
    main = tmp_path_factory.mktemp("nginx") / "nginx.conf"
    main.write_text(f"events {{}}\nhttp {{\n    include {NGINX_CONF};\n}}\n")
    parsed = crossplane.parse(str(main), check_ctx=True, check_args=True)
    assert parsed["status"] == "ok", parsed["errors"]
    (conf,) = [c for c in parsed["config"] if c["file"] == str(NGINX_CONF)]
    return conf["parsed"]


def directives(block: list[dict], name: str) -> list[dict]:
    return [d for d in block if d["directive"] == name]


def test_nginx_proxies_to_every_replica_of_the_replica_service(nginx):
    (upstream,) = directives(nginx, "upstream")
    (server,) = directives(upstream["block"], "server")
    host, _, port = server["args"][0].partition(":")
    assert host == "nmt-replica" and host in services() and int(port) == PORT
    assert "resolve" in server["args"] and directives(upstream["block"], "zone"), "re-resolve so --scale is seen"
    assert directives(nginx, "resolver")[0]["args"][0] == "127.0.0.11"  # Docker's embedded DNS
    (site,) = directives(nginx, "server")
    (location,) = directives(site["block"], "location")
    assert directives(location["block"], "proxy_pass")[0]["args"] == [f"http://{upstream['args'][0]}"]


def test_nginx_listens_on_the_port_compose_publishes_and_lets_the_service_answer_413(nginx):
    (site,) = directives(nginx, "server")
    assert directives(site["block"], "listen")[0]["args"] == [str(published(services()["lb"])[0][1])]
    (size,) = directives(site["block"], "client_max_body_size")
    amount = size["args"][0]
    as_bytes = int(amount[:-1]) * {"k": 1 << 10, "m": 1 << 20}[amount[-1].lower()]
    assert as_bytes > MAX_BODY_BYTES and as_bytes > Settings().file_max_bytes + FORM_BYTES  # a file upload's too
    retry = directives(site["block"], "proxy_next_upstream")[0]["args"]
    assert {"error", "http_503", "non_idempotent"} <= set(retry), "a refused or 503 POST goes to another replica"


def test_lb_runs_this_config_on_an_nginx_that_has_upstream_resolve():
    lb = services()["lb"]
    (mount,) = lb["volumes"]
    assert (ROOT / mount["source"]).resolve() == NGINX_CONF and mount["read_only"]
    assert mount["target"] == "/etc/nginx/conf.d/default.conf"
    image, _, tag = lb["image"].partition(":")
    version = tuple(int(x) for x in re.match(r"[\d.]+", tag).group(0).strip(".").split("."))
    newest = version + (999,) * (3 - len(version))  # a floating tag like 1.28 pulls the newest patch release
    assert image == "nginx" and newest >= (1, 27, 3), "`server ... resolve` needs nginx >= 1.27.3"
    assert lb["depends_on"] == {"nmt-replica": {"condition": "service_healthy"}}
