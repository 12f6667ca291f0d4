"""Jobs beyond one server's life (app/jobs): an upload is on the disk before it is acknowledged, a crash mid-write keeps
the last record, jobs a stopped server left are finished by the next one (or failed with the reason), finished jobs
expire, one job never runs in two processes, and the limits on uploads and on queued jobs hold."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from app.engine import EngineFailure
from app.files import Unit
from app.jobs.segments import chunks, halve, segments
from app.jobs.share import QUIET_S, Activity, Share, slots_for
from app.jobs.store import Job, JobStore, JobStoreFailed, new_id
from app.settings import Settings
from model.checkpoint import read_metadata
from tests.app.conftest import MODES, serve_in
from tests.app.files_api import PARAGRAPHS, finished, ours, text_file, upload
from tests.app.helpers import until
from tests.app.live import live_server

pytestmark = pytest.mark.anyio


def settings(checkpoint, job_dir: Path | None, **more) -> Settings:
    return Settings(model_dir=checkpoint, max_new_tokens=40, compile=False, job_dir=job_dir, **more)


def record(job_dir: Path, job_id: str) -> dict:
    return json.loads((job_dir / job_id / "job.json").read_text())


@pytest.mark.parametrize("mode", MODES)
async def test_an_upload_is_on_the_disk_before_its_id_is_returned(mode, trained_checkpoint, tmp_path, monkeypatch):
    synced, fsync = [], os.fsync

    def recording(fd):
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    async with serve_in(mode, settings(trained_checkpoint, tmp_path)) as (_, client):
        monkeypatch.setattr(os, "fsync", recording)
        r = await client.post("/files", files={"file": ("a.txt", b"A dog runs.")})
        monkeypatch.undo()
        assert r.status_code == 202
        staging = tmp_path / f".upload-{r.json()['id']}"
        assert synced[:4] == [staging / "input", staging / "job.json", staging, tmp_path], synced
        assert (tmp_path / r.json()["id"] / "input").read_bytes() == b"A dog runs."


async def test_a_crash_mid_write_of_a_record_keeps_the_last_one_acknowledged(tmp_path, monkeypatch):
    store = JobStore(tmp_path)
    job = Job(new_id(), "queued", "txt", "a.txt", "a.de.txt", "m", None, "de", 3, 12, 1.0)
    store.release(store.create(job, b"A. B. C."))
    running = Job(**{**job.record(), "status": "running", "done": 1})
    store.save(running)

    def crash(*args):  # the power goes out after the new record is written, before it is renamed into place
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(JobStoreFailed, match="could not be written"):
        store.save(Job(**{**running.record(), "done": 2}))
    monkeypatch.undo()
    (tmp_path / job.id / ".job.json.123.half.tmp").write_bytes(b'{"id": "')  # a write cut short
    assert JobStore(tmp_path).get(job.id) == running
    (resumed, _), *others = JobStore(tmp_path).orphans()
    assert not others and resumed == Job(**{**running.record(), "status": "queued", "done": 0})


@pytest.mark.parametrize("mode", MODES)
async def test_a_job_left_running_by_a_stopped_server_is_finished_by_the_next(mode, trained_checkpoint, tmp_path):
    async with serve_in(mode, settings(trained_checkpoint, tmp_path)) as (app, client):
        never = asyncio.Event()

        async def held(engine, units, decoding):
            await never.wait()

        app.state.jobs.translate = held
        job = await upload(client, text_file(PARAGRAPHS[:4]), target="de")
        await until(lambda: app.state.jobs.local[job["id"]].status == "running")
    assert record(tmp_path, job["id"])["status"] == "running"  # as the stopped server left it
    async with serve_in(mode, settings(trained_checkpoint, tmp_path)) as (app, client):
        done = await finished(client, job["id"])
        assert done["status"] == "done" and done["progress"] == {"done": 3, "total": 3}, done
        out = (await client.get(f"/files/{job['id']}/download")).content.decode()
        expected = await ours(client, [*PARAGRAPHS[:2], f"{PARAGRAPHS[2]}\n{PARAGRAPHS[3]}"])
        assert out == "\n\n".join(expected[:-1]) + f"\r\n\r\n{expected[-1]}\n\n"


@pytest.mark.parametrize("mode", MODES)
async def test_jobs_a_new_server_cannot_run_are_failed_with_the_reason(mode, trained_checkpoint, tmp_path):
    store = JobStore(tmp_path)
    base = Job(new_id(), "queued", "txt", "a.txt", "a.de.txt", "gone-model", None, None, 1, 6, 1.0)
    unknown_model = base
    model = read_metadata(trained_checkpoint).get("name") or trained_checkpoint.name  # the engine's name
    lost_input = Job(**{**base.record(), "id": new_id(), "model": model, "status": "running"})
    for job in (unknown_model, lost_input):
        store.release(store.create(job, b"A dog."))
    (tmp_path / lost_input.id / "input").unlink()
    broken = tmp_path / new_id()
    broken.mkdir()
    (broken / "job.json").write_text("{not json")
    async with serve_in(mode, settings(trained_checkpoint, tmp_path)) as (_, client):
        reasons = {}
        for job_id in (unknown_model.id, lost_input.id, broken.name):
            job = await finished(client, job_id)
            assert job["status"] == "failed", job
            reasons[job_id] = job["error"]
        assert "there is no model 'gone-model'" in reasons[unknown_model.id]
        assert "uploaded file is gone" in reasons[lost_input.id]
        assert "record could not be read" in reasons[broken.name]


@pytest.mark.parametrize("mode", MODES)
async def test_finished_jobs_are_deleted_after_the_retention(mode, trained_checkpoint, tmp_path):
    async with serve_in(mode, settings(trained_checkpoint, tmp_path, job_retention_s=3600)) as (app, client):
        job = await upload(client, b"A dog runs.")
        done = await finished(client, job["id"])
        runner = app.state.jobs
        assert await runner.sweep(now=runner.clock() + 3000) == []  # not yet
        assert await runner.sweep(now=runner.clock() + 3601) == [job["id"]]
        assert (await client.get(f"/files/{job['id']}")).status_code == 404 and done["expires"]
        assert not (tmp_path / job["id"]).exists()
    async with serve_in(mode, settings(trained_checkpoint, tmp_path, job_retention_s=0.3)) as (app, client):
        job = await upload(client, b"A dog runs.")
        await finished(client, job["id"])
        for _ in range(100):  # the periodic sweep: every 0.5 s at this retention
            if (await client.get(f"/files/{job['id']}")).status_code == 404:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the finished job was not swept")


@pytest.mark.parametrize("mode", MODES)
async def test_without_a_job_dir_jobs_live_in_a_temporary_directory_removed_at_shutdown(mode, trained_checkpoint):
    async with serve_in(mode, settings(trained_checkpoint, None)) as (app, client):
        job = await upload(client, b"A dog runs.")
        directory = app.state.jobs.store.directory
        assert (directory / job["id"] / "input").read_bytes() == b"A dog runs."
        assert (await finished(client, job["id"]))["status"] == "done"
    assert not directory.exists()


async def test_a_killed_server_s_jobs_directory_and_uploads_are_removed_by_the_next_start(
    trained_checkpoint, tmp_path, monkeypatch, caplog
):
    """Without NMT_JOB_DIR, a server's jobs live in a directory of its own in TMPDIR, removed as it exits; a SIGKILL
    (the OOM killer) leaves it with the users' uploads in it, and the next server started there removes it."""
    with live_server(trained_checkpoint, timeout=120, NMT_COMPILE="off", TMPDIR=str(tmp_path)) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as live:
            job = await upload(live, b"A dog runs.")
        (left,) = tmp_path.glob("nmt-serve-jobs-*")
        assert (left / job["id"] / "input").read_bytes() == b"A dog runs."
        proc.kill()
        proc.wait()
    an_hour_ago = time.time() - 3600  # found by a start an hour later (a start within a minute leaves it be)
    for path in (*left.glob("owner"), left):  # the lock's file, which the kernel let go with the process
        os.utime(path, (an_hour_ago, an_hour_ago))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    async with serve_in(MODES[0], settings(trained_checkpoint, None)) as (app, client):
        mine = app.state.jobs.store.directory
        assert not left.exists() and mine.parent == tmp_path
        assert (await finished(client, (await upload(client, b"A dog runs."))["id"]))["status"] == "done"
    assert f"removed {left}: a directory a killed process had left" in caplog.text
    assert list(tmp_path.glob("nmt-serve-jobs-*")) == []  # its own, removed as it stopped


