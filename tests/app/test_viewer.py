"""The viewer page without a browser: served at / and /viewer, open without the API key, self-contained."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

from app.settings import Settings
from app.viewer import ASSETS, STATIC_DIR
from tests.app.conftest import MODES, serve, served_in

pytestmark = pytest.mark.anyio
served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)  # one process, a front-end
ROOT = Path(__file__).resolve().parents[2]
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
# A module's static imports and re-exports: `import {a, b} from "./x.js"` (over several lines too), `import "./x.js"`
IMPORT = re.compile(r"""^\s*(?:(?:import|export)\b[^"';]*?\bfrom|import)\s*["']([^"']+)["']""", re.MULTILINE)


@pytest.mark.parametrize("path", ["/", "/viewer"])
async def test_the_page_is_served_at_root_and_viewer(client, path):
    r = await client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    hooks = ('id="source"', 'id="translate"', 'id="heatmap"', 'id="headview"', 'id="tooltip"', 'id="error"',
             'id="beam-size"', 'id="num-hypotheses"', 'id="alternatives"', 'id="source-text"',
             'id="source-language"', 'id="target-language"')  # fmt: skip
    for hook in hooks:
        assert hook in r.text
    assert '<script type="module" src="static/main.js"></script>' in r.text and 'href="static/viewer.css"' in r.text
    csp = r.headers["content-security-policy"]
    assert "connect-src 'self'" in csp and "script-src 'self'" in csp and "default-src 'none'" in csp


async def test_the_assets_are_served_with_their_types_and_nothing_else_is(client):
    for name, kind in ASSETS.items():
        r = await client.get(f"/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"] == kind
        assert r.content == (STATIC_DIR / name).read_bytes()
    assert {"viewer.css", "main.js"} <= set(ASSETS)
    r = await client.get("/static/index.html.bak")
    assert (r.status_code, r.json()["type"]) == (404, "not_found")
    assert (await client.get("/static/..%2Fviewer.py")).status_code == 404
    assert (await client.get("/static/main.js.map")).status_code == 404


async def test_every_module_the_entry_imports_is_served_as_javascript(client):
    """The page's module graph, read as the browser reads it: main.js from index.html, then every import in what the
    server sends, each a sibling (./name.js) served as JavaScript; and no file in static/ that nothing imports."""
    page = (await client.get("/")).text
    (entry,) = re.findall(r'<script type="module" src="static/([\w-]+\.js)"></script>', page)
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        r = await client.get(f"/static/{name}")
        assert (r.status_code, r.headers["content-type"]) == (200, "text/javascript; charset=utf-8"), name
        specifiers = IMPORT.findall(r.text)
        assert specifiers or name != entry
        for spec in specifiers:
            assert re.fullmatch(r"\./[\w-]+\.js", spec), f"{name} imports {spec!r}: a sibling ./name.js, please"
            todo.append(spec.removeprefix("./"))
    assert seen == {p.name for p in STATIC_DIR.glob("*.js")}, "a module in app/static that main.js never imports"


async def test_the_page_stays_out_of_the_api_schema(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not {"/", "/viewer", "/static/{name}"} & set(paths)


async def test_the_page_is_open_when_an_api_key_is_set_and_the_api_is_not(tiny_checkpoint):
    async with serve(Settings(model_dir=tiny_checkpoint, api_key="s3cret")) as (_, client):
        for path in ("/", "/viewer", "/static/main.js", "/static/api.js", "/static/viewer.css"):
            assert (await client.get(path)).status_code == 200, path
        r = await client.post("/attention", json={"text": "A dog."})
        assert (r.status_code, r.json()["type"]) == (401, "unauthorized")


def test_the_static_files_load_nothing_from_elsewhere():
    """Offline: no URL but the SVG namespace name, no protocol-relative or absolute src/href, no @import."""
    for path in sorted(STATIC_DIR.iterdir()):
        text = path.read_text()
        assert set(re.findall(r"[a-z][a-z0-9+.-]*://[^\s\"'()<>]*", text, re.IGNORECASE)) <= {SVG_NAMESPACE}, path.name
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(/|[a-z]+:(?!,))""", text, re.IGNORECASE), path.name
        assert "@import" not in text and "url(" not in text, path.name
        assert not re.search(r"\bfetch\(\s*[\"'`]/", text), f"{path.name}: API paths stay relative for a path prefix"


def test_every_static_file_is_package_data():
    """A non-editable install must carry the page: pyproject's package-data covers every file in app/static."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["app"]
    files = [p.relative_to(STATIC_DIR.parent).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()]
    assert {"static/index.html", "static/viewer.css", "static/main.js", "static/api.js"} <= set(files)
    assert all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files), (files, patterns)
