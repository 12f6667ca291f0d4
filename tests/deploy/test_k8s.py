"""deploy/k8s: every overlay renders, passes the official Kubernetes schemas, and names what the app really has."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml
from asgi_lifespan import LifespanManager
from prometheus_client.parser import text_string_to_metric_families

from app.cli import STOP_GRACE_S
from app.engine.device import resolve_device
from app.main import create_app
from app.settings import BUNDLED_MODEL_DIR, Settings
from tests.deploy.repo import ROOT, dockerfile, instructions

K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("cpu", "gpu", "checkpoints-volume", "shared-data")
KUBECTL = shutil.which("kubectl")
# The schemas the manifests are checked against: kubectl's minor version here (v1.32, kustomize v5.5). The preStop
# `sleep` action needs clusters >= 1.30.
KUBERNETES = "1.32"
# docs/performance.md "Start-up": NMT_COMPILE=blocking on an empty cache directory answered /ready after 312.1 s
# (the bundled model, 2 cores); the startup probe must outlast it with room to spare.
BLOCKING_COLD_START_S = 312.1
MARGIN_S = 5  # beyond the drain: for the process to exit and the kubelet to see it


@cache
def render(directory: str) -> tuple[dict, ...]:
    """The objects `kubectl kustomize deploy/k8s/<directory>` prints."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: it renders the Kustomize overlays (`kubectl kustomize`)")
    out = subprocess.run([KUBECTL, "kustomize", str(K8S / directory)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def one(objects, kind: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def overlay(name: str) -> dict[str, dict]:
    """An overlay's objects by kind (each kind once)."""
    objects = render(f"overlays/{name}")
    kinds = [o["kind"] for o in objects]
    assert len(kinds) == len(set(kinds)), f"{name}: several objects of one kind: {kinds}"
    return {o["kind"]: o for o in objects}


def pod(name: str) -> dict:
    return overlay(name)["Deployment"]["spec"]["template"]


def server(name: str) -> dict:
    (container,) = [c for c in pod(name)["spec"]["containers"] if c["name"] == "nmt-serve"]
    return container


def settings_env(name: str) -> dict[str, str]:
    """The environment the server container gets from its ConfigMap (envFrom) and its own `env` values."""
    objects = overlay(name)
    (source,) = server(name)["envFrom"]
    config = objects["ConfigMap"]
    assert source["configMapRef"]["name"] == config["metadata"]["name"], "envFrom names another ConfigMap"
    own = {e["name"]: e["value"] for e in server(name).get("env", []) if "value" in e}
    return {**config["data"], **own}


def settings(name: str, monkeypatch) -> Settings:
    """Settings as the server in that overlay's pod reads them."""
    for key in [k for k in os.environ if k.startswith("NMT_")]:
        monkeypatch.delenv(key)
    for key, value in settings_env(name).items():
        if key.startswith("NMT_"):
            monkeypatch.setenv(key, value)
    return Settings()


def quantity(value) -> float:
    """A Kubernetes quantity (2, "500m", "2Gi", "3G") as a number."""
    m = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?", str(value))
    assert m, f"{value!r} is not a quantity"
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    scale |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(m.group(1)) * scale[m.group(2)]


def port_number(container: dict, port) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    return by_name[port] if isinstance(port, str) else port


# ---- the manifests are valid Kubernetes --------------------------------------------------------------------------


def schema_errors(obj: dict) -> list[str]:
    try:
        assert kubernetes_validate.validate(obj, KUBERNETES, strict=True) == KUBERNETES
    except kubernetes_validate.ValidationError as e:
        return [f"{obj['kind']}/{obj['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}"]
    return []


@pytest.mark.parametrize("directory", ["base", *(f"overlays/{o}" for o in OVERLAYS), "prometheus-adapter"])
def test_each_kustomization_renders_objects_valid_against_the_kubernetes_schemas(directory):
    objects = render(directory)
    assert objects
    # strict: an unknown field is an error, as `kubectl apply --validate=strict` makes it; SchemaNotFoundError (a
    # kind or apiVersion that Kubernetes 1.32 does not have) fails the test too
    assert [e for o in objects for e in schema_errors(o)] == []


def unknown_field(d):
    d["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}


def wrong_type(d):
    d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"


def nameless_container(d):
    del d["spec"]["template"]["spec"]["containers"][0]["name"]


def removed_api(d):
    d["apiVersion"] = "extensions/v1beta1"


@pytest.mark.parametrize("break_it", [unknown_field, wrong_type, nameless_container, removed_api])
def test_the_schema_check_rejects_a_broken_deployment(break_it):
    broken = copy.deepcopy(overlay("cpu")["Deployment"])
    assert schema_errors(broken) == []
    break_it(broken)
    with pytest.raises((kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError)):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_overlays_hold_the_service_its_autoscaler_and_its_budget():
    for name in OVERLAYS:
        objects = overlay(name)
        extra = {"PersistentVolumeClaim"} if name in ("checkpoints-volume", "shared-data") else set()
        assert (
            set(objects)
            == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} | extra
        )
        assert all("namespace" not in o["metadata"] for o in objects.values()), "the namespace is the user's (-n)"
        labels = pod(name)["metadata"]["labels"]
        for selector in (
            objects["Deployment"]["spec"]["selector"]["matchLabels"],
            objects["Service"]["spec"]["selector"],
            objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
            *(t["labelSelector"]["matchLabels"] for t in pod(name)["spec"]["topologySpreadConstraints"]),
        ):
            assert selector and selector.items() <= labels.items(), f"{name}: {selector} does not select {labels}"
        target = objects["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
        deployment = objects["Deployment"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
        assert "replicas" not in deployment["spec"], "a replica count would reset the autoscaler's at every apply"


# ---- what the pods run --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_container_runs_unprivileged_on_a_read_only_root(name):
    spec = pod(name)["spec"]
    (user,) = [v for _, v in instructions("USER")]
    assert f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}" == user
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False, "a Service named `nmt` would inject NMT_PORT=tcp://..."
    for c in spec["initContainers"] + spec["containers"]:
        ctx = c["securityContext"]
        assert ctx.get("runAsNonRoot", spec["securityContext"]["runAsNonRoot"]) is True, c["name"]
        assert ctx["readOnlyRootFilesystem"] is True, c["name"]
        assert ctx["allowPrivilegeEscalation"] is False, c["name"]
        assert ctx["capabilities"]["drop"] == ["ALL"] and "add" not in ctx["capabilities"], c["name"]
        assert ctx.get("privileged") is not True, c["name"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_container_has_cpu_and_memory_requests_within_limits(name):
    for c in pod(name)["spec"]["initContainers"] + pod(name)["spec"]["containers"]:
        requests, limits = c["resources"]["requests"], c["resources"]["limits"]
        for resource in ("cpu", "memory"):
            assert quantity(requests[resource]) <= quantity(limits[resource]), f"{c['name']}: {resource}"


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_server_sizes_its_threads_and_memory_for_its_limits(name, monkeypatch):
    c = server(name)
    cpu = quantity(c["resources"]["limits"]["cpu"])
    assert settings(name, monkeypatch).threads == cpu, "NMT_THREADS must be the CPU limit (torch counts node cores)"
    assert float(settings_env(name)["TORCHINDUCTOR_COMPILE_THREADS"]) == cpu
    # docs/performance.md: the soak's resident set reached 1,968 MB at most (concurrency 32, the bundled model)
    assert quantity(c["resources"]["requests"]["memory"]) >= 1968 * 2**20


def test_the_container_port_is_the_images_and_every_probe_and_the_service_use_it(monkeypatch):
    env = dockerfile().envs
    (expose,) = [int(v) for _, v in instructions("EXPOSE")]
    for name in OVERLAYS:
        c, objects = server(name), overlay(name)
        (port,) = c["ports"]
        assert port["containerPort"] == int(env["NMT_PORT"]) == expose == settings(name, monkeypatch).port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert port_number(c, c[probe]["httpGet"]["port"]) == port["containerPort"], f"{name} {probe}"
        (service_port,) = objects["Service"]["spec"]["ports"]
        assert port_number(c, service_port["targetPort"]) == port["containerPort"]
        annotations = pod(name)["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == port["containerPort"]


def test_readiness_is_ready_and_liveness_is_health():
    for name in OVERLAYS:
        c = server(name)
        assert c["readinessProbe"]["httpGet"]["path"] == c["startupProbe"]["httpGet"]["path"] == "/ready"
        assert c["livenessProbe"]["httpGet"]["path"] == "/health", "a loading model must not get the pod restarted"


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_startup_probe_outlasts_a_blocking_cold_compile(name):
    probe = server(name)["startupProbe"]
    budget = probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]
    assert budget >= 1.5 * BLOCKING_COLD_START_S, f"{name}: {budget} s for a start that took {BLOCKING_COLD_START_S} s"


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_grace_period_covers_the_pre_stop_pause_and_the_drain(name, monkeypatch):
    spec, c = pod(name)["spec"], server(name)
    pause = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = settings(name, monkeypatch).shutdown_timeout_s
    assert pause >= 1, "without a pause SIGTERM can come before the endpoint is gone from the load balancers"
    assert spec["terminationGracePeriodSeconds"] >= pause + drain + STOP_GRACE_S + MARGIN_S


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_writable_paths_are_the_compile_cache_and_tmp(name, monkeypatch):
    spec, c = pod(name)["spec"], server(name)
    empty = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    writable = {m["mountPath"]: m["name"] for m in c["volumeMounts"] if not m.get("readOnly")}
    if name == "shared-data":  # its claim: the test below
        writable.pop(DATA)
    cache_dir = str(settings(name, monkeypatch).compile_cache_dir)
    assert set(writable) == {cache_dir, "/tmp"}, f"writable mounts {writable}, expected the compile cache and /tmp"
    assert set(writable.values()) <= empty
    # the init container copies what the image has in its own NMT_COMPILE_CACHE_DIR into that volume
    assert dockerfile().envs["NMT_COMPILE_CACHE_DIR"] == cache_dir
    (seed,) = spec["initContainers"]
    (mount,) = seed["volumeMounts"]
    assert mount["name"] == writable[cache_dir] and seed["image"] == c["image"]
    assert f"'{cache_dir}', '{mount['mountPath']}'" in seed["command"][-1]


DATA = "/var/lib/nmt-serve"  # the shared-data overlay's volume


def test_shared_data_overlay_gives_every_replica_one_claim_for_glossaries_and_jobs(monkeypatch):
    """Stored glossaries and jobs in one ReadWriteMany claim mounted where the image's NMT_GLOSSARY_DIR and
    NMT_JOB_DIR lie, so that any replica reads any glossary and follows any job; the other overlays have none (their
    read-only root makes storing either a 500, docs/deployment.md says)."""
    spec, c = pod("shared-data")["spec"], server("shared-data")
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == DATA]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    claim = one(render("overlays/shared-data"), "PersistentVolumeClaim")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"] and not mount.get("readOnly")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    s = settings("shared-data", monkeypatch)
    env = dockerfile().envs
    for directory in (env["NMT_GLOSSARY_DIR"], env["NMT_JOB_DIR"]):
        assert Path(directory).parent == Path(DATA)
    assert s.glossary_dir is None and s.job_dir is None  # the image's, not overridden
    for other in ("cpu", "gpu", "checkpoints-volume"):
        assert DATA not in {m["mountPath"] for m in server(other)["volumeMounts"]}


def test_the_seed_command_copies_an_images_compiled_graphs(tmp_path):
    (seed,) = pod("cpu")["spec"]["initContainers"]
    image_dir, volume = tmp_path / "image", tmp_path / "volume"
    (image_dir / "nmt-serve-graphs" / "abc").mkdir(parents=True)
    (image_dir / "nmt-serve-graphs" / "abc" / "greedy_step.pt2").write_bytes(b"graph")
    volume.mkdir()
    (_, src), (_, dst) = re.findall(r"(['\"])(/[^'\"]+)\1", seed["command"][-1])
    script = seed["command"][-1].replace(src, str(image_dir)).replace(dst, str(volume))
    assert seed["command"][0] == "python"  # the image's (its HEALTHCHECK runs it too)
    subprocess.run([sys.executable, *seed["command"][1:-1], script], check=True)
    assert (volume / "nmt-serve-graphs" / "abc" / "greedy_step.pt2").read_bytes() == b"graph"


# ---- the overlays -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS)
def test_settings_are_nmt_settings_that_the_server_accepts(name, monkeypatch):
    data = overlay(name)["ConfigMap"]["data"]
    fields = Settings.model_fields
    assert {k.removeprefix("NMT_").lower() for k in data} <= set(fields), "keys that are not Settings fields"
    assert all(k.startswith("NMT_") for k in data)
    s = settings(name, monkeypatch)
    assert (s.host, s.compile, s.api_key) == ("0.0.0.0", "background", None)
    if name == "gpu":
        assert (s.device, s.dtype) == ("cuda", "float16")
    else:
        assert (s.device, s.dtype) == ("cpu", "float32")
        resolve_device(s.device, s.dtype)  # what nmt-serve checks before it starts


def test_the_api_key_comes_from_an_optional_secret_and_never_from_the_configmap():
    for name in OVERLAYS:
        (key,) = [e for e in server(name)["env"] if e["name"] == "NMT_API_KEY"]
        ref = key["valueFrom"]["secretKeyRef"]
        assert ref["optional"] is True and ref["name"] and ref["key"]
        assert "NMT_API_KEY" not in overlay(name)["ConfigMap"]["data"]
        assert not [o for o in render(f"overlays/{name}") if o["kind"] == "Secret"], "no key is shipped in git"


def test_gpu_overlay_asks_for_one_gpu_and_tolerates_gpu_nodes():
    c = server("gpu")
    assert str(c["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod("gpu")["spec"]["tolerations"]
    assert c["image"].endswith(":gpu") and server("cpu")["image"].endswith(":cpu")
    for name in ("cpu", "checkpoints-volume"):
        assert "nvidia.com/gpu" not in server(name)["resources"]["limits"]
        assert "tolerations" not in pod(name)["spec"]


def test_volume_overlay_mounts_the_checkpoints_read_only_and_serves_from_them(monkeypatch):
    objects, spec, c = overlay("checkpoints-volume"), pod("checkpoints-volume")["spec"], server("checkpoints-volume")
    (volume,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and volume["persistentVolumeClaim"]["readOnly"] is True
    assert volume["persistentVolumeClaim"]["claimName"] == objects["PersistentVolumeClaim"]["metadata"]["name"]
    model_dir = settings("checkpoints-volume", monkeypatch).model_dir
    assert model_dir.is_relative_to(mount["mountPath"]) and model_dir != Path(mount["mountPath"])
    assert server("cpu")["image"] == c["image"], "the volume overlay is the CPU deployment plus the volume"
    assert "NMT_MODEL_DIR" not in settings_env("cpu"), "the other overlays serve the image's bundled model"


# ---- the autoscaler and its metric --------------------------------------------------------------------------------


def test_autoscaler_scales_on_sequences_and_tokens_per_replica_fast_up_and_slowly_down():
    for name in OVERLAYS:
        hpa = overlay(name)["HorizontalPodAutoscaler"]["spec"]
        assert [m["pods"]["metric"]["name"] for m in hpa["metrics"]] == list(HPA_METRICS)
        for metric in hpa["metrics"]:
            assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
        assert hpa["minReplicas"] >= 2 > overlay(name)["PodDisruptionBudget"]["spec"]["maxUnavailable"]
        assert hpa["maxReplicas"] > hpa["minReplicas"]
        up, down = hpa["behavior"]["scaleUp"], hpa["behavior"]["scaleDown"]
        assert up["stabilizationWindowSeconds"] == 0
        assert any(p["type"] == "Percent" and p["value"] >= 100 and p["periodSeconds"] <= 60 for p in up["policies"])
        assert down["stabilizationWindowSeconds"] >= 300
    targets = {n: [quantity(m["pods"]["target"]["averageValue"])
                   for m in overlay(n)["HorizontalPodAutoscaler"]["spec"]["metrics"]] for n in OVERLAYS}  # fmt: skip
    # docs/scaling.md: both at 70% of a replica's measured capacity, and the sequences in flight below the 32 rows a
    # CPU replica decodes together (NMT_MAX_BATCH_SIZE's default on a CPU): past them arrivals wait for a row
    assert targets["cpu"] == targets["checkpoints-volume"] and 0 < targets["cpu"][0] < 32
    assert targets["gpu"][0] > 32 and targets["gpu"][1] > targets["cpu"][1]


def adapter_rules() -> list[dict]:
    config = one(render("prometheus-adapter"), "ConfigMap")
    assert set(config["data"]) == {"config.yaml"}, "the chart's rules.existing mounts the ConfigMap's config.yaml"
    return yaml.safe_load(config["data"]["config.yaml"])["rules"]


def series_names(query: str) -> set[str]:
    """The metric names a PromQL query selects (`name{...}`), functions and `by (...)` left out."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", query))


# the autoscaler's metrics, each served by one adapter rule from these series of /metrics (by their type there)
HPA_METRICS = {
    "nmt_sequences_in_flight": {"nmt_queue_length": "gauge", "nmt_running_batch_size": "gauge"},
    "nmt_generated_tokens_per_second": {"nmt_generated_tokens_total": "counter"},
}


@pytest.mark.parametrize("metric", HPA_METRICS)
def test_adapter_rule_serves_the_metric_the_autoscaler_names(metric):
    (rule,) = [r for r in adapter_rules() if r["name"]["as"] == metric]
    (series,) = series_names(rule["seriesQuery"])
    assert re.search(rule["name"]["matches"], series), "the name rule does not match the series it discovers"
    # per pod: the adapter maps the scrape job's namespace and pod labels to the objects the autoscaler asks about
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    query = rule["metricsQuery"]
    assert query.count("<<.LabelMatchers>>") == len(re.findall(r"\{", query)), "a series not narrowed to the pods"
    assert query.count("sum by (<<.GroupBy>>)") == len(series_names(query)), "a series not summed per pod"


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def live_metrics() -> dict[str, str]:
    """Every metric family a live server's /metrics exports (the bundled model, as the image serves it), by type."""
    app = create_app(Settings(model_dir=BUNDLED_MODEL_DIR, compile="off", threads=1))
    async with LifespanManager(app, startup_timeout=120, shutdown_timeout=60):
        await app.state.loading
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://nmt") as client:
            paths = {"/ready", "/health", "/metrics"}
            for name in OVERLAYS:
                c = server(name)
                paths |= {c[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")}
                paths.add(pod(name)["metadata"]["annotations"]["prometheus.io/path"])
            answers = {path: (await client.get(path)).status_code for path in sorted(paths)}
            assert answers == dict.fromkeys(answers, 200), f"probe or scrape paths that do not answer 200: {answers}"
            text = (await client.get("/metrics")).text
    return {family.name: family.type for family in text_string_to_metric_families(text)}


@pytest.mark.anyio
async def test_adapter_rules_query_series_a_live_server_exports(live_metrics):
    rules = {r["name"]["as"]: r for r in adapter_rules()}
    assert set(rules) == set(HPA_METRICS), "a rule for each of the autoscaler's metrics, and no other"
    for metric, series in HPA_METRICS.items():
        queried = series_names(rules[metric]["seriesQuery"]) | series_names(rules[metric]["metricsQuery"])
        assert queried == set(series)
        # a counter's family is exported as NAME_total; rate() is only meaningful on a counter
        assert {s: live_metrics.get(s.removesuffix("_total")) for s in queried} == series
        assert ("rate(" in rules[metric]["metricsQuery"]) == (set(series.values()) == {"counter"})


@pytest.mark.anyio
async def test_probes_answer_without_the_api_key_and_metrics_need_it(tiny_checkpoint):
    """Kubelet's probes send no credentials; Prometheus must send the key once NMT_API_KEY is set (docs)."""
    app = create_app(Settings(model_dir=tiny_checkpoint, compile="off", threads=1, api_key="k8s-test-key"))
    async with LifespanManager(app, startup_timeout=60, shutdown_timeout=60):
        await app.state.loading
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://nmt") as client:
            c = server("cpu")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert (await client.get(c[probe]["httpGet"]["path"])).status_code == 200, probe
            scrape = pod("cpu")["metadata"]["annotations"]["prometheus.io/path"]
            assert (await client.get(scrape)).status_code == 401
            key = {"Authorization": "Bearer k8s-test-key"}
            assert (await client.get(scrape, headers=key)).status_code == 200
