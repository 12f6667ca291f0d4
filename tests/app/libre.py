"""A helper the tests of the LibreTranslate-compatible API against live servers share: our own /translate's
translations, to compare LibreTranslate's clients' with."""

from __future__ import annotations

import httpx


def ours(base: str, text: str | list[str], headers: dict | None = None, **body) -> list[dict]:
    """Our own /translate's translations of `text`."""
    r = httpx.post(f"{base}/translate", json={"text": text, **body}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["translations"]
