"""An EngineCore behind the process boundary (app/engine/remote.py): a RemoteCore gives what the local core gives,
frees rows when its caller gives up, carries the engine's errors as themselves, and fails fast once the engine is gone.

Most tests serve a real core on the tiny model from a thread with its own event loop; the death tests serve it from a
child process, which they kill or freeze."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from app.engine import wire
from app.engine.core import EngineCore
from app.engine.core_server import CoreServer
from app.engine.errors import EngineFailure, EngineUnavailable, QueueFull
from app.engine.remote import Connection, RemoteCore, connect
from app.metrics import Metrics
from model.constraints import Phrase
from model.options import DecodingOptions
from tests.app.conftest import StepGate, failing_on_step
from tests.app.helpers import TEXTS, until

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
BUDGET = 40


def make_core(model) -> EngineCore:
    core = EngineCore(
        model, metrics=Metrics().engine("tiny"), max_batch_size=8, max_len=BUDGET, max_src_len=32,
        prefill_tokens=2048, max_queue=96, waiting_served_ratio=0.0, max_waiting_steps=0,
    )  # fmt: skip
    core.start()
    return core


@contextmanager
def serving(cores: dict[str, EngineCore], address: str, **options):
    """A CoreServer on its own event loop in a thread, as the engine process runs one."""
    server, loop = CoreServer(cores, address, **options), asyncio.new_event_loop()
    task = loop.create_task(server.serve())

    def run() -> None:
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)
        loop.close()


@pytest.fixture
def core(tiny_model):
    core = make_core(tiny_model)
    yield core
    core.stop()


@pytest.fixture
def address(tmp_path) -> str:
    return f"ipc://{tmp_path}/engine"


@pytest.fixture
def server(core, address):
    with serving({"tiny": core}, address) as server:
        yield server


@pytest.fixture
async def remote(server, address):
    remote = (await connect(address, ["tiny"], heartbeat_s=0.2, timeout_s=2.0))["tiny"]
    yield remote
    remote.stop()


@pytest.fixture
def srcs(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(t) for t in TEXTS]


async def test_greedy_beam_glossary_align_and_attention_give_what_the_local_core_gives(remote, core, srcs, tokenizer):
    budgets = [BUDGET] * len(srcs)
    for src in srcs:  # one at a time, alone in the batch: the very same floats
        assert await remote.generate([src], [BUDGET]) == await core.generate([src], [BUDGET])
    beam = DecodingOptions(beam_size=3, num_hypotheses=2)
    local = await core.search(srcs[:3], budgets[:3], beam)
    assert await remote.search(srcs[:3], budgets[:3], beam) == local
    assert len(local[0]) == 2 and local[0][0].score >= local[0][1].score
    targets = [[h.tokens for h in hyps] for hyps in local]
    assert await remote.align(srcs[:3], targets) == await core.align(srcs[:3], targets)
    weights = await core.attention(srcs[0], targets[0][0], [0, 1], [0, 2], False)
    assert await remote.attention(srcs[0], targets[0][0], [0, 1], [0, 2], False) == weights
    pieces = [tokenizer.id_to_token(i, "target") for i in range(tokenizer.vocab_size)]
    glued, local_glued = await remote.word_continuations(pieces), await core.word_continuations(pieces)
    assert glued.tolist() == local_glued.tolist() and glued.any()  # an array: a front-end has no torch
    glossary = DecodingOptions(constraints=(Phrase((7, 8)),))
    remotely = await remote.search(srcs[:1], budgets[:1], [replace(glossary, glued=glued)])  # the array travels too
    assert remotely == await core.search(srcs[:1], budgets[:1], [replace(glossary, glued=local_glued)])
    assert await remote.generate([], []) == [] and await remote.search([], [], beam) == []
    assert remote.rows == core.rows and remote.max_queue == core.max_queue
    assert vars(remote.config) == core.config.to_dict()  # its fields: the class is the model's, torch's side
    assert remote.info() == core.info() and not remote.stopped and not remote.compiled


async def test_a_stream_yields_the_local_ids_then_the_hypothesis(remote, core, srcs):
    local = core.stream(srcs[0], BUDGET)
    ids = [token async for token in local]
    hyp = await local.result()
    assert ids == hyp.tokens and ids
    stream = remote.stream(srcs[0], BUDGET, request=object())
    assert [token async for token in stream] == ids
    assert await stream.result() == hyp


async def test_the_tokens_of_one_step_travel_together(remote, srcs, monkeypatch):
    messages = []
    decode = wire.decode
    monkeypatch.setattr(wire, "decode", lambda frame: messages.append(out := decode(frame)) or out)
    streams = [remote.stream(src, BUDGET) for src in srcs]  # 8 rows: one batch
    ids = await asyncio.gather(*(tokens_of(stream) for stream in streams))
    replies = [m for m in messages if isinstance(m, list) and any(r.kind == "tokens" for r in m)]
    assert sum(map(len, ids)) >= 4 * len(replies), "the streams' tokens of a step come in one message"


async def test_the_requests_of_one_pass_of_the_loop_travel_together(remote, core, srcs, monkeypatch):
    sent = []
    encode = wire.encode
    monkeypatch.setattr(wire, "encode", lambda message: sent.append(message) or encode(message))

    async def streamed(src: list[int]) -> list[int]:  # the stream made in its task's first step, as generate's call
        return await tokens_of(remote.stream(src, BUDGET))

    answers = await asyncio.gather(*(remote.generate([src], [BUDGET]) for src in srcs), *map(streamed, srcs))
    kinds = [[r.kind for r in m if r.kind != "status"] for m in sent if isinstance(m[0], wire.Request)]
    assert [k for k in kinds if k] == [["generate"] * len(srcs) + ["stream"] * len(srcs)]  # (and heartbeats' status)
    assert [hyps[0].tokens for hyps in answers[: len(srcs)]] == answers[len(srcs) :]  # greedy both ways
    assert core.batcher.load == 0


async def test_a_message_the_engine_cannot_read_fails_alone(remote, srcs, address, caplog):
    stranger = wire.open_socket(zmq.DEALER)
    stranger.connect(address)
    for frame in (b"not a pickle", wire.encode(["not a request"]), wire.encode([wire.Request(1, "status")])):
        stranger.send(frame)
    assert stranger.poll(10_000), "no answer"  # (the engine runs on a thread of its own: this loop may block)
    assert [r.kind for r in wire.decode(stranger.recv())] == ["status"]  # the third: the engine read on
    assert len(await remote.generate([srcs[0]], [BUDGET])) == 1
    assert [r.msg for r in caplog.records].count("a message on %s could not be handled") == 2
    stranger.close()


async def tokens_of(stream) -> list[int]:
    return [token async for token in stream]


async def test_many_concurrent_requests_all_come_back_right(remote, core, srcs):
    asked = [srcs[i % len(srcs)][: 3 + i % 7] + srcs[0][-1:] for i in range(64)]  # 64 sources, varied lengths
    expected = [(await core.generate([src], [BUDGET]))[0].tokens for src in asked]

    async def streamed(src):
        stream = remote.stream(src, BUDGET)
        return await tokens_of(stream), (await stream.result()).tokens

    got = await asyncio.gather(*(remote.generate([src], [BUDGET]) for src in asked[:32]),
                               *(streamed(src) for src in asked[32:]))  # fmt: skip
    assert [hyps[0].tokens for hyps in got[:32]] == expected[:32]
    assert [ids for ids, _ in got[32:]] == [tokens for _, tokens in got[32:]] == expected[32:]
    assert core.batcher.load == 0 and remote.load == 0


@pytest.mark.parametrize("how", ["close the stream", "cancel the call"])
async def test_a_caller_giving_up_frees_its_rows(remote, server, core, srcs, tiny_model, monkeypatch, how):
    (whole,) = await core.generate([srcs[1]], [BUDGET])
    assert whole.finish_reason == "length", "a sequence that would run to its budget"
    steps, gate = core.batcher.steps, StepGate(tiny_model, monkeypatch)
    gate.hold(lambda sizes: len(sizes) == 3)
    if how == "close the stream":
        stream = remote.stream(srcs[1], BUDGET)
        assert await anext(stream) == whole.tokens[0]
    else:
        call = asyncio.create_task(remote.generate([srcs[1]], [BUDGET]))
    await until(gate.paused.is_set)
    if how == "close the stream":
        stream.close()
    else:
        call.cancel()
    await until(lambda: server.requests == 0)  # the cancel reached the engine while its worker is held
    gate.release()
    await until(lambda: core.batcher.load == 0 and len(core.batcher.batch) == 0)
    assert core.batcher.steps - steps <= 4, "the sequence left the batch at once rather than running to its budget"
    assert remote.load == 0


async def test_queue_full_from_the_front_end_share_or_from_the_engine(remote, core, srcs, tiny_model, monkeypatch):
    core.batcher.max_queue = 4
    await remote.connection.refresh()
    gate = StepGate(tiny_model, monkeypatch)
    gate.hold(lambda sizes: True)  # nothing finishes while the queue fills
    two = RemoteCore(remote.connection, "tiny", frontends=2)  # one of two front-ends: a share of 2
    with pytest.raises(QueueFull, match=r"the limit is 2 \(this front-end's share of NMT_MAX_QUEUE, 4, among 2\)"):
        two.check_capacity(3)  # the share said so, not as if it were the server's limit
    held = [two.stream(src, BUDGET) for src in srcs[:2]]  # 2 of the engine's 4 places
    with pytest.raises(QueueFull, match="2 sequences are waiting or decoding and this request adds 1"):
        two.stream(srcs[2], BUDGET)  # refused here, at once
    remote.check_capacity(3)  # the other front-end's share has room...
    with pytest.raises(QueueFull, match="this request adds 3; the limit is 4"):  # ...the engine has not
        await remote.generate(srcs[:3], [BUDGET] * 3)
    streams = [remote.stream(src, BUDGET) for src in srcs[:3]]  # submitted here; the engine refuses the third
    with pytest.raises(QueueFull, match="4 sequences are waiting or decoding and this request adds 1"):
        await streams[2].accepted()  # what a stream awaits before its response begins: the answer is a 429
    await streams[0].accepted()  # taken: the engine says so at once, though its held worker gives no token yet
    assert [token async for token in streams[2]] == []
    with pytest.raises(QueueFull, match="4 sequences are waiting or decoding and this request adds 1"):
        await streams[2].result()
    assert remote.load == two.load == 2
    for stream in [*held, *streams]:
        stream.close()
    gate.release()


async def test_the_engines_failures_arrive_as_engine_failures(remote, srcs, tiny_model, monkeypatch):
    monkeypatch.setattr(tiny_model, "decode_greedy", failing_on_step(tiny_model.decode_greedy, 1))
    with pytest.raises(EngineFailure, match="injected fault"):
        await remote.generate([srcs[0]], [BUDGET])
    with pytest.raises(EngineFailure, match=r"\(ValueError: only a search of one row can stream\)"):
        await remote.stream(srcs[0], BUDGET, DecodingOptions(beam_size=2)).result()
    with pytest.raises(EngineUnavailable, match="has no model 'other'"):
        await RemoteCore(remote.connection, "other").align([srcs[0]], [[[5]]])
    assert len(await remote.generate([srcs[0]], [BUDGET])) == 1  # the next request is served


async def test_a_front_end_that_stops_reading_is_cut_off_not_waited_for(core, srcs, tmp_path, tiny_model, monkeypatch):
    address = f"ipc://{tmp_path}/engine"
    with serving({"tiny": core}, address, hwm=1) as server:
        plain = wire.open_socket(zmq.DEALER, hwm=1)
        mute = zmq.asyncio.Socket.from_socket(plain)  # read and written here by awaiting, as a test can
        mute.connect(address)
        gate = StepGate(tiny_model, monkeypatch)
        gate.hold(lambda sizes: True)  # its stream holds a row and gives no token
        await mute.send(wire.encode([wire.Request(1, "stream", "tiny", (srcs[1], BUDGET, DecodingOptions(), None))]))
        await until(gate.paused.is_set)
        i, deadline = 2, time.monotonic() + 20
        while core.batcher.load and time.monotonic() < deadline:  # replies it never reads, until the engine gives up
            await mute.send(wire.encode([wire.Request(i, "status")]))
            i += 1
            await asyncio.sleep(0.001)
        assert core.batcher.load == 0 and server.requests == 0
        gate.release()
        others = RemoteCore(Connection(address, heartbeat_s=0.2), "tiny")
        others.start()
        await others.before_ready()
        assert len(await others.generate([srcs[0]], [BUDGET])) == 1  # the engine serves the others meanwhile
        others.stop()
        replies = []  # it reads at last: what reached it before it was cut off...
        while (frame := await read(mute, 0.5)) is not None:
            replies += wire.decode(frame)
        kinds, tokens = [r.kind for r in replies], [t for r in replies if r.kind == "tokens" for t in r.payload]
        assert set(kinds) <= {"tokens", "status", "reset"}, kinds  # "tokens": only the engine taking the stream...
        assert tokens == [], f"its stream gave {tokens}: it was not cut off before a token"  # ...with no token
        await mute.send(wire.encode([wire.Request(i, "status")]))  # ...then, to its next request, the news
        answer = [r.kind for r in wire.decode(await read(mute, 10))]
        # a reset answers the first request after a cut-off; while the socket stays full the engine cuts it off again,
        # so the news is the last one that got through: among what it read, or with this answer
        assert answer in (["reset", "status"], ["status"]), answer
        assert "reset" in kinds + answer, "the front-end never learnt it was cut off"
        mute.close()
        plain.close()


async def read(sock, timeout: float) -> bytes | None:
    try:
        return await asyncio.wait_for(sock.recv(), timeout)
    except TimeoutError:
        return None


async def test_requests_that_cannot_leave_fail_at_once_rather_than_wait(address, srcs):
    remote = RemoteCore(Connection(address), "tiny")  # no engine at the address
    remote.start()
    remote.connection.gone, remote.connection.status = None, {"tiny": {"max_queue": 8}}  # as if it had answered once
    calls = [remote.generate([srcs[0]], [BUDGET]), remote.stream(srcs[0], BUDGET).accepted()]  # one message, refused
    for outcome in await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5):
        assert isinstance(outcome, EngineUnavailable) and "not reachable" in str(outcome), outcome
    assert remote.load == 0
    remote.stop()


def test_only_a_private_ipc_address_is_accepted(tmp_path):
    for address in ("tcp://127.0.0.1:5555", "ipc://@engine"):
        with pytest.raises(ValueError, match="never a network address"):
            wire.check_private(address)
    tmp_path.chmod(0o755)
    with pytest.raises(ValueError, match="open to other users"):
        wire.check_private(f"ipc://{tmp_path}/engine")
    tmp_path.chmod(0o700)
    wire.check_private(f"ipc://{tmp_path}/engine")


# ---- an engine process that dies -------------------------------------------------------------------------------


def serve_checkpoint(model_dir: str, address: str, step_s: str) -> None:
    """The child process: the checkpoint's core, each decoder step slowed so that requests are still in flight."""
    from model.checkpoint import load_checkpoint

    model, _, _ = load_checkpoint(model_dir)
    step = model.decode_greedy
    model.decode_greedy = lambda tokens, cache: time.sleep(float(step_s)) or step(tokens, cache)
    asyncio.run(CoreServer({"tiny": make_core(model)}, address).serve())


