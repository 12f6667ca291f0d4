"""What a package is found by and what it was built for.

A package is found by the weights (`weights_digest`, its directory's name) and the graph (its rows, the cache's
shape, the dtype, the screen: its file's name), and records what it was built for (`environment`): torch's version,
the device and the CPU's features (or the GPU), the thread count Inductor wrote into the kernels, and the code the
graphs are traced from. One built for anything else is ignored with a warning and built again (model/compile/store.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import platform
from functools import cache as memoized
from pathlib import Path

import torch

from model.cpu import cpu_info
from model.transformer import Transformer

log = logging.getLogger("model.compile")  # one logger for the package
FORMAT = "1"  # of the packages' metadata: a package of another format is built again
SOURCES = (  # the code the graphs are traced from and built by, relative to model/: its digest is in the metadata
    "transformer.py", "layers.py", "screen.py", "quantize.py", "compile/__init__.py", "compile/builders.py",
    "compile/choice.py", "compile/graphs.py", "compile/identity.py", "compile/nogil.py", "compile/runtime.py",
    "compile/shared.py", "compile/store.py",
)  # fmt: skip


@memoized
def _code_digest() -> str:
    here = Path(__file__).parents[1]  # model/
    return hashlib.sha256(b"".join((here / f).read_bytes() for f in SOURCES)).hexdigest()[:16]


def weights_digest(model: Transformer) -> str:
    """A digest of the model's configuration and weights (what a package's directory is named by)."""
    h = hashlib.sha256(json.dumps(model.config.__dict__, sort_keys=True, default=str).encode())
    for name, t in sorted(model.state_dict(keep_vars=False).items()):
        h.update(name.encode())
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def cpu_features() -> str:
    """The CPU's model name and a digest of its feature flags (what Inductor's C++ kernels are built for)."""
    cpu = cpu_info()
    model, flags = cpu.model or platform.processor() or platform.machine(), " ".join(sorted(cpu.flags))
    return f"{model} [{hashlib.sha256(flags.encode()).hexdigest()[:12]}]"


def environment(device: torch.device) -> dict[str, str]:
    """What a package was built for, beside its graph: a package is used only where all of it matches."""
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        where = f"{p.name} (sm_{p.major}{p.minor}), CUDA {torch.version.cuda}"
    else:  # the vector ISA Inductor builds its kernels for: ATEN_CPU_CAPABILITY can lower it below the CPU's best
        where = f"{cpu_features()}, {vector_isa() or 'scalar'}"
    return {
        "format": FORMAT, "torch": f"{torch.__version__} ({torch.version.git_version[:12]})",
        "device": f"{device.type}: {where}", "threads": str(torch.get_num_threads()), "code": _code_digest(),
    }  # fmt: skip


def vector_isa() -> str:
    """The vector instructions Inductor builds CPU kernels with ("avx512 avx512_vnni", "avx2", ...; "" for none).
    Inductor finds them by building a probe library per ISA in its cache and loading it; a server killed while one
    was being written leaves it broken, and from then on every kernel built from that cache uses narrower vectors or
    none, silently (up to several times slower). So where a probe fails for an ISA the CPU's flags list, the probes'
    libraries are removed and built again (a probe that fails for another reason costs a few seconds a start)."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    flags = cpu_vec_isa.x86_isa_checker() if platform.machine() in ("x86_64", "AMD64") else []
    candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list if set(str(isa).split()) <= set(flags)]
    if set(map(str, candidates)) <= set(map(str, cpu_vec_isa.valid_vec_isa_list())):
        return str(cpu_vec_isa.pick_vec_isa() or "")
    failed = sorted(set(map(str, candidates)) - set(map(str, cpu_vec_isa.valid_vec_isa_list())))
    classes = [cpu_vec_isa.VecISA, *_subclasses(cpu_vec_isa.VecISA)]
    probes = {v for c in classes for k, v in vars(c).items() if k.endswith("_code") and isinstance(v, str)}
    removed = []
    for source in Path(cache_dir()).glob("*/*.cpp"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if source.read_text() in probes:
                removed += [built for built in source.parent.glob(f"{source.stem}.*") if built.suffix != ".cpp"]
    for built in removed:
        built.unlink(missing_ok=True)
    for c in classes:  # the probes' results are cached per process
        for value in vars(c).values():
            if hasattr(value, "cache_clear"):
                value.cache_clear()
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    isa = cpu_vec_isa.pick_vec_isa()
    log.warning(
        "Inductor's probes for %s failed on a CPU that has them: %d probe libraries in %s (left broken by a build "
        "killed while writing them?) were removed and the probes run again; now using %s", ", ".join(failed),
        len(removed), cache_dir(), str(isa) if isa else "none: the compiled kernels will be scalar",
    )  # fmt: skip
    return str(isa) if isa else ""


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]
