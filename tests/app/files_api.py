"""Helpers the tests of files as jobs over HTTP share (tests/app/test_files_api.py, tests/app/test_jobs.py): the
paragraphs of a text file, uploading it, waiting for its job, and /translate's own translations to compare with."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from tests.synthetic import synthetic_pairs

PARAGRAPHS = [en for en, _ in synthetic_pairs(24, seed=5)]


def text_file(paragraphs: list[str]) -> bytes:
    """Paragraphs between blank lines, one of them of two lines, with CRLF and trailing blank lines."""
    body = "\n\n".join(paragraphs[:-2]) + f"\r\n\r\n{paragraphs[-2]}\n{paragraphs[-1]}\n\n"
    return body.encode()


async def finished(client, job_id: str) -> dict:
    for _ in range(600):
        job = (await client.get(f"/files/{job_id}")).json()
        if job["status"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job {job_id} did not finish: {job}")


async def upload(client, data: bytes, name: str = "report.txt", **fields) -> dict:
    r = await client.post("/files", files={"file": (name, data)}, data=fields)
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/files/{r.json()['id']}"
    return r.json()


async def ours(client, texts: list[str]) -> list[str]:
    r = await client.post("/translate", json={"text": texts})
    assert r.status_code == 200, r.text
    return [t["text"] for t in r.json()["translations"]]


@contextmanager
def holding(app) -> Iterator[None]:
    """The jobs' chunks wait at the engine's door until the block ends (the engine call is put back then)."""
    gate, real = asyncio.Event(), app.state.jobs.translate

    async def held(engine, units, decoding):
        await gate.wait()
        return await real(engine, units, decoding)

    app.state.jobs.translate = held
    try:
        yield
    finally:
        app.state.jobs.translate = real
        gate.set()
