"""Files to translate, as jobs (app/jobs): upload one, follow its progress (JSON or server-sent events), download the
translated file, delete it. Behind NMT_API_KEY as /translate is."""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from app import schemas as s
from app.calls import detect_source
from app.deps import ModelsDep
from app.engine import InvalidRequest
from app.errors import ERRORS
from app.files import FORMATS
from app.glossaries import Glossary, fits
from app.jobs import Job, JobError, Runner, UnknownJob
from app.jobs.intake import Upload, job_for, read
from app.models import Models
from app.text import Engine
from app.text.limits import Decoding

POLL_S = 1.0  # an events stream reads the job at least this often (another worker may run it)
KEEPALIVE_S = 15.0  # a comment line when nothing changed for this long, so that proxies keep the stream open
NOT_FOUND = {404: {"model": s.ErrorResponse, "description": "no job has this id (or it expired)"}}
router = APIRouter(tags=["Files"], responses=ERRORS)


async def get_jobs(request: Request) -> Runner:
    return request.app.state.jobs


JobsDep = Annotated[Runner, Depends(get_jobs)]


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def job_out(job: Job, retention_s: float) -> s.JobOut:
    """A job as the API shows it."""
    return s.JobOut(
        id=job.id, status=job.status, progress=s.ProgressOut(done=job.done, total=job.total), filename=job.filename,
        output_filename=job.output_name, format=job.format, model=job.model, source=job.source, target=job.target,
        created=iso(job.created), finished=iso(job.finished),
        expires=iso(job.finished + retention_s) if job.finished is not None else None, error=job.error,
        error_type=job.error_type, download=f"/files/{job.id}/download" if job.status == "done" else None,
    )  # fmt: skip


def translated_file(job: Job, data: bytes, background: BackgroundTask | None = None) -> Response:
    """A job's translated file with its media type and name. A text format's charset is said where the file is
    UTF-8; one in another encoding (a Latin-1 PO file, a UTF-16 page: kept as they came) names none, for the reader
    to take it from the file (its byte-order mark, its header or <meta>), not to be told UTF-8 (Starlette's default)."""
    media = FORMATS[job.format].media_type
    if media.startswith("text/"):
        media += "; charset=utf-8" if utf8(data) else ""
    headers = {"Content-Type": media, "Content-Disposition": disposition(job.output_name)}
    return Response(data, headers=headers, background=background)


