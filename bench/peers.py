"""Our greedy decoding (or beam search, --beam N) against CTranslate2 on the same weights, at batch 1 and 32.

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 100] [--rounds 3]

Converts the checkpoint to CTranslate2 (bench/ct2_convert.py) and decodes the length-sorted sentences
in the same batches with each engine: CT2 float32 and int8; ours compiled (model/compile.py) with the
bfloat16 logit screen where the CPU has bfloat16 matmuls (model/screen.py: float32 greedy's tokens;
what nmt-serve runs by default), ours compiled without it (ours_compiled_fp32), ours eager (float32),
and ours eager with dynamic int8 Linear layers. Each engine
runs in its own child process: two OpenMP runtimes in one process (PyTorch's and CT2's) spin on the
same two cores and slow each other down several-fold. The children load (and compile) one after
another, then take turns: in every round each engine decodes the whole corpus once while the others
wait idle, in a rotating order. The speed of a shared machine drifts by tens of percent within
minutes, so ratios are taken per round, from passes run back to back, and the median is reported
with its range. Checks that CT2 float32 produces our float32 tokens, and prints sentences/s (the
best pass), tokens/s and the ours/CT2 ratios, then one JSON line with every figure.

A model imported with nmt-import (metadata.json's imported_from) is converted for CT2 by CTranslate2's own converter
from the directory it was imported from (ctranslate2.converters.TransformersConverter: its Marian loader), not by
bench/ct2_convert.py, so the race also checks the import against CT2's reading of the same files. Such a model ends a
text at its budget with a forced </s> (force_eos), which CT2 does not do: CT2 gets one token less of budget, so
both generate the same tokens.

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz --beam 4 [--length-penalty 1.0]

With --beam N (N > 1) the race is beam search: ours is model.batch.decode with DecodingOptions(beam_size=N,
length_penalty=P), the RowBatch code the server steps with, on the compiled model (ours_compiled: its full step,
log-probabilities for every token, compiled as the server compiles it) and on the eager one (ours_eager), against
CT2's translate_batch(beam_size=N, length_penalty=P) in the same batches of sources with the same budgets. The
engines are then ct2_fp32, ct2_fp32_dnnl, ours_compiled and ours_eager by default (ct2_int8, ct2_int8_dnnl and
ours_int8 on request; ours_compiled_fp32 does not apply: the logit screen is greedy's). Both score a finished hypothesis
as its summed log-probabilities / length ** P with </s> counted in the length (CT2 drops </s> from the returned tokens
only after scoring), so at any P the two should pick the same tokens; "same tokens" counts the sentences where they do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import corpus_arguments, cpu_description  # noqa: E402

from model.evaluate import max_new_tokens_for  # noqa: E402 - imports torch, runs nothing in it

ENGINES = [
    "ct2_fp32", "ct2_fp32_dnnl", "ct2_int8", "ct2_int8_dnnl", "ours_compiled", "ours_compiled_fp32", "ours_eager",
    "ours_int8",
]  # fmt: skip
BEAM_ENGINES = ["ct2_fp32", "ct2_fp32_dnnl", "ours_compiled", "ours_eager"]  # the default with --beam N > 1
NO_BEAM = ("ours_compiled_fp32",)  # the logit screen is greedy's: with beam search it is ours_compiled
# CTranslate2 runs its GEMMs with MKL by default and with oneDNN under CT2_USE_MKL=0 (the *_dnnl engines); which is
# faster depends on the CPU (MKL ran 10x slower at batch 1 on one AMX Xeon), so both are timed and the faster counts.
BACKEND = {False: "MKL", True: "oneDNN"}
# An engine decodes one batch of source id lists (each ending in </s>) with a budget of new tokens
# and returns, per sentence, the generated ids without </s> and how many tokens it generated (</s> included).
Engine = Callable[[list[list[int]], int], list[tuple[list[int], int]]]


def ours(model, pad_id: int, cache=None) -> Engine:
    from common import pad_batch

    from model.decoding import greedy_decode

    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        hyps = greedy_decode(model, pad_batch(batch, pad_id), budget, cache)
        return [(h.tokens, len(h.logprobs)) for h in hyps]

    return decode


def ours_beam(model, beam_size: int, length_penalty: float, cache=None) -> Engine:
    """model.batch.decode: one batch's sources as beam searches stepped together, the best hypothesis of each."""
    from model.batch import decode as batch_decode
    from model.search import DecodingOptions

    options = DecodingOptions(beam_size=beam_size, length_penalty=length_penalty)

    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        hyps = batch_decode(model, batch, [budget] * len(batch), options, len(batch) * beam_size, cache)
        return [(h[0].tokens, len(h[0].logprobs)) for h in hyps]

    return decode


