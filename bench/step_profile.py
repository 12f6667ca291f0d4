"""Where a large-row decoder step spends its time on this CPU, and what other GEMM choices would give.

    python bench/step_profile.py [--isa avx2] [--rows 32] [--windows 8,20,40]

Builds the greedy step graph nmt-serve runs from LARGE_ROWS rows on (model/compile/: AOTInductor, frozen
weights) in several ways and times a step of --rows rows, the variants taking turns (best of --rounds):

  default    what nmt-serve builds: Inductor's default mode; float32 linears run oneDNN's packed GEMMs
  mkl        weight pre-packing off: the linears run aten's mm/addmm, that is MKL's sgemm
  autotune   max-autotune: Inductor benchmarks its C++ GEMM templates against oneDNN per linear
  mkl-autotune  max-autotune with pre-packing off: its C++ GEMM templates against MKL's sgemm per linear

Then one step of the default graph is profiled kernel by kernel (Inductor's kernel profiling on) and its time split
into the GEMMs (oneDNN's linears), attention (the fused softmax/bmm kernels), the log-probability (logsumexp over the
vocabulary) and the rest; and the output projection alone ((rows, D) x (D, V) and its argmax) is timed in float32
(oneDNN, MKL) and in int8 (model/quantize.py's Int8Linear, oneDNN's qlinear): what a screen in int8, as the logit
screen does in bfloat16 (model/screen.py), could save at most. --isa avx2 keeps every library to AVX2 (as
bench/peers.py does) on a CPU that has more. The model is the bundled checkpoint unless --model-dir says otherwise;
the graphs go to a temporary directory (--keep DIR keeps them there).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.peers import ISA_LIMITS, keep_to

VARIANTS = {
    "default": {},
    "mkl": {"cpp.weight_prepack": False},
    "autotune": {"max_autotune": True, "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False},
    "mkl-autotune": {"max_autotune": True, "cpp.weight_prepack": False, "autotune_num_choices_displayed": 0,
                     "max_autotune_report_choices_stats": False},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(ROOT / "checkpoints" / "multi30k-en-de"))
    p.add_argument("--isa", choices=sorted(ISA_LIMITS), help="keep every library to these instructions")
    p.add_argument("--rows", type=int, default=32, help="rows of the timed step (at least model/compile/'s LARGE_ROWS)")
    p.add_argument("--windows", default="8,20,40", help="self-attention windows (cached tokens) to time at")
    p.add_argument("--source", type=int, default=20, help="source tokens the cross-attention reads")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {', '.join(VARIANTS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200, help="steps timed per variant per round")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="build the graphs into this directory and reuse them from there")
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {', '.join(sorted(unknown))}: choose from {', '.join(VARIANTS)}")
    return args


def kernel_kind(name: str) -> str:
    """The part of the step a profiled kernel belongs to."""
    if "linear_pointwise" in name or "qlinear" in name or name.startswith("aoti_torch_cpu_mm"):
        return "GEMMs (linear layers, output projection)"
    if "logsumexp" in name:
        return "log-probability (logsumexp over the vocabulary)"
    if "bmm" in name or "scaled_dot_product" in name:  # Inductor names a fused kernel by the ops it holds
        return "attention (scores, softmax, weighted values)"
    return "the rest (norms, embeddings, residuals, allocation)"


def main() -> None:
    args = parse_args()
    limited = keep_to(args.isa, restart=True)  # before torch does any work
    directory = Path(args.keep or tempfile.mkdtemp(prefix="nmt-step-profile-"))
    directory.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(directory / "inductor"))

    import torch
    import torch.nn.functional as F

    from bench.common import cpu_description
    from model.checkpoint import load_checkpoint
    from model.compile.graphs import LARGE_ROWS, Graph, example_inputs
    from model.decoding import KVCache
    from model.quantize import Int8Linear

    torch.set_num_threads(args.threads)
    cpu = cpu_description() + limited
    print(f"CPU: {cpu}; torch {torch.__version__}, {args.threads} threads", flush=True)
    model, _, _ = load_checkpoint(args.model_dir)
    model.use_screen(False)  # float32's output projection, as on a CPU without bfloat16 matmuls
    windows = [int(w) for w in args.windows.split(",")]
    cache = KVCache(model, args.rows, max(windows) + 1, args.source + 1)
    graph = Graph("greedy_step", min(LARGE_ROWS, args.rows), args.rows, args.rows)

    def build(name: str, module, inputs, dynamic_shapes, configs: dict):
        path = directory / f"{name}.pt2"
        if not path.exists():
            t0 = time.perf_counter()
            with torch.no_grad():
                exported = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=True)
                torch._inductor.aoti_compile_and_package(
                    exported, package_path=str(path), inductor_configs={"freezing": True, **configs}
                )
            print(f"  built {name} in {time.perf_counter() - t0:.0f} s", flush=True)
        return torch._inductor.aoti_load_package(str(path)).loader.boxed_run

    def step_graph(variant: str, extra: dict | None = None, name: str = ""):
        module, inputs, dynamic_shapes = example_inputs(model, cache, graph)
        return build(f"step-{name or variant}", module, inputs, dynamic_shapes, {**VARIANTS[variant], **(extra or {})})

    def best_ms(runs: dict, inputs: list) -> dict[str, float]:
        best = {}
        for _ in range(args.rounds):
            for name, run in runs.items():  # the variants take turns: drift falls on all alike
                for _ in range(10):
                    run(list(inputs))
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    run(list(inputs))
                best[name] = min(best.get(name, float("inf")), (time.perf_counter() - t0) / args.steps * 1e3)
        return best

    torch.manual_seed(0)
    n, s = args.rows, args.source
    cache.kv.normal_()
    cache.cross_kv.normal_()
    cache.src_keep[:n, :s] = True
    cache.tokens[:n] = torch.randint(4, model.config.tgt_vocab_size, (n,))

    def step_inputs(t: int) -> list:
        cache.positions[:n] = t
        return [cache.tokens[:n], cache.positions[:n], cache.kv[:, :, :n, :, :t], cache.cross_kv[:, :, :n, :, :s],
                cache.src_keep[:n, :s]]  # fmt: skip

    print(f"\nthe greedy step, {n} rows, source {s} tokens: ms a step, best of {args.rounds} rounds", flush=True)
    runs = {v: step_graph(v) for v in args.variants.split(",")}
    for t in windows:
        ms = best_ms(runs, step_inputs(t))
        print(f"  window {t:>3}: " + "   ".join(f"{v} {x:.3f}" for v, x in ms.items()), flush=True)

    profiled = step_graph("default", {"cpp.enable_kernel_profile": True}, name="default-profiled")
    inputs = step_inputs(windows[len(windows) // 2])
    for _ in range(10):
        profiled(list(inputs))
    with torch.profiler.profile() as prof:
        for _ in range(args.steps):
            profiled(list(inputs))
    parts: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.key.startswith(("aoti_torch_cpu_", "graph_")) or event.key.startswith("aten::"):
            parts[kernel_kind(event.key)] += event.self_cpu_time_total / args.steps / 1e3
    total = sum(parts.values())
    print(f"\none step of the default graph, window {windows[len(windows) // 2]}, profiled kernel by kernel "
          f"({total:.3f} ms a step with the profiler on):", flush=True)  # fmt: skip
    for kind, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {ms:6.3f} ms  {100 * ms / total:4.1f}%  {kind}", flush=True)

    weight = model.generator_weight.detach()

    class Projection(torch.nn.Module):
        def __init__(self, int8: bool):
            super().__init__()
            self.int8 = Int8Linear(weight, None) if int8 else None
            self.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)

        def forward(self, hidden):
            return (self.int8(hidden) if self.int8 is not None else F.linear(hidden, self.weight)).argmax(-1)

    hidden = (torch.randn(n, weight.size(1)) * 3,)
    rows = {0: torch.export.Dim("rows", min=graph.lo, max=graph.hi)}
    projections = {
        "float32 oneDNN": build("projection-default", Projection(False), hidden, (rows,), {}),
        "float32 MKL": build("projection-mkl", Projection(False), hidden, (rows,), VARIANTS["mkl"]),
        "int8 (qlinear)": build("projection-int8", Projection(True), hidden, (rows,), {}),
    }
    ms = best_ms(projections, list(hidden))
    print(f"\nthe output projection alone, ({n}, {weight.size(1)}) x ({weight.size(1)}, {weight.size(0)}) and its "
          "argmax: " + "   ".join(f"{k} {v:.3f} ms" for k, v in ms.items()), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