def utf8(data: bytes) -> bool:
    """Whether the bytes are UTF-8 (UTF-16's byte-order marks are not)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def disposition(filename: str) -> str:
    """Content-Disposition for a download: the name as ASCII for old clients, and as UTF-8 (RFC 6266) beside it,
    without the characters that change how a name shows (U+202E would show "report\u202etxt.exe" as "reportexe.txt")
    or are none (controls)."""
    filename = "".join("_" if unicodedata.category(ch) in ("Cf", "Cc") else ch for ch in filename)
    fallback = filename.encode("ascii", "replace").decode().replace("?", "_").replace('"', "_")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


async def choose(
    models: Models, upload: Upload, stored: Glossary | None, model: str | None, source: str | None,
    target: str | None,
) -> tuple[Engine, str | None]:  # fmt: skip
    """The engine for a file as /translate picks one for a text (by `model`, by `source` and `target`, by the stored
    glossary's languages, else the default), and the source language: a many-to-many model's detected from the
    file's text when left out or "auto"."""
    if stored is not None and model is None and not (source or target):
        engine = models.pick(None, stored.source_lang, stored.target_lang)
    else:
        engine = models.pick(model, source, target)
    if stored is not None:
        source = stored.source_lang if source in (None, "auto") else source
        target = target or stored.target_lang
    if engine.codes and source in (None, "auto"):
        source = await detect_source(engine, [upload.sample()])
    engine.directions.resolve(Decoding(source=source, target=target))  # a 422 now, not a job that fails later
    if stored is not None and not fits(stored, engine, source, target):
        raise InvalidRequest(
            f"the glossary {stored.glossary_id} is {stored.source_lang}->{stored.target_lang}, which the model "
            f"{engine.name!r} does not translate this file between; use a glossary of the file's languages"
        )
    return engine, None if source == "auto" else source


def field(value: str | None) -> str | None:
    """A form field; an empty one (as a web form sends an input left blank) is no value."""
    return value.strip() or None if value is not None else None


@router.post(
    "/files", status_code=202, response_model=s.JobOut,
    responses={202: {"description": "queued; `Location` is the job's URL", "headers": {"Location": {
        "description": "the job's URL", "schema": {"type": "string"}}}}, **NOT_FOUND},
)  # fmt: skip
async def upload_file(
    request: Request,
    jobs: JobsDep,
    models: ModelsDep,
    file: Annotated[UploadFile, File(description="the file: its name's extension tells its format, unless `format`")],
    target: Annotated[str | None, Form(description="the language to translate into, as /translate's `target`")] = None,
    source: Annotated[str | None, Form(description='the language of the file, or "auto"; default: the model')] = None,
    model: Annotated[
        str | None, Form(description="the model (GET /models); default by languages, else the first")
    ] = None,
    format: Annotated[str | None, Form(description="the file's format, when its name does not tell it")] = None,
    glossary_id: Annotated[str | None, Form(description="a stored glossary whose terms the translation keeps")] = None,
    beam_size: Annotated[int | None, Form(description="beam search of this width (1 to 8); default greedy")] = None,
) -> JSONResponse:
    """Upload a file to translate: 202 with the job (queued) once the file is read and stored; poll `GET
    /files/{id}` or follow `GET /files/{id}/events`, then download it."""
    source, target, model, format, glossary_id = map(field, (source, target, model, format, glossary_id))
    source = s.auto(source) if source else None  # "AUTO" too, as the JSON routes read it
    data = await file.read()
    upload = await read(data, file.filename, format, jobs.limits, jobs.settings.max_request_chars)
    stored = await request.app.state.glossaries.get(glossary_id) if glossary_id else None
    engine, source = await choose(models, upload, stored, model, source, target)
    beam = 1 if beam_size is None else beam_size  # 0 is out of range (422), not greedy
    job = job_for(upload, engine, source, target, [glossary_id] if glossary_id else [], beam)
    job = await jobs.submit(job, data)
    out = job_out(job, jobs.settings.job_retention_s)
    return JSONResponse(out.model_dump(), status_code=202, headers={"Location": f"/files/{job.id}"})


@router.get("/files/{job_id}", response_model=s.JobOut, responses=NOT_FOUND)
async def file_status(job_id: str, jobs: JobsDep) -> s.JobOut:
    """A job: its status (queued, running, done, failed), progress, names and times, and why it failed."""
    return job_out(await own(jobs, job_id), jobs.settings.job_retention_s)


EVENTS_EXAMPLE = (
    'data: {"id": "5f0c…", "status": "running", "progress": {"done": 8, "total": 20}, …}\n\n'
    'data: {"id": "5f0c…", "status": "done", "progress": {"done": 20, "total": 20}, …}\n\n'
)


@router.get(
    "/files/{job_id}/events", response_class=StreamingResponse,
    responses={200: {"description": "server-sent events: the job (as `GET /files/{id}`) each time it changes, the "
                     "last one done or failed", "content": {"text/event-stream": {"example": EVENTS_EXAMPLE}}},
               **NOT_FOUND},
)  # fmt: skip
async def file_events(job_id: str, jobs: JobsDep) -> StreamingResponse:
    """The job's progress as server-sent events, until it is done or failed."""
    job = await own(jobs, job_id)  # a 404 before the stream starts
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(progress(jobs, job), media_type="text/event-stream", headers=headers)


async def own(jobs: Runner, job_id: str) -> Job:
    """A job made through /files. One made through LibreTranslate's or DeepL's API is that API's to show (DeepL's only
    with its document key), so here, as there, it is not found."""
    job = await jobs.get(job_id)
    if job.origin != "files":
        raise UnknownJob(f"there is no job {job_id}")
    return job


async def progress(jobs: Runner, job: Job) -> AsyncIterator[bytes]:
    """`data: {job}` whenever the job changes; the stream ends after the job is done or failed (or deleted: an error
    event)."""
    last, quiet = None, time.monotonic()
    while True:
        out = job_out(job, jobs.settings.job_retention_s).model_dump_json()
        if out != last:
            yield b"data: " + out.encode() + b"\n\n"
            last, quiet = out, time.monotonic()
        elif time.monotonic() - quiet >= KEEPALIVE_S:
            yield b": keep-alive\n\n"
            quiet = time.monotonic()
        if not job.active:
            return
        await jobs.changed(job.id, POLL_S)
        try:
            job = await jobs.get(job.id)
        except JobError as e:
            message = "the job was deleted" if isinstance(e, UnknownJob) else str(e)
            yield b"data: " + json.dumps({"error": message, "type": e.kind}).encode() + b"\n\n"
            return


@router.get(
    "/files/{job_id}/download", response_class=Response,
    responses={200: {"description": "the translated file, with its media type and name (Content-Disposition)",
                     "content": {"application/octet-stream": {}}},
               409: {"model": s.ErrorResponse, "description": "the job is not done (or failed)"}, **NOT_FOUND},
)  # fmt: skip
async def download_file(job_id: str, jobs: JobsDep) -> Response:
    """The translated file, once the job is done: 409 before."""
    await own(jobs, job_id)
    return translated_file(*await jobs.output(job_id))


@router.delete("/files/{job_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
async def delete_file(job_id: str, jobs: JobsDep) -> Response:
    """Delete a job and its files; a job still translating is stopped."""
    await own(jobs, job_id)
    await jobs.delete(job_id)
    return Response(status_code=204)
