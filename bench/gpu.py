"""The GPU check: the CUDA tests, the GPU benchmarks and a load round against a live server, one after another.

    python bench/gpu.py --out bench/out/gpu [--data DIR] [--quick] [--skip tests,bench,load]

scripts/gpu-check.sh installs the project and runs this. Each step is a subprocess of this Python with a time limit
(about 20 minutes in all on an H100; --quick about half): a step that fails or runs out of time is recorded with the
tail of its output, and the next one still runs. The steps:

- tests: `pytest -m cuda tests/cuda`, read back from its JUnit XML (counts, each test's outcome and seconds);
- bench: bench/gpu_step.py, and bench/peers.py on CUDA for the bundled model and an OPUS-MT-shaped one, each read
  from the last JSON line it prints;
- load: bench/load.py on CUDA at concurrency 1, 32 and 256, against in-process decoding at batch 1 and 256; then
  concurrency 256 with 2, 4 and 8 server workers (NMT_WORKERS); then concurrency 256 from one process and from 1, 4
  and 8 HTTP front-ends apart from one engine process (NMT_FRONTENDS, no MPS); then, where the driver has NVIDIA's MPS
  (nvidia-cuda-mps-control), concurrency 256 with 1, 4 and 8 workers under it, and sixteen sentences a request (256
  in flight) with 4 and 8 workers under it, each against in-process batch 256.

Writes OUT/gpu-check.json (the GPU, driver, CUDA, torch and Python versions, the date, every step's figures),
OUT/gpu-check.md (the same as tables, for reading) and each step's whole output in OUT/logs/. With --skip, the
skipped steps keep their results from an earlier OUT/gpu-check.json, so the steps can run in separate calls.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("tests", "bench", "load")
TEST_FILE = "test_2016_flickr.en.gz"
TAIL_CHARS = 4000  # of a failed step's output, kept in the JSON


@dataclass
class Step:
    name: str
    group: str  # what --skip names
    command: list[str]
    timeout: float  # seconds
    title: str


def plan(out: Path, data: Path, quick: bool) -> list[Step]:
    """The steps in order, with their time limits (quick: fewer sentences and rounds, tighter limits)."""
    py, src = sys.executable, str(data / TEST_FILE)
    less = ["--limit", "300"] if quick else []
    rounds = ["--rounds", "1"] if quick else []
    return [
        Step("cuda_tests", "tests",
             [py, "-m", "pytest", "-m", "cuda", "tests/cuda", "-p", "no:cacheprovider", "-q",
              f"--junitxml={out / 'cuda-tests.xml'}", "-o", "junit_family=xunit1"],  # xunit1 keeps record_property
             240 if quick else 420, "CUDA tests"),
        Step("gpu_step", "bench", [py, "bench/gpu_step.py", "--src", src], 120 if quick else 180,
             "decoder step, eager and CUDA graphs (bench/gpu_step.py)"),
        Step("peers", "bench", [py, "bench/peers.py", "--device", "cuda", "--src", src, *less, *rounds],
             120 if quick else 240, "bundled model against its peers (bench/peers.py)"),
        Step("peers_opus_shape", "bench",
             [py, "bench/peers.py", "--device", "cuda", "--model", "opus-shape", "--src", src, *less, *rounds],
             120 if quick else 360, "OPUS-MT-shaped model against its peers (bench/peers.py --model opus-shape)"),
        Step("load", "load",
             [py, "bench/load.py", "--device", "cuda", "--levels", "1,32,256", "--src", src, "--pause-ms", "0",
              "--workers", "1,2,4,8", "--client-procs", "4", "--repeat", "1" if quick else "3", *less],
             180 if quick else 360, "served over HTTP (bench/load.py)"),
        Step("load_frontends", "load",
             [py, "bench/load.py", "--device", "cuda", "--levels", "256", "--src", src, "--pause-ms", "0",
              "--frontends", "1,4,8", "--client-procs", "4", "--repeat", "1" if quick else "3", *less],
             240 if quick else 420, "served by 1, 4 and 8 front-ends apart from one engine process (NMT_FRONTENDS)"),
        Step("load_mps", "load",
             [py, "bench/load.py", "--device", "cuda", "--mps", "--levels", "256", "--src", src, "--pause-ms", "0",
              "--workers", "1,4,8", "--client-procs", "4", "--repeat", "1" if quick else "3", *less],
             180 if quick else 300, "served under NVIDIA MPS, 1, 4 and 8 workers (bench/load.py --mps)"),
        Step("load_documents_mps", "load",
             [py, "bench/load.py", "--device", "cuda", "--mps", "--documents", "16", "--levels", "16", "--src", src,
              "--pause-ms", "0", "--workers", "4,8", "--repeat", "1" if quick else "4", "--in-process-batch", "256",
              *less],
             120 if quick else 180, "sixteen sentences a request under NVIDIA MPS (bench/load.py --mps --documents 16)"),
    ]  # fmt: skip


def unavailable(step: Step, mps: bool) -> str | None:
    """Why this host cannot run the step (a step under MPS where the driver has no nvidia-cuda-mps-control), or None."""
    if "--mps" in step.command and not mps:
        return "no nvidia-cuda-mps-control on the PATH: NVIDIA's Multi-Process Service is not installed here"
    return None


# ---- running ---------------------------------------------------------------------------------------------------


def last_json(output: str) -> dict | list | None:
    """The last line of output that starts with '{' (or '[') and parses as JSON."""
    for line in reversed(output.splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def read_junit(path: Path) -> dict:
    """pytest's JUnit XML as counts and one row per test (outcome, seconds, the message of a failure)."""
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            if (node := case.find(tag)) is not None:
                outcome, message = {"failure": "failed"}.get(tag, tag), node.get("message") or ""
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        tests.append({"name": name, "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message})
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": {**counts, "total": len(tests)}, "tests": tests}


def run_step(step: Step, logs: Path, env: dict[str, str]) -> dict:
    """Run one step to its end or its time limit (then its whole process group is killed); never raises."""
    log = logs / f"{step.name}.log"
    result = {"title": step.title, "command": " ".join(step.command), "timeout_s": step.timeout, "log": str(log)}
    t0 = time.monotonic()
    try:
        with log.open("w") as f:
            proc = subprocess.Popen(step.command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    process_group=0)  # fmt: skip
            try:
                rc = proc.wait(timeout=step.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the step's children too (load.py's server)
                proc.wait()
                rc = None
    except OSError as e:
        result.update(status="failed", error=f"could not start: {e}", seconds=0.0)
        return result
    output = log.read_text(errors="replace")
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["returncode"] = rc
    if rc is None:
        result["status"], result["error"] = "timed out", f"stopped after {step.timeout:.0f} s"
    elif rc != 0:
        result["status"], result["error"] = "failed", f"exit status {rc}"
    else:
        result["status"] = "passed"
    if result["status"] != "passed":
        result["tail"] = output[-TAIL_CHARS:]
    figures = last_json(output)
    if figures is not None:
        result["figures"] = figures
    elif step.group != "tests" and result["status"] == "passed":
        result["status"], result["error"] = "failed", "printed no JSON line"
        result["tail"] = output[-TAIL_CHARS:]
    return result


def nvidia_smi() -> dict:
    try:
        line = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.splitlines()[0]  # fmt: skip
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        return {"nvidia_smi_error": str(e)}
    name, driver, memory = (x.strip() for x in line.split(","))
    return {"gpu": name, "driver": driver, "gpu_memory": memory}


def environment() -> dict:
    """The GPU (nvidia-smi), its driver, torch's CUDA, torch, Python, the date."""
    import torch

    env = {"gpu": None, **nvidia_smi()}
    if not env["gpu"] and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return {
        **env,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


# ---- rendering (pure: tested on the CPU) -----------------------------------------------------------------------

RATIO = re.compile(r"ratio|_over_|_vs_|speedup")  # the figures the summary lists together
LONGEST_LIST = 20  # a longer list is shown as its length


def flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, scalar) for every number, string or bool in nested dicts and lists."""
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list) and len(value) > LONGEST_LIST:  # outputs, per-sentence figures: in the JSON only
        return [(prefix, f"{len(value)} values")]
    if isinstance(value, list):
        return [kv for i, v in enumerate(value) for kv in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value)]


def cell(value) -> str:
    if isinstance(value, float):
        value = f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
        "",
    ]


def figures_tables(figures) -> list[str]:
    """A list of same-keyed dicts (rows, such as load levels) as one table; everything else as key | value."""
    lines, rest = [], {}
    items = figures.items() if isinstance(figures, dict) else [("rows", figures)]
    for key, value in items:
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            header = list(dict.fromkeys(k for v in value for k in v))
            scalar = [k for k in header if not isinstance(value[0].get(k), (dict, list))]
            lines += [f"{key}:", "", *table(scalar, [[v.get(k, "") for k in scalar] for v in value])]
        else:
            rest[key] = value
    pairs = flatten(rest)
    if pairs:
        lines += table(["figure", "value"], [[k, v] for k, v in pairs])
    return lines


def render_markdown(results: dict) -> str:
    """The results as a Markdown page: environment, steps, test counts, every ratio, figures, failures."""
    env, steps = results.get("environment", {}), results.get("steps", {})
    out = [f"# GPU check: {env.get('gpu') or 'unknown GPU'}", ""]
    out += table(["", ""], [[k, v] for k, v in env.items() if v is not None])
    out += ["## Steps", ""]
    out += table(
        ["step", "status", "seconds", "command"],
        [[name, s.get("status", "?"), s.get("seconds", ""), f"`{s.get('command', '')}`"] for name, s in steps.items()],
    )
    tests = steps.get("cuda_tests", {})
    if "junit" in tests:
        c = tests["junit"]["counts"]
        out += ["## CUDA tests", "", f"{c['passed']} passed, {c['failed']} failed, {c['error']} errors, "
                f"{c['skipped']} skipped of {c['total']}.", ""]  # fmt: skip
        bad = [t for t in tests["junit"]["tests"] if t["outcome"] in ("failed", "error")]
        if bad:
            out += table(["failed test", "message"], [[t["name"], t["message"][:300]] for t in bad])
        slow = sorted(tests["junit"]["tests"], key=lambda t: -t["seconds"])[:10]
        out += table(["test", "outcome", "seconds"], [[t["name"], t["outcome"], t["seconds"]] for t in slow])
    ratios = [
        [name, key, value]
        for name, s in steps.items()
        for key, value in flatten(s.get("figures", {}))
        if RATIO.search(key.rsplit(".", 1)[-1]) and isinstance(value, (int, float)) and not isinstance(value, bool)
    ]
    if ratios:
        out += ["## Ratios", "", *table(["step", "figure", "value"], ratios)]
    for name, s in steps.items():
        if s.get("figures") not in (None, {}, []):
            out += [f"## {s.get('title', name)}", ""]
            if s.get("earlier"):
                out += [f"From an earlier run ({s['earlier']}).", ""]
            out += figures_tables(s["figures"])
    failed = {name: s for name, s in steps.items() if s.get("status") not in ("passed", "skipped")}
    if failed:
        out += ["## Failures", ""]
        for name, s in failed.items():
            out += [f"### {name}: {s.get('status')} ({s.get('error', '')})", "", "```text",
                    (s.get("tail") or "").rstrip(), "```", ""]  # fmt: skip
    return "\n".join(out).rstrip() + "\n"


def write_results(results: dict, out: Path) -> None:
    (out / "gpu-check.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "gpu-check.md").write_text(render_markdown(results))


# ---- main --------------------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for gpu-check.json, gpu-check.md and logs/")
    default_data = os.environ.get("NMT_TEST_DATA") or str(ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--data", default=default_data, help=f"the directory holding {TEST_FILE} (default: $NMT_TEST_DATA "
                   "or ../shared/data/multi30k)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="300 sentences, one round, tighter time limits")
    p.add_argument("--skip", default="", help=f"comma-separated groups to leave out: {', '.join(GROUPS)}")
    args = p.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(GROUPS):
        p.error(f"--skip {args.skip}: unknown {', '.join(sorted(skip - set(GROUPS)))}; use {', '.join(GROUPS)}")
    out, data = Path(args.out).resolve(), Path(args.data).resolve()
    if not (data / TEST_FILE).is_file():
        p.error(f"--data {data}: no {TEST_FILE} there (Multi30k's test2016); pass --data or set NMT_TEST_DATA")
    (out / "logs").mkdir(parents=True, exist_ok=True)

    earlier = {}
    if skip and (out / "gpu-check.json").is_file():
        previous = json.loads((out / "gpu-check.json").read_text())
        earlier = {k: {**v, "earlier": v.get("earlier") or previous["environment"].get("date")}
                   for k, v in previous.get("steps", {}).items()}  # fmt: skip
    scripts = sysconfig.get_path("scripts")  # nmt-serve, for load.py, from this Python's environment
    env = {**os.environ, "NMT_TEST_DATA": str(data), "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    results = {"environment": environment(), "quick": args.quick, "data": str(data), "steps": {}}
    mps = shutil.which("nvidia-cuda-mps-control") is not None
    for step in plan(out, data, args.quick):
        if step.group in skip:
            results["steps"][step.name] = earlier.get(step.name) or {"title": step.title, "status": "skipped"}
            continue
        if (why := unavailable(step, mps)) is not None:
            results["steps"][step.name] = {"title": step.title, "status": "skipped", "error": why}
            continue
        print(f"gpu.py: {step.name}: {' '.join(step.command)} (limit {step.timeout:.0f} s)", flush=True)
        if step.group == "tests":
            (out / "cuda-tests.xml").unlink(missing_ok=True)  # not an earlier run's
        result = run_step(step, out / "logs", env)
        if step.group == "tests" and (out / "cuda-tests.xml").is_file():
            try:
                result["junit"] = read_junit(out / "cuda-tests.xml")
            except ET.ParseError as e:
                result["junit_error"] = str(e)
        results["steps"][step.name] = result
        print(f"gpu.py: {step.name}: {result['status']} in {result.get('seconds', 0)} s", flush=True)
        write_results(results, out)  # what is done so far survives a later step's crash
    write_results(results, out)
    print(f"gpu.py: wrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'}")
    sys.exit(0 if all(s.get("status") in ("passed", "skipped") for s in results["steps"].values()) else 1)


if __name__ == "__main__":
    main()
