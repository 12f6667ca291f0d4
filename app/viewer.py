"""The attention viewer: a static page at / and /viewer that calls /tokenize, /translate and /attention.

Open to everyone even when NMT_API_KEY is set: the page holds no data, it asks for the key and sends it
with each API call. Left out of the OpenAPI schema, which describes the JSON API only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent / "static"
TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
# The page's files by name, listed once from static/: its stylesheet and its JavaScript modules (main.js, the entry,
# and what it imports; a module served as anything but JavaScript does not run). Any other name is a 404, so a
# request reaches no other file.
ASSETS = {path.name: TYPES[path.suffix] for path in sorted(STATIC_DIR.glob("*")) if path.suffix in TYPES}
# Everything comes from this server: no CDN, no external fonts, and the page cannot talk to another origin.
# script-src 'self' lets the entry module and the modules it imports load, all from this origin.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

router = APIRouter(include_in_schema=False)


@router.get("/")
@router.get("/viewer")
async def viewer() -> FileResponse:
    """The viewer page."""
    headers = {**HEADERS, "Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"}
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8", headers=headers)


@router.get("/static/{name}")
async def asset(name: str) -> FileResponse:
    """The page's stylesheet and its JavaScript modules."""
    if name not in ASSETS:
        raise HTTPException(404)
    return FileResponse(STATIC_DIR / name, media_type=ASSETS[name], headers=HEADERS)
