"""The processes of one run: torchrun's ranks, what rank 0 shares with them, and the signals that stop them all."""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import torch
import torch.distributed as dist


def init_distributed(args: argparse.Namespace) -> tuple[int, int, torch.device]:
    """(rank, world size, device). One process unless torchrun started this one (WORLD_SIZE in the environment):
    then gloo on the CPU, each process with its share of the machine's cores, or NCCL with one GPU a process."""
    device = torch.device(args.device)
    if "WORLD_SIZE" not in os.environ:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    elif not args.threads:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        args.threads = max(1, cores // int(os.environ["LOCAL_WORLD_SIZE"]))
    # Rank 0 validates and writes at the end of an epoch while the others wait in the next step's collectives.
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=2))
    return dist.get_rank(), dist.get_world_size(), device


def leave(code: int) -> NoReturn:
    """Ends a process of a multi-process run, its work done and its process group destroyed, without finalizing
    the interpreter. torch keeps gloo's worker threads past destroy_process_group once DistributedDataParallel has
    held the group; one that lets go of a tensor Python created (the last collective's) after the interpreter began
    finalizing takes the GIL there and aborts the process ("terminate called without an active exception",
    pytorch/pytorch#190489): a run that had saved everything would end failed. Rare, and only under load."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def share(obj, world: int):
    """Rank 0's obj, on every rank (pickled through the process group: --out need only exist where rank 0 runs)."""
    if world == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """SIGTERM and SIGINT (Ctrl-C, a scheduler taking the machine back, torchrun passing its own on) ask the run to
    stop after the update in progress, its state saved for --resume: the signals received are appended to the list
    yielded. A second one stops at once, as without this. The handlers before are put back on the way out."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield got
        return

    def handler(signum: int, frame) -> None:
        if got:  # asked twice: stop now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        got.append(signum)

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield got
    finally:
        for s, h in before.items():
            signal.signal(s, h)