async def test_directories_the_server_cannot_write_are_said_at_start_and_each_refusal_in_the_log(
    trained_checkpoint, tmp_path, caplog
):
    """A job or glossary directory under a file (or on a read-only root): the server started without a word, and each
    upload's 500 storage_error left nothing in the log but its access line."""
    (tmp_path / "file").write_text("")
    jobs, glossaries = tmp_path / "file" / "jobs", tmp_path / "file" / "glossaries"
    async with serve_in(MODES[0], settings(trained_checkpoint, jobs, glossary_dir=glossaries)) as (_, client):
        said = caplog.text
        assert f"NMT_JOB_DIR={jobs}: {tmp_path / 'file'} is a file; file translations will be refused" in said
        assert f"NMT_GLOSSARY_DIR={glossaries}: {tmp_path / 'file'} is a file; stored glossaries" in said
        r = await client.post("/files", files={"file": ("a.txt", b"A dog runs.")})
        assert r.status_code == 500 and r.json()["type"] == "storage_error", r.text
        assert f"POST /files: {r.json()['error']}" in caplog.text
    caplog.clear()
    async with serve_in(MODES[0], settings(trained_checkpoint, tmp_path / "jobs", glossary_dir=tmp_path / "g")):
        assert "will be refused" not in caplog.text  # made where missing: nothing to say


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_engine_fails_the_job_with_its_reason(mode, trained_checkpoint, tmp_path):
    async with serve_in(mode, settings(trained_checkpoint, tmp_path)) as (app, client):

        async def failing(engine, units, decoding):
            raise EngineFailure("the model raised: injected fault")

        app.state.jobs.translate = failing
        job = await finished(client, (await upload(client, b"A dog runs."))["id"])
        assert (job["status"], job["error"], job["error_type"]) == (
            "failed", "the model raised: injected fault", "model_error",
        )  # fmt: skip
        r = await client.get(f"/files/{job['id']}/download")
        assert r.status_code == 409 and "it failed: the model raised" in r.json()["error"]


