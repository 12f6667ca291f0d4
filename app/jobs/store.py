"""Jobs on the disk, under NMT_JOB_DIR: a directory a job, `<id>/`, holding the upload (`input`), the job's record
(`job.json`: its state, progress, format, names, languages, model, options and times), the translated file
(`output`) once done, and `lock`, which the server process running the job holds (flock) so that servers sharing the
directory (NMT_WORKERS) never run one job twice.

Everything acknowledged survives a crash. An upload is written whole into `.upload-<id>/` (each file flushed to the
disk), which is then renamed to `<id>/` and the directory synced: a job is either all there or not at all. Every
later `job.json` (and the output) is written under a temporary name, synced, renamed over the old one and the
directory synced, so a crash mid-write leaves the previous record, never half of one. A delete renames the job's
directory out of the way (`.trash-<id>-…`, synced) before removing it. Leftovers of writes a crash cut short start
with a dot and are never read as jobs; the sweep removes them once they are an hour old.

The methods here block (file work, fsync): app/jobs/runner.py calls them on a thread, never on the event loop.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from app.durable import sync_directory, write_new

log = logging.getLogger("nmt_serve")
Status = Literal["queued", "running", "done", "failed"]
ACTIVE = ("queued", "running")
ID = re.compile(r"^[0-9a-f]{32}$")
RECORD, INPUT, OUTPUT, LOCK = "job.json", "input", "output", "lock"
STALE_S = 3600  # a dot-file this old is a crash's leftover


class JobError(Exception):
    """A job request that cannot be done: its HTTP status, a stable kind, and what was wrong."""

    status, kind = 422, "validation_error"


class UnknownJob(JobError):
    status, kind = 404, "not_found"


class JobNotDone(JobError):
    """The job has no translated file (yet): a 409."""

    status, kind = 409, "not_done"

    def __init__(self, message: str, job: Job):
        super().__init__(message)
        self.job = job


class JobStoreFailed(JobError):
    """NMT_JOB_DIR cannot be written or a job's files read (not the request's fault)."""

    status, kind = 500, "storage_error"


@dataclass(frozen=True)
class Job:
    """A file translation: what `job.json` holds."""

    id: str
    status: Status
    format: str  # app.files.FORMATS' name
    filename: str  # the upload's name, without any directory
    output_name: str  # the translated file's: report.de.docx
    model: str  # the engine's name (app/models.py)
    source: str | None  # the languages as the engine reads them; None: the model's own
    target: str | None
    total: int  # segments to translate
    characters: int  # of those segments: DeepL's billed_characters
    created: float  # Unix time
    options: dict[str, Any] = field(default_factory=dict)  # glossary_ids, beam_size
    done: int = 0  # segments translated
    started: float | None = None
    finished: float | None = None  # when it became done or failed
    error: str | None = None  # why it failed
    error_type: str | None = None  # the kind of that error, as an HTTP error's `type`
    origin: str = "files"  # the API it came through: files, libretranslate or deepl
    key: str | None = None  # SHA-256 of DeepL's document_key, for jobs uploaded through DeepL's API

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Job:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


def new_id() -> str:
    """128 random bits: a job's id is also what lets a LibreTranslate client download its file."""
    return secrets.token_hex(16)


