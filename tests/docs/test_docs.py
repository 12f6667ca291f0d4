"""The documentation: the site builds strictly, pages agree with the code, and the examples run as written."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.metrics import Metrics
from app.settings import BUNDLED_MODEL_DIR, Settings
from tests.app.live import start_server, wait_ready

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
sys.path.insert(0, str(DOCS))
import settings_table


def test_the_site_builds_in_strict_mode(tmp_path):
    """A warning (a broken link or anchor between pages, a page outside the table of contents) fails the build."""
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    built = {p.stem for p in tmp_path.glob("*.html")}
    assert {p.stem for p in DOCS.glob("*.md")} <= built


def test_the_configuration_page_lists_every_setting_with_its_true_default():
    page = (DOCS / "configuration.md").read_text()
    assert settings_table.render(page) == page, "the table is stale: python docs/settings_table.py"
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in page.splitlines() if "| `NMT_" in line
    }
    for name, field in Settings.model_fields.items():
        shown = rows[f"NMT_{name.upper()}"]
        true_default = field.default
        if true_default is None:
            assert shown == "unset"
        elif true_default == BUNDLED_MODEL_DIR:
            assert shown == "`<repo>/checkpoints/multi30k-en-de`"
        else:
            assert shown.strip("`") == (
                str(true_default).lower() if isinstance(true_default, bool) else str(true_default)
            )


def routes(app) -> set[tuple[str, str]]:
    """(method, path) of every route the app answers, through included routers (and their prefixes)."""
    out, stack = set(), [("", route) for route in app.routes]
    while stack:
        prefix, route = stack.pop()
        if inner := getattr(route, "original_router", None):  # FastAPI's included routers
            stack.extend((prefix + route.include_context.prefix, r) for r in inner.routes)
        elif hasattr(route, "path"):
            out |= {(m, prefix + route.path) for m in getattr(route, "methods", None) or {"GET"} if m != "HEAD"}
    return out


def test_the_api_page_names_every_route_and_every_metric():
    page = (DOCS / "api.md").read_text()
    found = routes(create_app(Settings()))
    assert ("POST", "/translate") in found and ("GET", "/viewer") in found
    for method, path in sorted(found - {("GET", "/docs/oauth2-redirect")}):  # Swagger UI's own helper page
        assert f"`{method} {path}`" in page, f"docs/api.md does not document {method} {path}"
    for metric in Metrics().registry.collect():
        assert metric.name in page, f"docs/api.md does not describe the metric {metric.name}"


# ---- the examples: every `$ command` in a ```console block, run against a live server, prints what is shown ----


def console_examples() -> list[tuple[str, str, str]]:
    """(page, command, expected output) for each `$ ` line of the pages' ```console blocks."""
    out = []
    for page in PAGES:
        for block in re.findall(r"^```console\n(.*?)^```$", page.read_text(), re.MULTILINE | re.DOTALL):
            for command, expected in re.findall(r"^\$ (.+)\n((?:(?!\$ ).*\n)*)", block, re.MULTILINE):
                out.append((page.relative_to(ROOT).as_posix(), command, expected))
    return out


EXAMPLES = console_examples()


def same(expected, actual, where: str = "") -> None:
    """JSON equality, with floats to within rounding and `"...": "..."` standing for keys left out."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        partial = expected.get("...") == "..."
        keys = set(expected) - {"..."}
        assert keys <= set(actual) if partial else keys == set(actual), (
            f"{where}: keys {sorted(keys)} vs {sorted(actual)}"
        )
        for key in keys:
            same(expected[key], actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(expected) == len(actual), f"{where}: {expected} vs {actual}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            same(e, a, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(actual, bool):
        assert isinstance(actual, (int, float)) and math.isclose(expected, actual, abs_tol=2e-3), (
            f"{where}: {expected} vs {actual}"
        )
    else:
        assert type(expected) is type(actual) and expected == actual, f"{where}: {expected!r} vs {actual!r}"


def same_output(expected: str, actual: str) -> None:
    want, got = expected.rstrip("\n").split("\n"), actual.rstrip("\n").split("\n")
    assert len(want) == len(got), f"{len(want)} lines shown, {len(got)} printed:\n{actual}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if w.startswith("data: ") and g.startswith("data: "):
            w, g = w.removeprefix("data: "), g.removeprefix("data: ")
        if w.startswith(("{", "[")):
            same(json.loads(w), json.loads(g), f"line {i + 1}")
        else:
            assert w == g, f"line {i + 1}"


@pytest.fixture(scope="module")
def bundled_server():
    proc, base = start_server(BUNDLED_MODEL_DIR, NMT_COMPILE="false")
    try:
        wait_ready(proc, base, timeout=120)
        yield base
    finally:
        proc.kill()
        proc.wait()


def test_the_pages_have_examples_to_run():
    pages = {page for page, _, _ in EXAMPLES}
    assert "docs/api.md" in pages and len(EXAMPLES) >= 10


@pytest.mark.parametrize(("page", "command", "expected"), EXAMPLES, ids=[f"{p}:{c[:60]}" for p, c, _ in EXAMPLES])
def test_a_console_example_prints_what_the_page_shows(bundled_server, page, command, expected):
    assert "localhost:8000" in command, "examples talk to the default address; the test points them at its server"
    run = subprocess.run(
        ["bash", "-c", command.replace("localhost:8000", bundled_server.removeprefix("http://"))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    same_output(expected, run.stdout)


def test_every_metric_the_api_page_names_is_served(bundled_server):
    served = httpx.get(f"{bundled_server}/metrics").text
    for name in set(re.findall(r"\bnmt_[a-z_]+\b", (DOCS / "api.md").read_text())):
        assert re.search(rf"^# TYPE {name}\b|^{name}[{{ ]", served, re.MULTILINE), f"/metrics has no {name}"


# ---- links and claims ---------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """The anchor GitHub and MyST give a heading."""
    text = unicodedata.normalize("NFKC", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{page.name} links to {target}: no such heading in {file.name}"


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    for must in ("bash scripts/serve.sh", "bash scripts/test.sh", "/ready", "NMT_COMPILE=off", "docs/api.md", "MIT"):
        assert must in readme, must


def test_the_readme_performance_summary_quotes_the_performance_page():
    """A figure lives in docs/performance.md; the README's summary may only repeat what is there."""
    readme = (ROOT / "README.md").read_text()
    summary = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    performance = (DOCS / "performance.md").read_text()
    figures = re.findall(r"\d+(?:,\d{3})*(?:\.\d+)*", summary)
    assert len(figures) >= 4 and "docs/performance.md" in summary
    for figure in figures:
        assert figure in performance, f"the README's summary says {figure}, which docs/performance.md does not"


def test_no_page_speaks_of_sessions_or_of_this_machine():
    words = re.compile("|".join(["this " + "session", "last " + "session", "this " + "machine"]), re.IGNORECASE)
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    offending = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".safetensors", ".png"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if words.search(line):
                offending.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offending, "\n".join(offending)
