"""Graphs built in child processes, several at once (model/compile/builders.py): how many, what a failed or cancelled
build does, and that the children stop while graphs are timed. The children here run stand-in commands; a real
parallel build is test_compile.py's every-row-count test (its packages decode as the eager model does)."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from model import workspace
from model.compile import Cancelled, builders, compile_graphs, nogil
from model.decoding import KVCache
from tests.conftest import ONE_ROW, ONE_ROW_GRAPHS


def stand_in(monkeypatch, code: str) -> None:
    """Every child runs `code` (Python, its spec's path in sys.argv[1]) instead of a build (and the graphs' C++
    extension is not built: nothing here runs a graph)."""
    monkeypatch.setattr(builders, "command", lambda spec: [sys.executable, "-c", code, str(spec)])
    monkeypatch.setattr(nogil, "ensure", lambda *args: None)


def pid_of(spec: Path) -> int:
    return int(spec.with_suffix(".pid").read_text())


def sleeper(pids: Path) -> str:
    """A child that writes its pid (beside its spec, and into `pids`) and sleeps for a minute."""
    pids.mkdir(exist_ok=True)
    return (f"import os, sys, time, pathlib; pid = str(os.getpid()); pathlib.Path({str(pids)!r}, pid).touch(); "
            "pathlib.Path(sys.argv[1]).with_suffix('.pid').write_text(pid); time.sleep(60)")  # fmt: skip


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split()[2]


def eventually(pids: list[int], states: str) -> list[str]:
    """The processes' states once each is one of `states` (a signal takes effect a moment after it is sent)."""
    deadline = time.monotonic() + 10
    while not all(state(p) in states for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [state(p) for p in pids]


def alive(pid: int) -> bool:
    try:
        return state(pid) not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_as_many_at_once_as_cores_and_memory_allow_never_more_than_the_builds(tiny_model, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(builders, "available_memory", lambda: 100 * builders.BUILD_BASE_BYTES)
    assert builders.jobs_for(tiny_model, builds=10) == 4  # the cores
    assert builders.jobs_for(tiny_model, builds=3) == 3
    assert builders.jobs_for(tiny_model, builds=10, jobs=6) == 6  # asked for
    monkeypatch.setattr(builders, "available_memory", lambda: 2 * builders.BUILD_BASE_BYTES)
    assert builders.jobs_for(tiny_model, builds=10) == 1  # each build holds the base and its weights several times
    monkeypatch.setattr(builders, "available_memory", lambda: 0)
    assert builders.jobs_for(tiny_model, builds=10) == 1
    monkeypatch.setattr(builders, "available_memory", lambda: None)  # nothing says: the cores
    assert builders.jobs_for(tiny_model, builds=10) == 4


def test_a_containers_cpu_quota_and_memory_limit_count(tiny_model, tmp_path, monkeypatch):
    """In a container the cores are its CPU quota (Kubernetes' CPU limit), not the node's, and the memory its limit
    less what it holds."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(builders, "CGROUP", tmp_path)
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # 2.5 CPUs
    assert builders.usable_cores() == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert builders.usable_cores() == 16
    (tmp_path / "memory.max").write_text(f"{3 * 2**30}\n")  # 3 GiB, 1 GiB of it held: room for one build
    (tmp_path / "memory.current").write_text(f"{2**30}\n")
    assert builders.available_memory() <= 2 * 2**30 and builders.jobs_for(tiny_model, builds=10) == 1
    (tmp_path / "memory.max").write_text("max\n")  # no limit: the machine's available memory
    assert builders.available_memory() > 2 * 2**30


def test_a_failed_build_says_which_graph_and_what_its_child_wrote(tiny_model, tmp_path, monkeypatch):
    stand_in(monkeypatch, "import sys; sys.stderr.write('out of disk space'); sys.exit(3)")
    cache = KVCache(tiny_model, **ONE_ROW)
    with pytest.raises(RuntimeError, match=r"greedy_step-1-1.*exit status 3: out of disk space"):
        compile_graphs(tiny_model, cache, steps=("greedy",), directory=tmp_path, mode="default", jobs=2)
    assert not list(tmp_path.rglob("*.pt2"))


def test_cancelling_kills_the_children_at_once(tiny_model, tmp_path, monkeypatch):
    """A server stopping while it compiles: compile_graphs raises Cancelled within moments, not after the builds, and
    no child is left running."""
    stand_in(monkeypatch, sleeper(tmp_path / "pids"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # jobs=0: as many as two cores allow
    monkeypatch.setattr(builders, "available_memory", lambda: None)
    logged = []

    def cancelled():  # once both children run (the first graph is waited for meanwhile)
        return len(list((tmp_path / "pids").iterdir())) == 2

    cache = KVCache(tiny_model, **ONE_ROW)
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        compile_graphs(tiny_model, cache, steps=("greedy",), directory=tmp_path / "graphs", mode="default", jobs=0,
                       cancelled=cancelled, log=logged.append)  # fmt: skip
    assert time.monotonic() - t0 < 30
    pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert len(pids) == 2 and not any(alive(p) for p in pids)  # both graphs' children started, and were killed
    assert any(f"building {len(ONE_ROW_GRAPHS)} graphs" in line for line in logged)


def test_the_children_stop_while_graphs_are_timed_and_are_killed_on_close(tiny_model, tmp_path, monkeypatch):
    from model.compile.graphs import Graph

    stand_in(monkeypatch, sleeper(tmp_path / "pids"))
    cache = KVCache(tiny_model, **ONE_ROW)
    with builders.Builders(tiny_model, cache, jobs=2, where=tmp_path) as b:
        for n in range(3):
            b.submit(Graph("prefill", 1, 1, 1), tmp_path / f"{n}.pt2", {}, "default")
        specs = sorted(Path(b._root).glob("*.json"))
        deadline = time.monotonic() + 30
        while not all(s.with_suffix(".pid").exists() for s in specs[:2]) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [pid_of(s) for s in specs[:2]]
        assert b.started == 2 and not specs[2].with_suffix(".pid").exists()  # two at once; the third waits
        with b.paused():
            assert eventually(pids, "T") == ["T", "T"]  # stopped
        assert eventually(pids, "SR") != ["T", "T"]  # going on
    assert not any(alive(p) for p in pids)


def test_the_children_die_with_a_server_killed_while_they_build(tiny_model, tmp_path, monkeypatch, caplog):
    """kill -9 of the process that started them (a server, `nmt-serve --precompile`) leaves no build running: real
    children, killed as they load the model or build. The files it kept for them (the model's copy) are removed by
    the next Builders on that directory, not while it lives."""
    script = f"""
import time
from model.compile import builders
from model.compile.graphs import Graph
from model.decoding import KVCache
from model.transformer import Transformer, TransformerConfig
model = Transformer(TransformerConfig(src_vocab_size=16, tgt_vocab_size=16, d_model=8, n_heads=2, d_ff=16,
                                      n_encoder_layers=1, n_decoder_layers=1, max_positions=32)).eval()
b = builders.Builders(model, KVCache(model, 1, 8, 8), jobs=2, where=builders.Path({str(tmp_path)!r}))
for n in range(2):
    b.submit(Graph("prefill", 1, 1, 1), builders.Path({str(tmp_path)!r}) / f"{{n}}.pt2", {{}}, "default")
print(*(job.process.pid for job in b._running), flush=True)
time.sleep(3)  # the children load the model meanwhile
print("killed now", flush=True)
time.sleep(60)
"""
    monkeypatch.setattr(workspace, "ABANDONED_AFTER_S", 0)  # any workspace whose lock is free is abandoned
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 2 and all(alive(p) for p in children)
        (left,) = tmp_path.glob(f"{builders.WORKSPACE}*")
        assert (left / "model.pt").is_file()
        assert workspace.remove_abandoned(tmp_path, builders.WORKSPACE) == []  # another server's, while it lives
        assert (left / "model.pt").is_file()
        assert parent.stdout.readline().strip() == "killed now"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in children), "a build outlived the process that started it"
    assert left.exists()
    with builders.Builders(tiny_model, KVCache(tiny_model, **ONE_ROW), jobs=1, where=tmp_path) as b:
        assert not left.exists() and Path(b._root).parent == tmp_path and (Path(b._root) / "model.pt").is_file()
        assert any(f"removed {left}: a directory a killed process had left" in r.getMessage() for r in caplog.records)
    assert list(tmp_path.glob(f"{builders.WORKSPACE}*")) == []  # its own, removed on close


def test_the_children_take_the_priority_of_the_thread_that_starts_them(tiny_model, tmp_path, monkeypatch):
    """In the background the compiling thread yields the cores to serving (niceness 10): so do its builds."""
    from model.compile.graphs import Graph

    stand_in(monkeypatch, sleeper(tmp_path / "pids"))
    niceness = []

    def compiling_thread():
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # as app/engine/compiling.py's lower_priority
        with builders.Builders(tiny_model, KVCache(tiny_model, **ONE_ROW), jobs=1, where=tmp_path) as b:
            b.submit(Graph("prefill", 1, 1, 1), tmp_path / "0.pt2", {}, "default")
            deadline = time.monotonic() + 30
            while not list((tmp_path / "pids").iterdir()) and time.monotonic() < deadline:
                time.sleep(0.05)
            (pid,) = [int(p.name) for p in (tmp_path / "pids").iterdir()]
            niceness.append(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]))

    thread = threading.Thread(target=compiling_thread)
    thread.start()
    thread.join()
    assert niceness == [10]


def test_a_child_times_kernels_only_while_the_others_are_stopped(tiny_model, tmp_path, monkeypatch):
    """Max-autotune's timings in one child, another child building beside it, chose slower kernels: each timing
    waits until the parent has stopped the other children, and they go on afterwards."""
    from model.compile.graphs import Graph

    pids, seen = tmp_path / "pids", tmp_path / "seen"
    pids.mkdir()
    seen.mkdir()
    timing_child = f"""
import itertools, os, pathlib, sys, time
from model.compile.builders import _quiet
root, pids, seen, me = pathlib.Path(sys.argv[1]).parent, pathlib.Path({str(pids)!r}), pathlib.Path({str(seen)!r}), \\
    str(os.getpid())
(pids / me).touch()
while len(list(pids.iterdir())) < 2:
    time.sleep(0.01)
asks = itertools.count()
for n in range(5):
    with _quiet(root, asks):
        states = []
        for other in (p.name for p in pids.iterdir() if p.name != me):
            try:
                states.append(pathlib.Path(f"/proc/{{other}}/stat").read_text().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                states.append("gone")
        (seen / f"{{me}}-{{n}}").write_text(" ".join(states))
        time.sleep(0.02)
    time.sleep(0.01)  # building between two timings
"""
    stand_in(monkeypatch, timing_child)
    with builders.Builders(tiny_model, KVCache(tiny_model, **ONE_ROW), jobs=2, where=tmp_path) as b:
        paths = [tmp_path / f"{n}.pt2" for n in range(2)]
        for path in paths:
            b.submit(Graph("prefill", 1, 1, 1), path, {}, "default")
        for path in paths:
            b.wait(path)
    states = {p.name: p.read_text().split() for p in seen.iterdir()}
    assert len(states) == 10  # five timings in each child
    assert all(s in (["T"], ["gone"]) for s in states.values()), states  # the other child stopped, or done
    assert sum(s == ["T"] for s in states.values()) >= 5


def test_a_model_that_cannot_be_saved_for_the_children_is_built_here_with_a_warning(tiny_model, tmp_path, monkeypatch,
                                                                                     caplog):  # fmt: skip
    from model.compile import runtime
    from model.compile.graphs import Graph

    def refuse(*args, **kwargs):
        raise TypeError("cannot pickle 'SomeHandle' object")

    monkeypatch.setattr(builders.torch, "save", refuse)
    plan = [(Graph("prefill", 1, 1, 1), tmp_path / f"{n}.pt2", "default") for n in range(2)]
    with runtime._builders(tiny_model, KVCache(tiny_model, **ONE_ROW), plan, {}, 2, None, None) as found:
        assert found is None  # compile_graphs builds on its own thread, one graph after another
    assert "could not be saved for child processes (cannot pickle 'SomeHandle' object)" in caplog.text
    monkeypatch.undo()
    with runtime._builders(tiny_model, KVCache(tiny_model, **ONE_ROW), plan, {}, 2, None, None) as found:
        assert found is not None and found.jobs == 2 and found.started == 2
        found.close()  # the stand-in-less children are killed before they build anything


def test_packages_built_for_another_environment_are_built_again_side_by_side(one_row_packages, tiny_model, tmp_path,
                                                                             monkeypatch, caplog):  # fmt: skip
    """After an upgrade every package is there but stale (another torch, another nmt-serve): each is built again by
    the children, with one warning saying why; whole current packages are not."""
    import shutil

    import torch

    from model.compile import environment, runtime
    from model.compile.graphs import Graph

    stand_in(monkeypatch, "pass")
    shutil.copytree(one_row_packages[0], tmp_path / "graphs")
    paths = sorted((tmp_path / "graphs").glob("*/*.pt2"))
    plan = [(Graph("prefill", 1, 1, 1), path, "default") for path in paths]
    cache, expected = KVCache(tiny_model, **ONE_ROW), environment(torch.device("cpu"))
    with runtime._builders(tiny_model, cache, plan, expected, 2, None, None) as found:
        assert len(paths) == 2 and found is None  # nothing to build
    upgraded = {**expected, "torch": "9.9.9"}
    with runtime._builders(tiny_model, cache, plan, upgraded, 2, None, None) as found:
        assert found is not None and found.started == 2
    for path in paths:
        assert caplog.text.count(f"ignoring the compiled graph {path}: it was built for torch") == 1
