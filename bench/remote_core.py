"""What the process boundary costs: a one-sentence greedy generate through a RemoteCore vs the local EngineCore.

    python bench/remote_core.py [--calls 500] [--concurrent 32] [--rounds 3] [--budget 8]

The engine process is a child serving a CoreServer (app/engine/core_server.py) over ipc://; the local core is the same
seeded tiny random model (the tests' shape: d_model 32, 2+2 layers) in this process, 1 thread each, eager. Each round
times --calls sequential calls, then --calls calls --concurrent at a time, local then remote; prints the CPU, the
median microseconds per call of each and the remote's extra, and checks that both give the same tokens. Last, what a
call costs the engine process: 6 x --calls greedy calls, then as many streams, 2 x --concurrent kept in flight, and
the CPU microseconds a call of the engine process and of its event loop (its main thread, where every request passes),
from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine.core import EngineCore
from app.engine.core_server import CoreServer
from app.engine.remote import Connection, RemoteCore
from app.metrics import Metrics
from bench.common import cpu_description
from bench.load import cpu_seconds
from model.transformer import Transformer, TransformerConfig

SOURCE = [17, 42, 99, 123, 7, 311, 56, 88, 402, 23, 9, 2]  # one sentence of 12 ids, </s> (id 2) last


def tiny_core() -> EngineCore:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = TransformerConfig(src_vocab_size=600, tgt_vocab_size=600, d_model=32, n_heads=4, n_encoder_layers=2,
                               n_decoder_layers=2, d_ff=64, dropout=0.0, max_positions=512)  # fmt: skip
    core = EngineCore(Transformer(config).eval(), metrics=Metrics().engine("tiny"), max_batch_size=32, max_len=64,
                      max_src_len=64, prefill_tokens=2048, max_queue=256)  # fmt: skip
    core.start()
    return core


async def per_call_us(core, calls: int, concurrent: int, budget: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls // concurrent):
        await asyncio.gather(*(core.generate([SOURCE], [budget]) for _ in range(concurrent)))
    return (time.perf_counter() - t0) / (calls // concurrent * concurrent) * 1e6


async def engine_cpu(remote, pid: int, calls: int, in_flight: int, budget: int, stream: bool) -> tuple[float, ...]:
    """Calls a second, and the engine process's CPU microseconds a call, in all and on its event loop (its main
    thread), with `in_flight` greedy calls (or streams) kept in flight."""
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            if not stream:
                await remote.generate([SOURCE], [budget])
                return
            s = remote.stream(SOURCE, budget)
            async for _ in s:
                pass
            await s.result()

    before, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    wall, after = time.perf_counter() - t0, cpu_seconds(pid)
    return calls / wall, *(1e6 * (after[k] - before[k]) / calls for k in ("cpu_s", "loop_cpu_s"))


async def compare(args: argparse.Namespace, address: str, engine_pid: int) -> None:
    local = tiny_core()
    remote = RemoteCore(Connection(address), "tiny")
    remote.start()
    await remote.connection.refresh(timeout=60)
    same = await local.generate([SOURCE], [args.budget]) == await remote.generate([SOURCE], [args.budget])
    print(f"{cpu_description()}\nsame tokens and scores: {same}; budget {args.budget} tokens")
    for concurrent in (1, args.concurrent):
        times: dict[str, list[float]] = {"local": [], "remote": []}
        for _ in range(args.rounds):
            for name, core in (("local", local), ("remote", remote)):
                times[name].append(await per_call_us(core, args.calls, concurrent, args.budget))
        a, b = statistics.median(times["local"]), statistics.median(times["remote"])
        print(f"{concurrent:>3} at a time: local {a:8.0f} us/call  remote {b:8.0f} us/call  extra {b - a:+7.0f} us "
              f"({b / a:.2f}x), median of {args.rounds}")  # fmt: skip
    for stream in (False, True):  # what each call costs the engine process, its event loop apart
        await engine_cpu(remote, engine_pid, args.calls, 2 * args.concurrent, args.budget, stream)  # warm-up
        rounds = [await engine_cpu(remote, engine_pid, 6 * args.calls, 2 * args.concurrent, args.budget, stream)
                  for _ in range(args.rounds)]  # fmt: skip
        rate, cpu, loop = (statistics.median(r[i] for r in rounds) for i in range(3))
        print(f"engine process, {'streams' if stream else 'greedy calls'} {2 * args.concurrent} in flight: "
              f"{rate:6.0f} calls/s, CPU {cpu:5.0f} us a call, its event loop {loop:4.0f} us (medians of "
              f"{args.rounds}; loop rounds {[round(r[2]) for r in rounds]})")  # fmt: skip
    remote.stop()
    local.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--concurrent", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=int, default=8, help="output tokens per call, </s> included")
    p.add_argument("--serve", help=argparse.SUPPRESS)  # the child: serve the tiny core at this address
    args = p.parse_args()
    if args.serve:
        asyncio.run(CoreServer({"tiny": tiny_core()}, args.serve).serve())
        return
    with tempfile.TemporaryDirectory() as folder:  # created 0700: the engine's socket is private
        address = f"ipc://{folder}/engine"
        child = subprocess.Popen([sys.executable, __file__, "--serve", address])
        try:
            asyncio.run(compare(args, address, child.pid))
        finally:
            child.kill()
            child.wait()


if __name__ == "__main__":
    main()
