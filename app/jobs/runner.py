"""Running jobs: a few at a time (NMT_JOB_CONCURRENCY), the others queued, and all of them together with at most
NMT_JOB_SEGMENTS_IN_FLIGHT segments in the engine at once (the Share), so that interactive requests keep the rest of
the batch and of the queue. The engine's waiting line admits requests in turn (app/engine/waiting.py), and a job's
chunk is one request there, so an interactive request beside a job waits for one turn, not for the file.

A job: its upload is read again (on a thread) by its format, its segments go through the engine in chunks
(app/files/translate.py's translate_units), its progress is saved after each chunk, and the file is written back
(on a thread) and saved. A job that fails is saved as failed with the reason. On start the jobs a stopped server
left queued or running are claimed and started again from their input (app/jobs/store.py); on stop the running ones
are left as they are on the disk, for the next start."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import tempfile
import time
from collections.abc import Awaitable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from app import glossaries as g
from app.engine import EngineUnavailable, InputTooLong, OutOfMemory, QueueFull, RequestTimeout
from app.errors import error_kind
from app.files import FORMATS, Extracted, FileLimits, Unit
from app.files.translate import translate_units
from app.jobs.segments import Segments, chunks, halve, segments, weight
from app.jobs.share import Activity, Share
from app.jobs.store import Job, JobError, JobNotDone, JobStore, UnknownJob
from app.models import Models
from app.settings import Settings
from app.text import Engine
from app.text.directions import MULTILINGUAL
from app.text.limits import Decoding
from app.workers import temporary_jobs
from model.workspace import Workspace

log = logging.getLogger("nmt_serve")
RETRIES = 3  # a chunk that times out or runs out of memory this often fails its job
BACKOFF_S = (0.5, 5.0)  # the wait before a chunk is sent again (the queue was full), doubling up to the second
AHEAD = 4  # chunks of a job in flight at once (each a quarter of the share)
SWEEP_S = 600  # the retention sweep's period at most


class TooManyJobs(QueueFull):
    """NMT_JOB_MAX_QUEUED jobs are queued or running: a 429."""


class Stopping(Exception):
    """The server is stopping: the job stays queued or running on the disk, for the next start."""


class Runner:
    """The jobs of this server process: those it queued or runs, and the store they live in."""

    def __init__(self, settings: Settings, models: Models, glossaries: g.GlossaryStore, clock=time.time):
        self.settings, self.models, self.glossaries, self.clock = settings, models, glossaries, clock
        self.store = JobStore(settings.job_dir or Path(tempfile.gettempdir()))  # without NMT_JOB_DIR: start() makes one
        self.limits = FileLimits(max_bytes=settings.file_max_bytes)
        self.activity = Activity()  # translation requests, which the jobs give way to (the Interactive middleware)
        # with front-ends, each runs the jobs uploaded to it: the one engine's share is theirs together, split evenly
        each = settings.frontends if settings.engine_address and settings.frontends else 1
        self.share = Share(max(1, settings.job_segments_in_flight // each), self.activity)
        self.translate = translate_units  # the engine call for a chunk (a test may wrap it)
        self.local: dict[str, Job] = {}  # the jobs this process queued or runs, as last saved
        self._locks: dict[str, int] = {}
        self._running: dict[str, asyncio.Task] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._temporary: Workspace | None = None
        self._ready: Awaitable | None = None
        self.stopping = False

    # ---- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self, ready: Awaitable) -> None:
        """Resume the jobs a stopped server left, start the workers, and sweep now and then; jobs run once `ready`
        (the models' loading) is done."""
        if self.settings.job_dir is None:  # jobs do not survive a restart: a directory of this server's own
            self._temporary = await asyncio.to_thread(temporary_jobs)
            self.store = JobStore(self._temporary.path)
        self._ready = ready
        self._queue = asyncio.Queue()
        for job, fd in await asyncio.to_thread(self.store.orphans):
            log.info("job %s (%s) was left unfinished by a stopped server: starting it again", job.id, job.filename)
            self._enqueue(job, fd)
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self.settings.job_concurrency)]
        self._tasks.append(asyncio.create_task(self._maintain()))

    async def stop(self) -> None:
        """Stop the workers; running jobs stay `running` on the disk (the next start runs them again)."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        for fd in self._locks.values():
            self.store.release(fd)
        self._locks.clear()
        if self._temporary is not None:
            await asyncio.to_thread(self._temporary.remove)

    # ---- the API's side ------------------------------------------------------------------------------------------

    async def submit(self, job: Job, data: bytes, key: str | None = None) -> Job:
        """Store a new job (durably) and queue it; TooManyJobs (429) when NMT_JOB_MAX_QUEUED are queued or running."""
        if len(self.local) >= self.settings.job_max_queued:
            raise TooManyJobs(
                f"the server has {len(self.local)} files queued or translating; the limit is "
                f"{self.settings.job_max_queued} (NMT_JOB_MAX_QUEUED). Retry once one is done"
            )
        if key is not None:
            job = replace(job, key=digest(key))
        fd = await asyncio.to_thread(self.store.create, job, data)
        self._enqueue(job, fd)
        return job

    async def get(self, job_id: str) -> Job:
        """The job as last saved (UnknownJob, a 404, when there is none)."""
        job_id = job_id.lower()
        return self.local.get(job_id) or await asyncio.to_thread(self.store.get, job_id)

    async def output(self, job_id: str) -> tuple[Job, bytes]:
        """A done job and its translated file."""
        job = await self.get(job_id)
        if job.status != "done":
            progress = f"it is {job.status} ({job.done} of {job.total})"
            why = f"it failed: {job.error}" if job.status == "failed" else progress
            raise JobNotDone(f"the job {job.id} has no translated file: {why}", job)
        return job, await asyncio.to_thread(self.store.output, job.id)

    async def delete(self, job_id: str) -> None:
        """Delete a job and its files, stopping it first if it runs here."""
        job_id = job_id.lower()
        if task := self._running.get(job_id):
            task.cancel()
            with suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        await asyncio.to_thread(self.store.delete, job_id)
        self._forget(job_id)

    async def changed(self, job_id: str, timeout: float) -> None:
        """Wait until this process saves the job again, or `timeout` seconds (it may run in a sibling worker)."""
        event = self._changed.setdefault(job_id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:  # nothing saved here: no event kept for a job another process runs, or none runs
            if self._changed.get(job_id) is event:
                del self._changed[job_id]

    async def finished(self, job_id: str) -> Job:
        """Wait until the job is done or failed."""
        while (job := await self.get(job_id)).active:
            await self.changed(job_id, 1.0)
        return job

    def matches(self, job: Job, key: str) -> bool:
        return job.key is not None and hmac.compare_digest(job.key.encode(), digest(key).encode())

    # ---- the workers ----------------------------------------------------------------------------------------------

    def _enqueue(self, job: Job, fd: int) -> None:
        self.local[job.id], self._locks[job.id] = job, fd
        self._queue.put_nowait(job.id)

    def _forget(self, job_id: str) -> None:
        self.local.pop(job_id, None)
        if (fd := self._locks.pop(job_id, None)) is not None:
            self.store.release(fd)
        self._notify(job_id)

    def _notify(self, job_id: str) -> None:
        if event := self._changed.pop(job_id, None):
            event.set()

    async def _work(self) -> None:
        while True:
            job_id = await self._queue.get()
            if job_id not in self.local:  # deleted while queued
                continue
            task = self._running[job_id] = asyncio.create_task(self._run(self.local[job_id]))
            try:
                await task
            except asyncio.CancelledError:
                if self.stopping or asyncio.current_task().cancelling():
                    raise
            finally:
                self._running.pop(job_id, None)
                if not self.stopping:
                    self._forget(job_id)

    async def _run(self, job: Job) -> None:
        """The job translated, saved done or failed; run again from its start where a front-end's engine process was
        gone or silent meanwhile (the server then stops, leaving it for the next one, or the engine answers again)."""
        while (why := await self._attempt(job)) is not None:
            log.warning("file job %s waits for the engine process to answer again: %s", job.id, why)
            while self.models.unavailable() and not self.stopping:
                await asyncio.sleep(1.0)
            if self.stopping:
                return

    async def _attempt(self, job: Job) -> str | None:
        """One run of the job; why it could not reach the engine process where it should run again, else None."""
        try:
            await asyncio.shield(self._ready)
            engine = self.models.pick(job.model)
            decoding = await self._decoding(job)
            job = await self._save(replace(job, status="running", started=self.clock(), done=0))
            data = await asyncio.to_thread(self.store.input, job.id)
            extracted, split = await asyncio.to_thread(self._read, job, engine, data)
            if len(split.units) != job.total:
                job = await self._save(replace(job, total=len(split.units)))
            job, translations = await self._translate(job, engine, split.units, decoding)
            written = await asyncio.to_thread(lambda: extracted.write(split.rejoin(translations)))
            await asyncio.to_thread(self.store.write_output, job.id, written)
            await self._save(replace(job, status="done", finished=self.clock()))
        except (Stopping, UnknownJob):  # stopping, or deleted meanwhile
            return
        except EngineUnavailable as e:
            if self.stopping or self.models.state(job.model) == "stopped":
                return None
            if self.models.unavailable():  # not the job's fault: left as it is until the engine answers
                return str(e)
            await self._fail(job, e)
        except Exception as e:  # noqa: BLE001 - a job that fails is saved as failed, with the reason, never lost
            await self._fail(job, e)
        return None

    async def _translate(
        self, job: Job, engine: Engine, units: list[Unit], decoding: Decoding
    ) -> tuple[Job, list[str]]:
        """The job as last saved, and the units' translations: chunks of a few, AHEAD of them in flight (the share bounds all jobs' together),
        so that the job keeps its share of the batch full while each chunk's longest paragraph finishes; the
        progress is saved as each chunk comes back."""
        size = max(1, min(engine.limits.max_batch_texts, self.share.cap) // AHEAD)
        parts = list(chunks(units, size, engine.max_request_chars))
        out: list[list[str]] = [[] for _ in parts]
        todo, running, done = iter(range(len(parts))), set(), 0

        async def one(i: int) -> int:
            out[i] = await self._chunk(engine, parts[i], decoding)
            return len(parts[i])

        try:
            while True:
                while len(running) < AHEAD and (i := next(todo, None)) is not None:
                    running.add(asyncio.create_task(one(i)))
                if not running:
                    return job, [t for part in out for t in part]
                finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                done += sum(t.result() for t in finished)  # a chunk's error fails the job
                job = await self._save(replace(job, done=done))
        finally:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _read(self, job: Job, engine: Engine, data: bytes) -> tuple[Extracted, Segments]:
        """On a thread: the upload read by its format again (told the language it is translated into, which PO and
        XLIFF files name), and its segments."""
        into = job.target or engine.languages.get("target")
        language = None if into in ("unknown", MULTILINGUAL) else into
        extracted = FORMATS[job.format].read(data, self.limits, language=language)
        return extracted, segments(extracted.units, engine.max_request_chars)

    async def _decoding(self, job: Job) -> Decoding:
        stored = []
        for glossary_id in job.options.get("glossary_ids", []):
            try:
                stored.append((await self.glossaries.get(glossary_id)).entries)
            except g.UnknownGlossary:
                why = f"the glossary {glossary_id} was deleted before the file was translated"
                raise g.UnknownGlossary(why) from None
        beam = job.options.get("beam_size", 1)
        return Decoding(beam_size=beam, glossary=g.terms(*stored), source=job.source, target=job.target)

    async def _chunk(self, engine: Engine, chunk: list[Unit], decoding: Decoding, attempt: int = 0) -> list[str]:
        """A chunk's translations, sent again while the queue is full or after a timeout (RETRIES times), and split
        in two when it has too many sentences for one request."""
        try:
            async with self.share.take(weight(chunk)):
                return await self.translate(engine, chunk, decoding)
        except InputTooLong:  # more sentences than a request may have (none is too long: long ones are cut)
            if len(chunk) > 1:
                half = len(chunk) // 2
                first, second = chunk[:half], chunk[half:]
                return [*await self._chunk(engine, first, decoding), *await self._chunk(engine, second, decoding)]
            if (halves := halve(chunk[0])) is None:
                raise
            first, between, second = halves
            (a,), (b,) = await self._chunk(engine, [first], decoding), await self._chunk(engine, [second], decoding)
            return [a + between + b]
        except (QueueFull, RequestTimeout, OutOfMemory) as e:
            if not isinstance(e, QueueFull) and attempt >= RETRIES:
                raise
            await asyncio.sleep(min(BACKOFF_S[0] * 2**attempt, BACKOFF_S[1]))
            if self.stopping:
                raise Stopping from None
            return await self._chunk(engine, chunk, decoding, attempt + 1)

    async def _save(self, job: Job) -> Job:
        if self.stopping:
            raise Stopping
        await asyncio.to_thread(self.store.save, job)
        self.local[job.id] = job
        self._notify(job.id)
        return job

    async def _fail(self, job: Job, e: Exception) -> None:
        status, kind = (e.status, e.kind) if isinstance(e, (g.GlossaryError, JobError)) else error_kind(e)
        if status >= 500:
            log.error("the job %s (%s) failed: %s", job.id, job.filename, e, exc_info=kind == "internal_error")
        reason = str(e) if kind != "internal_error" else f"internal server error ({type(e).__name__}: {e})"
        with suppress(JobError, Stopping):
            await self._save(replace(job, status="failed", finished=self.clock(), error=reason, error_type=kind))

    async def _maintain(self) -> None:
        """Sweep the finished jobs past NMT_JOB_RETENTION_S, now and every so often."""
        retention = self.settings.job_retention_s
        while True:
            await self.sweep()
            await asyncio.sleep(min(SWEEP_S, max(0.5, retention / 4)))

    async def sweep(self, now: float | None = None) -> list[str]:
        gone = await asyncio.to_thread(
            self.store.sweep, self.clock() if now is None else now, self.settings.job_retention_s
        )
        for job_id in gone:
            self._notify(job_id)
        return gone


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
