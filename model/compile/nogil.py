"""The compiled graphs run with the interpreter's lock (GIL) released, as each eager ATen op runs.

AOTInductor's Python binding of `AOTIModelContainerRunnerCpu.run` holds the GIL for the whole run of a graph
(pytorch/pytorch#197516). While one engine's compiled step runs, no other thread of the process runs Python: the
event loop waits for the step to end before it can answer a request, and with several models (`NMT_MODELS`) each
engine waits for the others' steps before it starts its own, so two busy compiled models take turns on the cores
(docs/performance.md). `run` calls the same runner from a C++ extension of a few lines that releases the GIL first.

The extension is built once for each environment (torch, Python, this source) by torch's extension builder, in a
child process (a C++ compiler, which building the graphs needs anyway, and ninja, a dependency), in under a minute on
two cores; it goes into TORCH_EXTENSIONS_DIR when that is set (torch's own place for such extensions), else beside
the graphs' packages. Until it is there, or where it cannot be built (with one warning), the graphs run through
AOTInductor's own binding.

    want(True)               # NMT_COMPILE_RELEASE_GIL (the default)
    ensure(directory)        # build (or find) and load the extension: once a process, blocking
    run(runner, inputs)      # the runner's run(inputs), the GIL released while it runs
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from model.workspace import Workspace

log = logging.getLogger("model.compile")
DIRECTORY = "nmt-serve-nogil"  # under the graphs' cache directory, unless TORCH_EXTENSIONS_DIR is set
BUILD_TIMEOUT_S = 900

SOURCE = r"""
#include <torch/csrc/inductor/aoti_runner/model_container_runner_cpu.h>
#include <torch/csrc/utils/pybind.h>

// The runner's run, the GIL released for its length; the tensors' reference counts are atomic, and pybind11 takes
// the GIL back before it turns the outputs into Python objects.
static std::vector<at::Tensor> run(
    torch::inductor::AOTIModelContainerRunnerCpu& runner, const std::vector<at::Tensor>& inputs) {
  pybind11::gil_scoped_release released;
  return runner.run(inputs);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("run", &run, "AOTIModelContainerRunnerCpu.run(inputs) with the GIL released");
}
"""

# The child process: torch's JIT extension builder (ninja and the C++ compiler), into the directory it is given.
_BUILD = """
import sys
from torch.utils.cpp_extension import load_inline
name, directory = sys.argv[1:]
load_inline(name, cpp_sources=[sys.stdin.read()], build_directory=directory, extra_cflags=["-O2"])
"""

_lock = threading.Lock()
_loaded: Callable | None = None  # the extension's run, once loaded
_tried = False
_wanted = True  # NMT_COMPILE_RELEASE_GIL
_run: Callable | None = None  # _loaded where wanted


def run(runner, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """`runner.run(inputs)`, with the GIL released while the graph runs once `ensure` has loaded the extension."""
    return runner.run(inputs) if _run is None else _run(runner, inputs)


def released() -> bool:
    """Whether graphs run with the GIL released (the extension is loaded, and wanted)."""
    return _run is not None


def want(release: bool) -> None:
    """Whether to release the GIL (NMT_COMPILE_RELEASE_GIL): False runs every graph through AOTInductor's own binding
    from its next call, and `ensure` builds nothing; True again, through the extension once `ensure` has loaded it."""
    global _wanted, _run
    with _lock:
        _wanted = release
        _run = _loaded if release else None


def name() -> str:
    """The extension's module name: one for each torch build, Python version and source."""
    key = "\0".join((SOURCE, torch.__version__, str(torch.version.git_version), sys.version, sys.platform))
    return "nmt_serve_nogil_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def where(directory: Path) -> Path:
    """The extension's library: under TORCH_EXTENSIONS_DIR when set, else under `directory`."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return (Path(root) if root else Path(directory) / DIRECTORY) / f"{name()}.so"


def ensure(directory: Path, building: Callable[[], None] | None = None) -> bool:
    """Load the extension, building it first where it is not there yet (once a process; blocking: under a minute;
    `building` is called before a build). False, with one warning, where it cannot be built or loaded: graphs then
    run holding the GIL."""
    global _loaded, _run, _tried
    with _lock:
        if _loaded is not None or _tried or not _wanted:
            return _run is not None
        _tried = True
        library = where(directory)
        try:
            if not library.exists():
                library.parent.mkdir(parents=True, exist_ok=True)
                with _exclusive(library.parent / f".{name()}.lock"):  # another process building it: wait for it
                    if not library.exists():
                        if building is not None:
                            building()
                        _build(library)
            _loaded = _run = _load(library).run
        except Exception as e:  # noqa: BLE001 - without it the graphs still run, holding the GIL
            log.warning("the compiled graphs run holding the GIL (%s): each of them stops every other thread's Python "
                        "while it runs", e)  # fmt: skip
            return False
        return True


@contextlib.contextmanager
def _exclusive(path: Path):
    """An exclusive lock on the file at `path` between processes (where the system has flock)."""
    with open(path, "w") as f:
        try:
            import fcntl
        except ImportError:  # Windows: two servers building at once each build, and one library wins
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _build(library: Path) -> None:
    """Build the extension in a child process, in a directory of its own, and move its library into place whole: a
    build killed halfway leaves no library behind, and its directory is removed by the next build beside it."""
    env = dict(os.environ)
    try:
        import ninja  # the build's ninja: from the environment's package, wherever PATH points

        env["PATH"] = ninja.BIN_DIR + os.pathsep + env.get("PATH", "")
    except ImportError:
        pass
    with Workspace(library.parent, ".build-") as build:
        done = subprocess.run(
            [sys.executable, "-c", _BUILD, name(), build], input=SOURCE, env=env, capture_output=True, text=True,
            timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            found = (line for line in lines if "error:" in line or "not found" in line)  # the compiler's, the shell's
            why = next(found, lines[-1] if lines else done.returncode)
            raise RuntimeError(f"building its C++ extension failed: {why}")
        os.replace(Path(build) / f"{name()}.so", library)


def _load(library: Path):
    spec = importlib.util.spec_from_file_location(name(), library)
    if spec is None or spec.loader is None:
        raise ImportError(f"{library} is not a Python extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
