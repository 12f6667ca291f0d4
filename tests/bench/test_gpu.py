"""bench/gpu.py on the CPU: its reading of the steps' output, its running of them, and its summary, from synthetic
results; bench/load.py's GPU options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.gpu import Step, last_json, plan, read_junit, render_markdown, run_step, unavailable
from bench.load import parse_args
from tests.bench.helpers import pretend_a_gpu

ROOT = Path(__file__).resolve().parents[2]

RESULTS = {
    "environment": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "gpu_memory": "81559 MiB",
                    "cuda": "13.0", "torch": "2.11.0+cu130", "python": "3.12.3", "date": "2026-11-25 10:00 UTC"},
    "steps": {
        "cuda_tests": {
            "title": "CUDA tests", "status": "failed", "seconds": 80.2, "command": "pytest -m cuda tests/cuda",
            "error": "exit status 1", "tail": "E   AssertionError: tokens differ in row 3",
            "junit": {"counts": {"passed": 11, "failed": 1, "error": 0, "skipped": 2, "total": 14},
                      "tests": [{"name": "tests.cuda.test_graphs::test_same_tokens", "outcome": "failed",
                                 "seconds": 4.5, "message": "tokens differ in row 3"}]},
        },
        "gpu_step": {"title": "decoder step", "status": "timed out", "seconds": 180.0, "command": "python gpu_step.py",
                     "error": "stopped after 180 s", "tail": "capturing graphs for 256 rows"},
        "load": {"title": "served over HTTP", "status": "passed", "seconds": 200.1, "command": "python bench/load.py",
                 "figures": {"levels": [{"concurrency": 1, "sent_s": 95.1, "p50_ms": 9.9},
                                        {"concurrency": 256, "sent_s": 4012.5, "p50_ms": 60.2}],
                             "in_process_batch": {"batch": 256, "sent_s": 5150.0},
                             "c256_over_in_process_b256": 0.78, "outputs": list(range(100))}},
        "peers": {"title": "peers", "status": "skipped"},
    },
}  # fmt: skip


def test_the_summary_names_the_gpu_the_ratios_the_test_counts_and_each_failure():
    md = render_markdown(RESULTS)
    assert md.startswith("# GPU check: NVIDIA H100 80GB HBM3\n")
    assert "| c256_over_in_process_b256 | 0.78 |" in md
    assert "11 passed, 1 failed, 0 errors, 2 skipped of 14" in md
    assert "tests.cuda.test_graphs::test_same_tokens" in md and "tokens differ in row 3" in md
    assert "### gpu_step: timed out (stopped after 180 s)" in md and "capturing graphs for 256 rows" in md
    assert "| 256 | 4,012.5 | 60.2 |" in md, "the load levels as one table"
    assert "100 values" in md and "| 99 |" not in md, "a long list is shown by its length"
    assert "### peers" not in md, "a skipped step is no failure"
    assert json.loads(json.dumps(RESULTS)) == RESULTS, "the results are plain JSON"


def test_render_is_pure_and_copes_with_nothing_run():
    assert render_markdown(RESULTS) == render_markdown(RESULTS)
    assert render_markdown({}).startswith("# GPU check: unknown GPU")


def test_the_figures_are_the_last_json_line():
    out = 'loading\n{"ready": true}\n{"rounds": 3, "ratio": 1.2}\nnot json {\n{broken\ndone\n'
    assert last_json(out) == {"rounds": 3, "ratio": 1.2}
    assert last_json("[1, 2]\n") == [1, 2] and last_json("nothing\n") is None


def test_junit_counts_and_durations(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="3">'
        '<testcase classname="tests.cuda.test_a" name="test_ok" time="1.5"/>'
        '<testcase classname="tests.cuda.test_a" name="test_bad" time="0.2"><failure message="boom">tb</failure></testcase>'
        '<testcase classname="tests.cuda.test_b" name="test_skip" time="0"><skipped message="no bf16"/></testcase>'
        "</testsuite></testsuites>"
    )
    got = read_junit(xml)
    assert got["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1, "total": 3}
    assert got["tests"][0] == {"name": "tests.cuda.test_a::test_ok", "outcome": "passed", "seconds": 1.5, "message": ""}
    assert got["tests"][1]["message"] == "boom"


def test_a_failing_or_overrunning_step_is_recorded_with_its_output(tmp_path):
    py = sys.executable
    failed = run_step(Step("f", "bench", [py, "-c", "print('boom'); raise SystemExit(3)"], 30, "f"), tmp_path, {})
    assert failed["status"] == "failed" and failed["returncode"] == 3 and "boom" in failed["tail"]
    slow = run_step(Step("s", "bench", [py, "-c", "print('started', flush=True); import time; time.sleep(60)"], 1,
                         "s"), tmp_path, {})  # fmt: skip
    assert slow["status"] == "timed out" and "started" in slow["tail"] and slow["seconds"] < 30
    fine = run_step(Step("ok", "bench", [py, "-c", "print('{\"x_over_y\": 2.0}')"], 30, "ok"), tmp_path, {})
    assert fine["status"] == "passed" and fine["figures"] == {"x_over_y": 2.0} and "tail" not in fine
    silent = run_step(Step("q", "bench", [py, "-c", "pass"], 30, "q"), tmp_path, {})
    assert silent["status"] == "failed" and silent["error"] == "printed no JSON line"
    missing = run_step(Step("m", "bench", [str(tmp_path / "nope")], 30, "m"), tmp_path, {})
    assert missing["status"] == "failed" and "could not start" in missing["error"]


def test_skipping_every_step_keeps_an_earlier_runs_results(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "test_2016_flickr.en.gz").write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "gpu-check.json").write_text(json.dumps(RESULTS))
    cmd = [
        sys.executable,
        "bench/gpu.py",
        "--out",
        str(tmp_path / "out"),
        "--data",
        str(data),
        "--skip",
        "tests,bench,load",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr  # the earlier run's failed steps still count
    results = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert results["steps"]["load"]["figures"]["c256_over_in_process_b256"] == 0.78
    assert results["steps"]["load"]["earlier"] == "2026-11-25 10:00 UTC"
    assert results["steps"]["peers_opus_shape"]["status"] == "skipped"
    assert "From an earlier run (2026-11-25 10:00 UTC)" in (tmp_path / "out" / "gpu-check.md").read_text()


def test_gpu_refuses_unknown_groups_and_a_missing_test_set(tmp_path):
    cmd = [sys.executable, "bench/gpu.py", "--out", str(tmp_path), "--data", str(tmp_path)]
    no_data = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert no_data.returncode == 2 and "test_2016_flickr.en.gz" in no_data.stderr
    bad = subprocess.run([*cmd, "--skip", "bench,lunch"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "lunch" in bad.stderr


def test_load_on_cuda_decodes_in_process_at_the_top_level_and_leaves_ctranslate2_out(monkeypatch):
    pretend_a_gpu(monkeypatch)
    args, levels, batch, settings = parse_args(["--src", "x", "--device", "cuda", "--dtype", "float16",
                                                "--levels", "1,32,512"])  # fmt: skip
    assert (levels, batch, args.ct2_rounds) == ([1, 32, 512], 512, 0)
    assert settings == {
        "NMT_DEVICE": "cuda", "NMT_DTYPE": "float16", "NMT_MAX_QUEUE": "512", "NMT_QUANTIZE": "none"
    }  # fmt: skip


def test_load_on_the_cpu_is_as_before():
    args, levels, batch, settings = parse_args(["--src", "x"])
    assert (levels, batch, args.ct2_rounds) == ([1, 8, 32, 64], 0, 3)
    assert settings == {
        "NMT_DEVICE": "cpu", "NMT_DTYPE": "float32", "NMT_MAX_QUEUE": "256", "NMT_QUANTIZE": "none"
    }  # fmt: skip
    assert parse_args(["--src", "x", "--in-process-batch", "8"])[2] == 8


def test_the_load_group_ends_under_mps_where_the_driver_has_it(tmp_path):
    steps = {s.name: s for s in plan(tmp_path, tmp_path, quick=False)}
    mps = [s for s in steps.values() if "--mps" in s.command]
    assert [s.name for s in mps] == ["load_mps", "load_documents_mps"] and {s.group for s in mps} == {"load"}
    assert list(steps)[-2:] == ["load_mps", "load_documents_mps"]  # after the load without MPS
    documents = steps["load_documents_mps"].command
    assert documents[documents.index("--documents") + 1] == "16" and documents[documents.index("--levels") + 1] == "16"
    assert documents[documents.index("--in-process-batch") + 1] == "256"  # 16 x 16 in flight, as the others' 256
    for step in mps:
        assert unavailable(step, mps=True) is None
        assert "no nvidia-cuda-mps-control" in unavailable(step, mps=False)
    assert all(unavailable(s, mps=False) is None for s in steps.values() if s not in mps)
    quick = {s.name: s for s in plan(tmp_path, tmp_path, quick=True)}
    assert quick["load_mps"].timeout < steps["load_mps"].timeout and "300" in quick["load_mps"].command


def test_the_load_group_serves_concurrency_256_from_front_ends_apart_from_the_engine_without_mps(tmp_path):
    """Issue #60's GPU goal: concurrency 256 through NMT_FRONTENDS against in-process batch 256, no MPS."""
    steps = {s.name: s for s in plan(tmp_path, tmp_path, quick=False)}
    command = steps["load_frontends"].command
    assert steps["load_frontends"].group == "load" and "--mps" not in command
    assert command[command.index("--levels") + 1] == "256"  # in-process batch 256 by default on CUDA (load.py)
    assert command[command.index("--frontends") + 1] == "1,4,8"
    assert parse_args(["--src", "x", "--frontends", "1,4,8"])[0].frontends == [1, 4, 8]
    assert list(steps).index("load_frontends") < list(steps).index("load_mps")