@pytest.mark.parametrize("mode", MODES)
async def test_limits_on_uploads_and_on_queued_jobs(mode, trained_checkpoint, tmp_path):
    limits = {"file_max_bytes": 1000, "job_max_queued": 1}
    async with serve_in(mode, settings(trained_checkpoint, tmp_path, **limits)) as (app, client):
        r = await client.post("/files", files={"file": ("a.txt", b"A dog. " * 200)})
        assert (r.status_code, r.json()["type"]) == (413, "input_too_long")
        assert r.json()["error"] == "the file has 1400 bytes; the limit is 1000 (NMT_FILE_MAX_BYTES)"
        huge = b"x" * (1000 + 2**20 + 1)  # past the file and a form's fields: refused by its Content-Length
        r = await client.post("/files", files={"file": ("a.txt", huge)})
        assert (r.status_code, r.json()["type"]) == (413, "body_too_large")
        assert "a file may have 1000 bytes (NMT_FILE_MAX_BYTES) and its upload's other fields 1 MB" in r.json()["error"]

        async def chunked():  # no Content-Length: counted as it arrives
            yield b"--b\r\nContent-Disposition: form-data; name=file; filename=a.txt\r\n\r\n"
            for _ in range(20):
                yield b"x" * 2**16

        headers = {"content-type": "multipart/form-data; boundary=b"}
        r = await client.post("/files", content=chunked(), headers=headers)
        assert (r.status_code, r.json()["type"]) == (413, "body_too_large"), r.text
        never = asyncio.Event()

        async def held(engine, units, decoding):
            await never.wait()

        app.state.jobs.translate = held
        await upload(client, b"A dog runs.")
        r = await client.post("/files", files={"file": ("a.txt", b"A cat.")})
        assert (r.status_code, r.json()["type"], r.headers["retry-after"]) == (429, "queue_full", "1")
        assert "the limit is 1 (NMT_JOB_MAX_QUEUED)" in r.json()["error"]


