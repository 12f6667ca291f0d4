"""A real out-of-memory drill: the GPU memory this process may hold is capped just above what the started server
holds, then more long texts arrive at once than their decoder steps and admissions fit in. Every request gets a
translation or a clean 503 (out_of_memory); none gets a 500, none is lost or left hanging, the scheduler's
out-of-memory retries really ran, and once the cap is lifted the server translates as before.

NMT_TEST_OOM_HEADROOM_MB sets the room left above what is reserved at the cap (default 32 MiB: a step of ~300 rows
of the bundled model needs ~40 MiB in float32, its logits alone ~10 MiB, so a full batch does not fit and a few
dozen rows do). With NMT_TEST_DEVICE=cpu the cap is emulated: larger steps and admissions raise the CUDA
out-of-memory error themselves.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from contextlib import contextmanager

import pytest
import torch

from app.settings import Settings
from app.text import Engine
from model.tokenizer import read_lines
from tests.app.conftest import serve
from tests.app.helpers import TEXTS, until
from tests.cuda.conftest import CUDA, DATA_DIR, DEVICE, ON_CUDA, TEST2016

pytestmark = [*CUDA, pytest.mark.anyio]
HEADROOM = int(float(os.environ.get("NMT_TEST_OOM_HEADROOM_MB", "32")) * 2**20)
REQUESTS, SENTENCES_PER_TEXT = (300, 12) if ON_CUDA else (40, 3)
ANSWERED_WITHIN_S = 240
EMULATED_ROWS, EMULATED_ADMISSION = 12, 3  # on the CPU: the most rows a step, and sources an admission, may have
SHORT = "A man is riding a bike."


def long_texts(n: int, per_text: int) -> list[str]:
    """n texts of `per_text` test2016 sentences each (the batcher tests' sentences without test2016)."""
    path = DATA_DIR / TEST2016[0]
    sentences = list(read_lines(path)) if path.is_file() else TEXTS * 50
    return [" ".join(sentences[(i * 7 + j) % len(sentences)] for j in range(per_text)) for i in range(n)]


@contextmanager
def memory_cap(engine: Engine, headroom: int):
    """Let this process hold on the GPU only what it has reserved now plus `headroom` bytes, lifted after; yields
    the cap's figures. On the CPU: out-of-memory errors for the steps and admissions over the emulated sizes."""
    if not ON_CUDA:
        model, cache = engine.core.model, engine.core.batcher.cache
        step, add = model.decode_greedy, cache.add

        def decode_greedy(tokens, cache_):
            if tokens.size(0) > EMULATED_ROWS:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (emulated on the CPU)")
            return step(tokens, cache_)

        def admit(model_, src):
            if src.size(0) > EMULATED_ADMISSION:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (emulated on the CPU)")
            return add(model_, src)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(model, "decode_greedy", decode_greedy)
            patch.setattr(cache, "add", admit)
            yield {"emulated_rows": EMULATED_ROWS, "emulated_admission": EMULATED_ADMISSION}
        return
    device = engine.core.device
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    fraction = (reserved + headroom) / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    try:
        mib = {"allocated_mib": allocated, "reserved_mib": reserved, "total_mib": total, "headroom_mib": headroom}
        yield {"fraction": round(fraction, 6), **{k: round(v / 2**20) for k, v in mib.items()}}
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)


async def test_more_than_fits_gets_translations_or_clean_503s_and_the_server_recovers(bundled, report):
    settings = Settings(
        model_dir=bundled, device=DEVICE, compile="off", max_batch_size=512, max_queue=1024, request_timeout_s=600
    )  # eager: CUDA graphs would preallocate their memory before the cap
    texts = long_texts(REQUESTS, SENTENCES_PER_TEXT)
    async with serve(settings, startup_timeout=120) as (app, client):
        engine = app.state.engine
        metrics = engine.core.batcher.metrics
        before = (await client.post("/translate", json={"text": SHORT})).json()
        t0 = time.perf_counter()
        with memory_cap(engine, HEADROOM) as cap:
            # split "none": each text one long sequence (split into its sentences, 3,600 would overflow the queue)
            body = {"truncate": True, "split": "none"}
            tasks = [asyncio.create_task(client.post("/translate", json={"text": t, **body})) for t in texts]
            _, hanging = await asyncio.wait(tasks, timeout=ANSWERED_WITHIN_S)
            for task in hanging:
                task.cancel()
        seconds = time.perf_counter() - t0
        assert not hanging, f"{len(hanging)} of {len(tasks)} requests were not answered within {ANSWERED_WITHIN_S} s"
        responses = [task.result() for task in tasks]
        statuses = Counter(r.status_code for r in responses)
        retries = metrics.sample("nmt_oom_retries_total") or 0
        report(
            requests=len(tasks), translated=statuses[200], out_of_memory=statuses[503], statuses=dict(statuses),
            oom_retries=retries, seconds=round(seconds, 1), peak_rows=engine.core.batcher.peak_rows, **cap,
        )  # fmt: skip
        assert set(statuses) <= {200, 503}, [r.text for r in responses if r.status_code not in (200, 503)][:3]
        for r in responses:
            if r.status_code == 200:
                assert r.json()["translations"][0]["text"]
            else:
                body = r.json()
                assert body["type"] == "out_of_memory" and "ran out of memory" in body["error"], body
        assert retries >= 1, "nothing ran out of memory: lower NMT_TEST_OOM_HEADROOM_MB"
        assert statuses[200] >= 1, "nothing was translated under the cap: raise NMT_TEST_OOM_HEADROOM_MB"
        await until(lambda: engine.core.batcher.load == 0 and engine.core.batcher.cache.n == 0)
        after = await client.post("/translate", json={"text": SHORT})
        assert after.status_code == 200 and after.json() == before
        again = await client.post("/translate", json={"text": texts[0], **body})
        assert again.status_code == 200 and again.json()["translations"][0]["text"]
