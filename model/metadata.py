"""A checkpoint's metadata.json: its name, languages and how it was made (plain JSON: read without torch, by a
front-end too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METADATA = "metadata.json"


def write_metadata(path: str | Path, metadata: dict[str, Any]) -> None:
    (Path(path) / METADATA).write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")


def read_metadata(path: str | Path) -> dict[str, Any]:
    f = Path(path) / METADATA
    return json.loads(f.read_text()) if f.exists() else {}