@pytest.fixture
def engine_process(tiny_checkpoint, tmp_path):
    """An engine process serving the tiny checkpoint (decoder steps of 50 ms), and its address."""
    address = f"ipc://{tmp_path}/engine"
    code = "import sys; from tests.app.test_remote_core import serve_checkpoint; serve_checkpoint(*sys.argv[1:])"
    with (tmp_path / "engine.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-c", code, str(tiny_checkpoint), address, "0.05"], cwd=ROOT,
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        yield proc, address
        proc.kill()
        proc.wait(10)
    print((tmp_path / "engine.log").read_text())  # shown when the test fails


@pytest.fixture
async def child(engine_process):
    """The engine process, and a RemoteCore on it (heartbeat every 0.2 s, silence tolerated for 1 s)."""
    proc, address = engine_process
    remote = RemoteCore(Connection(address, heartbeat_s=0.2, timeout_s=1.0), "tiny")
    remote.start()
    await remote.connection.refresh(timeout=60)
    yield proc, remote
    remote.stop()


async def in_flight(remote: RemoteCore, src: list[int]):
    """A stream that has given its first token, and a call waiting for its answer."""
    stream = remote.stream(src, BUDGET)
    await anext(stream)
    return stream, asyncio.create_task(remote.generate([src], [BUDGET]))