def ct2(translator, forced_eos: int = 0) -> Engine:
    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        budget -= forced_eos  # our last token would be the forced </s>: CT2 stops one earlier instead
        return [(ids, len(ids) + (len(ids) < budget)) for ids in translator(batch, budget)]  # short = ended by </s>

    return decode


def ct2_engine(name: str, args) -> tuple[Engine, list[list[int]]]:
    """CT2 on the converted model, in a process that never imports torch; the corpus sorted as load_corpus does."""
    from bench.ct2_translator import BeamTranslator, GreedyTranslator
    from model.tokenizer import load_tokenizer, read_lines

    tok = load_tokenizer(args.model_dir)
    forced_eos = int(json.loads((Path(args.model_dir) / "config.json").read_text()).get("force_eos", False))
    sentences = list(read_lines(args.src))
    sentences = sentences[: args.limit] if args.limit else sentences
    encoded = sorted(tok.encode_batch(sentences), key=len)
    compute_type = {"ct2_fp32": "float32", "ct2_int8": "int8"}[name.removesuffix("_dnnl")]
    options = dict(compute_type=compute_type, intra_threads=args.threads, inter_threads=1)
    if args.beam > 1:
        translator = BeamTranslator(args.ct2_dir, tok, args.beam, args.length_penalty, **options)
    else:
        translator = GreedyTranslator(args.ct2_dir, tok, **options)
    return ct2(translator, forced_eos), encoded


def our_engine(name: str, args, max_batch: int) -> tuple[Engine, list[list[int]]]:
    import torch
    from common import load_corpus

    from model.decoding import KVCache

    model, _, encoded = load_corpus(args)
    pad = model.config.source_pad_id
    if name == "ours_int8":
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    if name not in ("ours_compiled", "ours_compiled_fp32"):
        return (ours_beam(model, args.beam, args.length_penalty) if args.beam > 1 else ours(model, pad)), encoded
    from model.compile import compile_model

    # ours_compiled is what nmt-serve runs by default: the output projection screened in bfloat16 where
    # the CPU has bfloat16 matmuls (model/screen.py, the same tokens); ours_compiled_fp32 without the screen
    screened = model.use_screen(name == "ours_compiled" and args.beam == 1)
    print(f"  {name}: logit screen {'on' if screened else 'off'}", file=sys.stderr, flush=True)
    longest = max(map(len, encoded))
    cache = KVCache(model, max_batch * args.beam, max_new_tokens_for(longest) + 1, longest)
    compiled = compile_model(model, cache)
    print(f"  {name}: compiling took {compiled.seconds:.0f} s ({len(compiled.built)} graphs built, "
          f"{len(compiled.loaded)} loaded from {compiled.directory})", file=sys.stderr, flush=True)  # fmt: skip
    if args.beam > 1:
        return ours_beam(model, args.beam, args.length_penalty, cache), encoded
    return ours(model, pad, cache), encoded


def run(engine: Engine, batches: list[list[list[int]]]) -> tuple[float, int, list[list[int]]]:
    """Seconds, generated tokens (</s> included) and the outputs in order."""
    out, tokens = [], 0
    t0 = time.perf_counter()
    for batch in batches:
        for ids, n in engine(batch, max_new_tokens_for(max(map(len, batch)))):
            out.append(ids)
            tokens += n
    return time.perf_counter() - t0, tokens, out


def worker(args) -> None:
    """In a child process: load one engine, warm it up, print {"ready": true}; then for each batch size read from
    stdin, decode the whole corpus once and print {seconds, tokens, outputs} as one JSON line."""
    sizes = list(map(int, args.batch_sizes.split(",")))
    if args.worker.startswith("ct2_"):
        engine, encoded = ct2_engine(args.worker, args)
    else:
        engine, encoded = our_engine(args.worker, args, max(sizes))
    batches = {bs: [encoded[i : i + bs] for i in range(0, len(encoded), bs)] for bs in sizes}
    for bs in sizes:
        run(engine, batches[bs][:2])  # warm-up
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        seconds, tokens, out = run(engine, batches[int(line)])
        print(json.dumps({"seconds": seconds, "tokens": tokens, "outputs": out}), flush=True)