async def test_a_job_is_claimed_by_one_process_at_a_time(tmp_path):
    store = JobStore(tmp_path)
    job = Job(new_id(), "running", "txt", "a.txt", "a.de.txt", "m", None, None, 1, 6, 1.0)
    fd = store.create(job, b"A dog.")
    assert JobStore(tmp_path).claim(job.id) is None and JobStore(tmp_path).orphans() == []
    store.release(fd)
    (claimed, _), *_ = JobStore(tmp_path).orphans()
    assert claimed.id == job.id and store.claim(job.id) is None


async def test_the_share_admits_units_first_come_first_up_to_its_cap():
    share, order = Share(4), []

    async def take(name: str, n: int, hold: asyncio.Event):
        async with share.take(n):
            order.append(name)
            await hold.wait()

    holds = {name: asyncio.Event() for name in "abcd"}
    tasks = [asyncio.create_task(take(name, n, holds[name])) for name, n in zip("abcd", (3, 2, 1, 1))]
    await until(lambda: order == ["a"])
    assert share.in_flight == 3  # b (2) does not fit, and c waits behind it though it would
    tasks[1].cancel()  # b gives up its place
    await until(lambda: order == ["a", "c"])
    holds["a"].set()
    await until(lambda: order == ["a", "c", "d"])
    for name in "cd":
        holds[name].set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert share.in_flight == 0 and share.peak == 4