class JobStore:
    """The jobs in one directory (made when first needed)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    # ---- writing ----------------------------------------------------------------------------------------------

    def create(self, job: Job, data: bytes) -> int:
        """Store a new job and its upload, durably, and claim it: the lock's file descriptor (see claim())."""
        staging = self.directory / f".upload-{job.id}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
            write_new(staging / INPUT, data)
            write_new(staging / RECORD, _encode(job))
            fd = _lock(staging / LOCK)
            try:
                sync_directory(staging)
                os.rename(staging, self.directory / job.id)
                sync_directory(self.directory)
            except BaseException:
                os.close(fd)
                raise
        except OSError as e:
            shutil.rmtree(staging, ignore_errors=True)
            raise JobStoreFailed(f"the upload could not be stored in {self.directory} (NMT_JOB_DIR): {why(e)}") from e
        return fd

    def save(self, job: Job) -> None:
        """Replace the job's record; UnknownJob if the job was deleted meanwhile."""
        self._replace(job.id, RECORD, _encode(job))

    def write_output(self, job_id: str, data: bytes) -> None:
        self._replace(job_id, OUTPUT, data)

    def _replace(self, job_id: str, name: str, data: bytes) -> None:
        home = self._path(job_id)
        temporary = home / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            write_new(temporary, data)
            os.replace(temporary, home / name)
            sync_directory(home)
        except FileNotFoundError:
            raise UnknownJob(f"there is no job {job_id}: it was deleted") from None
        except OSError as e:
            with suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise JobStoreFailed(f"the job {job_id} could not be written to {self.directory}: {why(e)}") from e

    def delete(self, job_id: str) -> None:
        home = self._path(job_id)
        trash = self.directory / f".trash-{job_id}-{secrets.token_hex(4)}"
        try:
            os.rename(home, trash)
        except FileNotFoundError:
            raise UnknownJob(f"there is no job {job_id}") from None
        except OSError as e:
            raise JobStoreFailed(f"the job {job_id} could not be deleted from {self.directory}: {why(e)}") from e
        with suppress(OSError):
            sync_directory(self.directory)
        shutil.rmtree(trash, ignore_errors=True)

    # ---- reading ----------------------------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        path = self._path(job_id) / RECORD
        try:
            return Job.from_record(json.loads(path.read_bytes()))
        except FileNotFoundError:
            raise UnknownJob(f"there is no job {job_id}; jobs are kept for NMT_JOB_RETENTION_S once done") from None
        except (OSError, ValueError, TypeError) as e:
            raise JobStoreFailed(f"the job record {path} cannot be read: {e}") from e

    def input(self, job_id: str) -> bytes:
        return self._read(job_id, INPUT, "uploaded file")

    def output(self, job_id: str) -> bytes:
        return self._read(job_id, OUTPUT, "translated file")

    def _read(self, job_id: str, name: str, what: str) -> bytes:
        try:
            return (self._path(job_id) / name).read_bytes()
        except FileNotFoundError:
            if not (self._path(job_id) / RECORD).exists():
                raise UnknownJob(f"there is no job {job_id}: it was deleted") from None
            raise JobStoreFailed(f"the job {job_id}'s {what} is gone from {self.directory} (NMT_JOB_DIR)") from None
        except OSError as e:
            raise JobStoreFailed(f"the job {job_id}'s {what} cannot be read from {self.directory}: {why(e)}") from e

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.iterdir() if ID.match(p.name))

    def _path(self, job_id: str) -> Path:
        if not ID.match(job_id):
            raise UnknownJob(f"there is no job {job_id[:40]!r}: a job id is 32 hexadecimal digits")
        return self.directory / job_id

    # ---- claims, restarts and retention -------------------------------------------------------------------------

    def claim(self, job_id: str) -> int | None:
        """The job's lock, held by this process until release(): its file descriptor, or None when another process
        holds it (a sibling worker runs the job) or the job is gone."""
        try:
            return _lock(self._path(job_id) / LOCK)
        except BlockingIOError:
            return None
        except FileNotFoundError:
            return None

    @staticmethod
    def release(fd: int) -> None:
        with suppress(OSError):
            os.close(fd)

    def orphans(self) -> list[tuple[Job, int]]:
        """The jobs left queued or running by a server that stopped, each claimed by this process (and set back to
        queued: they start again from their input). A record that cannot be read is marked failed."""
        out = []
        for job_id in self.ids():
            fd = self.claim(job_id)
            if fd is None:
                continue
            try:
                job = self.get(job_id)
            except UnknownJob:
                self.release(fd)
                continue
            except JobStoreFailed as e:
                self._unreadable(job_id, str(e))
                self.release(fd)
                continue
            if not job.active:
                self.release(fd)
                continue
            job = replace(job, status="queued", done=0, started=None)
            try:
                self.save(job)
            except JobError:
                self.release(fd)
                continue
            out.append((job, fd))
        return sorted(out, key=lambda pair: pair[0].created)

    def _unreadable(self, job_id: str, reason: str) -> None:
        now = time.time()
        job = Job(
            job_id, "failed", "unknown", "unknown", "unknown", "unknown", None, None, 0, 0, now, finished=now,
            error=f"the job's record could not be read, so it cannot be run again: {reason}", error_type="storage_error",
        )  # fmt: skip
        with suppress(JobError):
            self.save(job)

    def sweep(self, now: float, retention_s: float) -> list[str]:
        """Delete the jobs finished more than `retention_s` before `now`, and crash leftovers an hour old; the ids of
        the jobs deleted."""
        if not self.directory.is_dir():
            return []
        gone = []
        for path in self.directory.iterdir():
            if path.name.startswith("."):
                with suppress(OSError):
                    if path.name.startswith(".trash-") or now - path.stat().st_mtime > STALE_S:
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
                continue
            if not ID.match(path.name):
                continue
            with suppress(JobError):
                job = self.get(path.name)
                if not job.active and (job.finished or job.created) + retention_s < now:
                    self.delete(job.id)
                    gone.append(job.id)
        return gone


# ---- files ---------------------------------------------------------------------------------------------------------


def _encode(job: Job) -> bytes:
    return json.dumps(job.record(), ensure_ascii=False, indent=1).encode()


def _lock(path: Path) -> int:
    """An exclusive flock on `path` (made if missing), without waiting: BlockingIOError when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BlockingIOError(e.errno, "locked") from None
        raise
    return fd


def why(e: OSError) -> str:
    return e.strerror or str(e)