def answer(child: subprocess.Popen) -> dict:
    """The child's next JSON line (libraries may print other lines to stdout)."""
    for line in child.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"the benchmark process exited with {child.wait()}")


def same(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def start_worker(args, name: str, ct2_dir: str) -> subprocess.Popen:
    """One engine in a process of its own (see `worker`), loaded and warmed up for args.batch_sizes."""
    env = {**os.environ, "CT2_USE_MKL": "0"} if name.endswith("_dnnl") else None
    child = subprocess.Popen(
        [sys.executable, __file__, "--model-dir", args.model_dir, "--src", args.src, "--limit", str(args.limit),
         "--threads", str(args.threads), "--batch-sizes", args.batch_sizes, "--ct2-dir", ct2_dir, "--worker", name,
         "--beam", str(args.beam), "--length-penalty", str(args.length_penalty)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        answer(child)  # {"ready": true}
    except BaseException:
        child.kill()
        raise
    return child


def decode_once(child: subprocess.Popen, batch_size: int) -> dict:
    """Have a started worker decode the whole corpus once at `batch_size`: {seconds, tokens, outputs}."""
    child.stdin.write(f"{batch_size}\n")
    child.stdin.flush()
    return answer(child)


def stop_worker(child: subprocess.Popen) -> None:
    child.stdin.close()
    child.wait(timeout=60)


def measure(args, names: list[str], sizes: list[int], ct2_dir: str) -> dict[int, dict[str, list[dict]]]:
    """{batch size: {engine: one result per round}}, the engines taking turns in rotating order."""
    children: dict[str, subprocess.Popen] = {}
    try:
        for name in names:  # one at a time: a compile must not share the cores with another engine
            print(f"starting {name} ...", file=sys.stderr, flush=True)
            children[name] = start_worker(args, name, ct2_dir)
        results: dict[int, dict[str, list[dict]]] = {bs: {name: [] for name in names} for bs in sizes}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for bs in sizes:
                for name in order:
                    results[bs][name].append(decode_once(children[name], bs))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        return results
    finally:
        for child in children.values():
            stop_worker(child)


def convert_for_ct2(model_dir: str, ct2_dir: str) -> None:
    """Our checkpoint with bench/ct2_convert.py; an imported Marian model from its source with CT2's own converter."""
    from model.checkpoint import read_metadata

    meta = read_metadata(model_dir)
    source = meta.get("imported_from", {}).get("path")
    if meta.get("architecture") == "marian":
        if not source or not Path(source).is_dir():
            sys.exit(f"{model_dir} was imported from {source or 'the Hub'}: CT2 converts the original directory, pass "
                     "a model imported from a local directory")  # fmt: skip
        import ctranslate2

        print(f"converting {source} with ctranslate2.converters.TransformersConverter", file=sys.stderr, flush=True)
        ctranslate2.converters.TransformersConverter(source).convert(ct2_dir, force=True)
        return
    from bench.ct2_convert import convert
    from model.checkpoint import load_checkpoint

    convert(*load_checkpoint(model_dir)[:2], ct2_dir)


def fastest(passes: dict[str, list[dict]], base: str) -> str | None:
    """Of CT2's two GEMM backends for one compute type (base and base_dnnl), the one with the faster best pass."""
    variants = [n for n in (base, f"{base}_dnnl") if n in passes]
    return min(variants, key=lambda n: min(x["seconds"] for x in passes[n])) if variants else None


def main() -> None:
    p = corpus_arguments(__doc__)
    p.add_argument("--rounds", type=int, default=3, help="passes per engine and batch size, the engines taking turns")
    p.add_argument(
        "--engines", help=f"comma-separated subset of {ENGINES} (default: all; with --beam, {','.join(BEAM_ENGINES)})"
    )
    p.add_argument("--beam", type=int, default=1, help="beam size: 1 races greedy decoding, N > 1 beam search")
    p.add_argument(
        "--length-penalty", type=float, default=1.0, help="with --beam N > 1: score = log-probability / length ** P"
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one engine in this process
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)  # internal: the converted model
    args = p.parse_args()
    if args.worker:
        return worker(args)

    if args.beam < 1:
        p.error("--beam must be at least 1")
    names = args.engines.split(",") if args.engines else BEAM_ENGINES if args.beam > 1 else ENGINES
    if unknown := [n for n in names if n not in ENGINES]:
        p.error(f"unknown engines {unknown}: choose from {ENGINES}")
    if args.beam > 1 and (compiled := [n for n in names if n in NO_BEAM]):
        p.error(
            f"{compiled}: the logit screen is greedy decoding's; beam search runs ours_compiled (or ours_eager, ours_int8)"
        )
    sizes = list(map(int, args.batch_sizes.split(",")))
    decoding = f"beam {args.beam}, length penalty {args.length_penalty:g}" if args.beam > 1 else "greedy"
    cpu = cpu_description()
    print(f"CPU: {cpu}", flush=True)
    print(f"decoding: {decoding}", flush=True)
    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as ct2_dir:
        if any(name.startswith("ct2_") for name in names):
            convert_for_ct2(args.model_dir, ct2_dir)  # float32 weights; int8 is chosen at load time
        results = measure(args, names, sizes, ct2_dir)

    rows = []
    for bs in sizes:
        passes = results[bs]
        best = {name: min(rs, key=lambda x: x["seconds"]) for name, rs in passes.items()}
        n = len(best[names[0]]["outputs"])
        row = {"batch": bs, "sentences": n, "threads": args.threads, "rounds": args.rounds, "cpu": cpu}
        if args.beam > 1:
            row |= {"beam": args.beam, "length_penalty": args.length_penalty}
        for name, x in best.items():
            row[f"{name}_sent_s"] = round(n / x["seconds"], 1)
            row[f"{name}_tok_s"] = round(x["tokens"] / x["seconds"], 1)
        ranges = {}
        faster = {base: fastest(passes, base) for base in ("ct2_fp32", "ct2_int8")}  # the better CT2 backend
        for base, name in faster.items():
            if name:
                row[f"{base}_backend"] = BACKEND[name.endswith("_dnnl")]
        pairs = [("ours_compiled", faster["ct2_fp32"]), ("ours_compiled_fp32", faster["ct2_fp32"]),
                 ("ours_eager", faster["ct2_fp32"]), ("ours_int8", faster["ct2_int8"])]  # fmt: skip
        for mine, theirs in pairs:
            if mine in passes and theirs in passes:  # the same sentences: a speed ratio, per round
                per_round = sorted(t["seconds"] / m["seconds"] for m, t in zip(passes[mine], passes[theirs]))
                row[f"{mine}/{theirs}"] = round(statistics.median(per_round), 2)
                ranges[f"{mine}/{theirs}"] = (per_round[0], per_round[-1])
        ref = best.get("ours_eager") or best.get("ours_compiled_fp32") or best.get("ours_compiled")
        identical = {}
        if ref:
            for name, x in best.items():
                if x is not ref:
                    row[f"match_{name}_vs_ours_fp32"] = round(same(x["outputs"], ref["outputs"]), 4)
                    identical[name] = sum(a == b for a, b in zip(x["outputs"], ref["outputs"]))
                    row[f"identical_{name}_vs_ours_fp32"] = identical[name]
        rows.append(row)

        print(f"batch {bs} ({n} sentences, {decoding}, {args.threads} threads, each engine in its own process, best "
              f"of {args.rounds} rounds)", flush=True)  # fmt: skip
        for name in best:
            backend = f" ({BACKEND[name.endswith('_dnnl')]})" if name.startswith("ct2_") else ""
            print(f"  {name:<18} {row[f'{name}_sent_s']:>8} sent/s {row[f'{name}_tok_s']:>9} tok/s{backend}")
        ratios = [f"{k} = {v}x (rounds {ranges[k][0]:.2f}-{ranges[k][1]:.2f})" for k, v in row.items() if "/" in k]
        print("  " + " | ".join(ratios) + " (sentences/s, median of the per-round ratios)")
        matches = [f"{name}_vs_ours_fp32 {count / n:.1%} ({count}/{n})" for name, count in identical.items()]
        print("  same tokens: " + ", ".join(matches), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
