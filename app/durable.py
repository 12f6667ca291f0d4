"""Files that are on the disk before a request is answered: what the glossary store and the job store share."""

from __future__ import annotations

import os
from pathlib import Path


def write_new(path: Path, data: bytes) -> None:
    """A new file with `data`, on the disk before this returns."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def sync_directory(directory: Path) -> None:
    """Make the directory's entries (a rename, a new file, an unlink) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
