"""A directory of a process's own that outlives it only if the process is killed, and is then removed by the next
one made beside it.

    with Workspace(parent, ".builders-") as root:   # parent/.builders-XXXXXXXX, removed on leaving
        ...

While its Workspace lives, the directory holds a lock (flock on its `owner` file, which the kernel lets go when the
process dies however it dies); making a Workspace first removes the directories of the same prefix whose lock is
free: those left by a process killed (kill -9, the OOM killer) before it could remove its own. No imports beyond
the standard library: the server's parent process, which never loads torch, keeps one too.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

# A directory whose lock is free is abandoned once its owner file is this old: its maker creates and locks the file
# at once, so a lock still free after this long is one whose process died
ABANDONED_AFTER_S = 60


class Workspace:
    """A new directory `prefix`XXXXXXXX in `parent` (made if absent), mode 0700, removed by `remove` (or leaving the
    `with`); the abandoned ones of the same prefix there are removed first."""

    def __init__(self, parent: Path, prefix: str):
        parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned(parent, prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            self._owner = (self.path / "owner").open("w")
            fcntl.flock(self._owner, fcntl.LOCK_EX)  # held while this process lives: not abandoned
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._owner.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"


def unwritable(directory: Path) -> str | None:
    """Why a process could not keep files in `directory` (made where missing), or None where it can."""
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written (permissions, or a read-only file system)"
    return None


def remove_abandoned(parent: Path, prefix: str) -> list[Path]:
    """Remove the directories `prefix`* in `parent` whose owner's lock is free (their process died); those removed."""
    removed = []
    for directory in parent.glob(f"{prefix}*"):
        if directory.is_dir() and _abandoned(directory):
            shutil.rmtree(directory, ignore_errors=True)
            log.warning("removed %s: a directory a killed process had left", directory)
            removed.append(directory)
    return removed


def _abandoned(directory: Path) -> bool:
    try:
        with (directory / "owner").open("r") as owner:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError while its Workspace lives, here or elsewhere
            return time.time() - os.fstat(owner.fileno()).st_mtime > ABANDONED_AFTER_S  # else about to be locked
    except FileNotFoundError:  # being made, or being removed: abandoned only if it has been so for long
        with contextlib.suppress(OSError):
            return time.time() - directory.stat().st_mtime > ABANDONED_AFTER_S
        return False
    except OSError:
        return False
