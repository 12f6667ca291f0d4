"""An uploaded file, read before its job is acknowledged: its name made safe, its format (named, or told by its
extension, among the formats whose module this server has), its units read by the format on a thread (so a malformed
file is a 422 at once, a file over a limit a 413), and the job that will translate it with a chosen engine."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import time
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath, PureWindowsPath

from app.engine import InvalidRequest
from app.files import FORMATS, FileLimits, FileTooLarge, Format, Unit, detect
from app.jobs.segments import Segments, segments
from app.jobs.store import Job, new_id
from app.text import Engine
from app.text.directions import MULTILINGUAL
from app.text.limits import Decoding

UNSAFE = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\"\\/:*?<>|]")
MAX_NAME = 200  # characters of a file name kept
SAMPLE_CHARS = 2000  # of a file's text, to detect its language


@cache
def _has(module: str) -> bool:
    return importlib.util.find_spec(f"app.files.{module}") is not None


def available() -> dict[str, Format]:
    """The formats whose module is in this server (app/files), by name."""
    return {name: f for name, f in FORMATS.items() if _has(f.module)}


def extensions() -> list[str]:
    return [e for f in available().values() for e in f.extensions]


def file_format(filename: str, name: str | None = None) -> Format:
    """The format `name` says, else the file name's extension; a 422 listing the formats this server reads."""
    fmt = detect(filename, name or None)
    if fmt.name not in available():
        raise InvalidRequest(
            f"{fmt.name} files cannot be translated by this server; the formats are {', '.join(available())} "
            f"(extensions {', '.join(extensions())})"
        )
    return fmt


def safe_name(filename: str | None) -> str:
    """The upload's own name, without directories, control characters or characters file systems refuse."""
    name = PureWindowsPath(PurePath(filename or "").name).name  # `a/b.txt` and `a\\b.txt`: b.txt
    name = UNSAFE.sub("_", name).strip(" .") or "file"
    if len(name) > MAX_NAME:
        suffix = PurePath(name).suffix[:16]
        name = name[: MAX_NAME - len(suffix)] + suffix
    return name


def translated_name(filename: str, fmt: Format, target: str | None) -> str:
    """`report.docx` into German: `report.de.docx`; a name without the format's extension gets it."""
    path = PurePath(filename)
    suffix = path.suffix if path.suffix.lower() in fmt.extensions else ""
    stem = path.name[: len(path.name) - len(suffix)] if suffix else path.name
    code = re.sub(r"[^A-Za-z0-9_-]", "", target or "") or "translated"
    return f"{stem}.{code}{suffix or fmt.extensions[0]}"


@dataclass(frozen=True)
class Upload:
    """A file read by its format."""

    filename: str  # safe_name()'s
    format: Format
    data: bytes
    units: list[Unit]  # the format's
    segments: Segments  # what the engine will translate (app/jobs/segments.py)

    def sample(self) -> str:
        """The start of the file's text, to detect its language."""
        out, size = [], 0
        for unit in self.units:
            if size >= SAMPLE_CHARS:
                break
            out.append(unit.text[:SAMPLE_CHARS])
            size += len(out[-1])
        return "\n".join(out)


async def read(
    data: bytes, filename: str | None, format_name: str | None, limits: FileLimits, max_request_chars: int
) -> Upload:
    """The upload read by its format and cut into segments (on a thread): FileError (422) or FileTooLarge (413) when
    it cannot be."""
    name = safe_name(filename)
    fmt = file_format(name if filename else "", format_name)
    if len(data) > limits.max_bytes:
        raise FileTooLarge(f"the file has {len(data)} bytes; the limit is {limits.max_bytes} (NMT_FILE_MAX_BYTES)")

    def parse() -> Upload:
        units = fmt.read(data, limits).units
        return Upload(name, fmt, data, units, segments(units, max_request_chars))

    return await asyncio.to_thread(parse)


def job_for(
    upload: Upload, engine: Engine, source: str | None, target: str | None, glossary_ids: list[str],
    beam_size: int = 1, origin: str = "files",
) -> Job:  # fmt: skip
    """The queued job that translates `upload` with `engine`; a 413 for a segment too long for one request, a 422
    for a beam the engine does not decode."""
    engine.limits.decoding(Decoding(beam_size=beam_size))  # 422 for a beam out of range
    split = upload.segments
    into = target or engine.languages.get("target")
    into = None if into in ("unknown", MULTILINGUAL) else into
    return Job(
        new_id(), "queued", upload.format.name, upload.filename, translated_name(upload.filename, upload.format, into),
        engine.name, source, target, len(split.units), sum(len(u.text) for u in split.units if u.text.strip()),
        time.time(), options={"glossary_ids": glossary_ids, "beam_size": beam_size}, origin=origin,
    )  # fmt: skip