async def test_a_killed_engine_fails_what_is_in_flight_and_what_comes_after(child, srcs):
    proc, remote = child
    stream, call = await in_flight(remote, srcs[1])
    proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EngineUnavailable, match="the engine process is gone"):
        await asyncio.wait_for(call, 5)
    with pytest.raises(EngineUnavailable, match="the engine process is gone"):
        await asyncio.wait_for(stream.result(), 5)
    assert time.monotonic() - t0 < 0.5, "the socket's monitor saw it at once, before any heartbeat could"
    with pytest.raises(EngineUnavailable, match="the engine process is gone"):
        remote.stream(srcs[0], BUDGET)
    with pytest.raises(EngineUnavailable, match="the engine process is gone"):
        await remote.generate([srcs[0]], [BUDGET])
    assert remote.load == 0


async def test_a_frozen_engine_is_given_up_on_after_the_timeout_and_served_again_when_it_answers(child, srcs):
    proc, remote = child
    stream, call = await in_flight(remote, srcs[1])
    proc.send_signal(signal.SIGSTOP)  # its connection stays open: only the heartbeat can tell
    t0 = time.monotonic()
    with pytest.raises(EngineUnavailable, match="it has not answered for 1 s"):
        await asyncio.wait_for(call, 5)
    with pytest.raises(EngineUnavailable, match="it has not answered for 1 s"):
        await stream.result()
    assert time.monotonic() - t0 < 3
    with pytest.raises(EngineUnavailable, match="it has not answered"):
        await remote.generate([srcs[0]], [BUDGET])
    proc.send_signal(signal.SIGCONT)
    await until(lambda: remote.connection.gone is None, timeout=5)
    assert len(await remote.generate([srcs[0]], [BUDGET])) == 1


async def test_a_front_end_that_was_not_running_does_not_blame_the_engine_for_its_own_silence(child, srcs):
    """The front-end's event loop held for longer than the timeout (a process stopped, or starved of the CPU) while a
    call decodes: the engine said nothing meanwhile because it had nothing to say and was asked nothing, and is not
    given up on ("it has not answered for 1 s", which failed every request in flight)."""
    _, remote = child
    call = asyncio.create_task(remote.generate([srcs[1]], [BUDGET - 2]))  # steps of 50 ms: answered after ~2 s
    await remote.connection.refresh()  # answered: nothing more comes until the next heartbeat asks
    time.sleep(1.5)  # noqa: ASYNC251 - the loop held on purpose: neither the heartbeat nor the reader runs
    assert len(await asyncio.wait_for(call, 20)) == 1
    assert remote.connection.gone is None