def test_long_plain_units_are_cut_at_line_breaks_and_put_back_together():
    text = "A dog runs.\nA cat sleeps.\r\nTwo men sit.\n\nA boy."
    split = segments([Unit("Hi."), Unit(text), Unit("<b>x</b>", markup=True)], limit=26)
    assert [u.text for u in split.units] == ["Hi.", "A dog runs.\nA cat sleeps.", "Two men sit.\n\nA boy.", "<b>x</b>"]
    assert split.rejoin([u.text.upper() for u in split.units]) == ["HI.", text.upper(), "<B>X</B>"]
    with pytest.raises(Exception, match="segment 1 of the file has 27 characters with its formatting"):
        segments([Unit("<b>" + "x" * 20 + "</b>", markup=True)], limit=26)
    assert halve(Unit("A dog.\nA cat.\nA man.")) == (Unit("A dog.\nA cat."), "\n", Unit("A man."))
    assert halve(Unit("A dog. A cat. A man. A boy.")) == (Unit("A dog. A cat."), " ", Unit("A man. A boy."))
    assert halve(Unit("a.b.c.d.", placeholders=True)) == (
        Unit("a.b.", placeholders=True),
        "",
        Unit("c.d.", placeholders=True),
    )
    assert halve(Unit("a")) is None
    # markup: cut only outside every element, so that each half stands alone; at a <br> too, kept between them
    assert halve(Unit("<b>A.</b> B.", markup=True)) == (Unit("<b>A.</b>", True), " ", Unit("B.", True))
    assert halve(Unit('A. <span id="c0">B. C. D.</span> E.', markup=True)) == (
        Unit("A.", True), " ", Unit('<span id="c0">B. C. D.</span> E.', True),
    )  # fmt: skip
    breaks = Unit("A.<br>B.<br>C.<br/>D.", markup=True)
    assert halve(breaks) == (Unit("A.<br>B.", True), "<br>", Unit("C.<br/>D.", True))
    assert halve(Unit('<a title="x. y. z">A. B.</a>', markup=True)) is None  # nowhere outside an element
    assert halve(Unit("<i>A. B.</i><i>C. D.</i>", markup=True)) is None  # no space or break between them
    units = [Unit(t) for t in ("a", " ", "b", "c", "", "d", "e" * 10)]
    assert [[u.text for u in c] for c in chunks(units, size=2, chars=8)] == [
        ["a", " ", "b"],
        ["c", "", "d"],
        ["e" * 10],
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_files_need_the_api_key_as_translate_does_and_pages_of_other_origins_read_the_answer(
    mode, trained_checkpoint
):
    keyed = settings(trained_checkpoint, None, api_key="s3cret")
    async with serve_in(mode, keyed) as (_, client):
        r = await client.post("/files", files={"file": ("a.txt", b"A dog runs.")})
        assert (r.status_code, r.json()["type"]) == (401, "unauthorized")
        assert (await client.get(f"/files/{'0' * 32}")).status_code == 401
        headers = {"Authorization": "Bearer s3cret", "Origin": "https://app.example.com"}
        r = await client.post("/files", files={"file": ("a.txt", b"A dog runs.")}, headers=headers)
        assert r.status_code == 202 and r.headers["access-control-allow-origin"] == "*"
        assert {"location", "content-disposition"} <= set(
            r.headers["access-control-expose-headers"].lower().split(", ")
        )


async def test_the_share_gives_way_while_people_are_translating():
    now = [100.0]
    activity = Activity(clock=lambda: now[0])
    share = Share(8, activity)
    assert (share.now, share.busy_cap) == (8, 2)
    activity.in_flight = 1
    assert share.now == 2
    activity.in_flight, activity.last = 0, now[0]
    now[0] += QUIET_S / 2
    assert share.now == 2  # a client's next request is on its way
    now[0] += QUIET_S
    assert share.now == 8
    activity.in_flight = 1
    async with share.take(3):  # larger than the busy cap: it goes when nothing else is in flight
        assert share.in_flight == 3
        waiting = asyncio.create_task(share.take(1).__aenter__())
        await asyncio.sleep(0)
        assert not waiting.done()  # 3 + 1 is over the busy cap of 2
        activity.in_flight = 0
        now[0] += 2 * QUIET_S
    await waiting
    assert share.in_flight == 1


def test_front_ends_jobs_give_way_to_a_request_that_came_to_another_front_end():
    """NMT_FRONTENDS: each front-end runs the jobs uploaded to it, all on one engine; a front-end's jobs went on at
    their full share while another front-end's clients were translating."""
    slots, now = slots_for(multiprocessing.get_context("spawn"), 2), [100.0]
    first, second = Activity(clock=lambda: now[0]), Activity(clock=lambda: now[0])
    first.share_with(slots, 0)
    second.share_with(slots, 1)
    jobs = Share(8, first)
    assert jobs.now == 8
    second.in_flight = 1  # a request to the other front-end
    assert jobs.now == 2 and first.in_flight == 0
    second.in_flight, second.last = 0, now[0]
    now[0] += QUIET_S / 2
    assert jobs.now == 2
    now[0] += QUIET_S
    assert jobs.now == 8


async def test_waiters_cancelled_together_leave_nothing_taken():
    """A job deleted while its chunks wait: each waiter is cancelled, some as the one in flight gives its place back;
    none of their places stays taken (a leak would hold every later job back)."""
    share = Share(2)
    release = asyncio.Event()

    async def take(n: int, hold: asyncio.Event | None = None):
        async with share.take(n):
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(take(2, release))
    await until(lambda: share.in_flight == 2)
    waiters = [asyncio.create_task(take(1)) for _ in range(4)]
    await asyncio.sleep(0)
    release.set()  # the first gives its places back and wakes waiters in the same turn they are cancelled
    for w in waiters:
        w.cancel()
    await asyncio.gather(first, *waiters, return_exceptions=True)
    assert share.in_flight == 0 and not share._waiting
    async with share.take(2):  # the full share is there for the next job
        assert share.in_flight == 2


@pytest.mark.parametrize(("frontends", "cap"), [(0, 8), (2, 4), (3, 2), (16, 1)])
def test_front_ends_split_the_jobs_share_of_the_one_engine(tmp_path, frontends, cap):
    """Each front-end runs the jobs uploaded to it: NMT_JOB_SEGMENTS_IN_FLIGHT is of all of them together in the one
    engine (each front-end had all of it: two front-ends' jobs took twice the rows)."""
    from app.jobs.runner import Runner
    from app.settings import Settings

    address = {"engine_address": "ipc:///nowhere"} if frontends else {}
    settings = Settings(job_segments_in_flight=8, frontends=frontends, job_dir=tmp_path, **address)
    assert Runner(settings, None, None).share.cap == cap
