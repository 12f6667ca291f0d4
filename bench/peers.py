"""Our greedy decoding against CTranslate2 on the same weights, side by side in one run, at batch 1 and 32.

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 100] [--threads 2]

Converts the checkpoint to CTranslate2 (bench/ct2_convert.py) and decodes the length-sorted sentences
in the same batches with each engine: CT2 float32 and int8; ours compiled (model/compile.py, what
nmt-serve runs by default), ours eager, and ours eager with dynamic int8 Linear layers. Each engine
runs in its own child process, one after another: two OpenMP runtimes in one process (PyTorch's and
CT2's) spin on the same two cores and slow each other down several-fold. Checks that CT2 float32
produces our float32 tokens, and prints sentences/s, tokens/s and the ours/CT2 ratios, then one
JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import corpus_arguments  # noqa: E402

from model.evaluate import max_new_tokens_for  # noqa: E402 - imports torch, runs nothing in it

ENGINES = ["ct2_fp32", "ct2_int8", "ours_compiled", "ours_eager", "ours_int8"]
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


def ct2(translator) -> Engine:
    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        return [(ids, len(ids) + (len(ids) < budget)) for ids in translator(batch, budget)]  # short = ended by </s>

    return decode


def ct2_engine(name: str, args) -> tuple[Engine, list[list[int]]]:
    """CT2 on the converted model, in a process that never imports torch; the corpus sorted as load_corpus does."""
    from bench.ct2_translator import GreedyTranslator
    from model.tokenizer import Tokenizer, read_lines

    tok = Tokenizer.from_file(Path(args.model_dir) / "tokenizer.json")
    sentences = list(read_lines(args.src))
    sentences = sentences[: args.limit] if args.limit else sentences
    encoded = sorted(tok.encode_batch(sentences), key=len)
    compute_type = {"ct2_fp32": "float32", "ct2_int8": "int8"}[name]
    translator = GreedyTranslator(args.ct2_dir, tok, compute_type=compute_type, intra_threads=args.threads, inter_threads=1)
    return ct2(translator), encoded


def our_engine(name: str, args, max_batch: int) -> tuple[Engine, list[list[int]]]:
    import torch

    from common import load_corpus

    from model.decoding import KVCache

    model, tok, encoded = load_corpus(args)
    if name == "ours_int8":
        quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        return ours(quantized, tok.pad_id), encoded
    if name == "ours_compiled":
        from model.compile import compile_model, warm_up

        longest = max(map(len, encoded))
        cache = KVCache(model, max_batch, max_new_tokens_for(longest) + 1, longest)
        compile_model(model)
        print(f"  ours_compiled: warm-up took {warm_up(model, cache):.0f} s", file=sys.stderr, flush=True)
        return ours(model, tok.pad_id, cache), encoded
    return ours(model, tok.pad_id), encoded


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
    """In a child process: one engine, every batch size; prints {batch: {seconds, tokens, outputs}} as JSON."""
    sizes = list(map(int, args.batch_sizes.split(",")))
    if args.worker.startswith("ct2_"):
        engine, encoded = ct2_engine(args.worker, args)
    else:
        engine, encoded = our_engine(args.worker, args, max(sizes))
    result = {}
    for bs in sizes:
        batches = [encoded[i : i + bs] for i in range(0, len(encoded), bs)]
        run(engine, batches[:2])  # warm-up
        best = None
        for _ in range(args.repeats):
            seconds, tokens, out = run(engine, batches)
            if best is None or seconds < best[0]:
                best = (seconds, tokens, out)
        result[bs] = {"seconds": best[0], "tokens": best[1], "outputs": best[2]}
    print(json.dumps(result))


def same(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> None:
    p = corpus_arguments(__doc__)
    p.add_argument("--repeats", type=int, default=1, help="timed passes per engine and batch size; the fastest counts")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {ENGINES}")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one engine in this process
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)  # internal: the converted model
    args = p.parse_args()
    if args.worker:
        return worker(args)

    results = {}
    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as ct2_dir:
        if any(name.startswith("ct2_") for name in args.engines.split(",")):
            from bench.ct2_convert import convert
            from model.checkpoint import load_checkpoint

            convert(*load_checkpoint(args.model_dir)[:2], ct2_dir)  # float32 weights; int8 is chosen at load time
        passthrough = ["--model-dir", args.model_dir, "--src", args.src, "--limit", str(args.limit), "--threads",
                       str(args.threads), "--batch-sizes", args.batch_sizes, "--repeats", str(args.repeats),
                       "--ct2-dir", ct2_dir]  # fmt: skip
        for name in args.engines.split(","):
            print(f"running {name} ...", file=sys.stderr, flush=True)
            child = subprocess.run(
                [sys.executable, __file__, *passthrough, "--worker", name], stdout=subprocess.PIPE, text=True, check=True
            )
            results[name] = {int(k): v for k, v in json.loads(child.stdout.strip().splitlines()[-1]).items()}

    n = len(next(iter(results.values()))[int(args.batch_sizes.split(",")[0])]["outputs"])
    rows = []
    for bs in map(int, args.batch_sizes.split(",")):
        r = {name: res[bs] for name, res in results.items()}
        row = {"batch": bs, "sentences": n, "threads": args.threads}
        for name, x in r.items():
            row[f"{name}_sent_s"] = round(n / x["seconds"], 1)
            row[f"{name}_tok_s"] = round(x["tokens"] / x["seconds"], 1)
        for mine, theirs in (("ours_compiled", "ct2_fp32"), ("ours_eager", "ct2_fp32"), ("ours_int8", "ct2_int8")):
            if mine in r and theirs in r:  # the same sentences: a speed ratio
                row[f"{mine}/{theirs}"] = round(r[theirs]["seconds"] / r[mine]["seconds"], 2)
        ref = r.get("ours_eager") or r.get("ours_compiled")
        if ref:
            for name, x in r.items():
                if x is not ref:
                    row[f"match_{name}_vs_ours_fp32"] = round(same(x["outputs"], ref["outputs"]), 4)
        rows.append(row)

        print(f"batch {bs} ({n} sentences, {args.threads} threads, each engine in its own process)", flush=True)
        for name in r:
            print(f"  {name:<14} {row[f'{name}_sent_s']:>8} sent/s {row[f'{name}_tok_s']:>9} tok/s")
        ratios = [f"{k} = {v}x" for k, v in row.items() if "/" in k]
        print("  " + " | ".join(ratios) + " (sentences/s)")
        matches = {k.removeprefix("match_"): f"{v:.1%}" for k, v in row.items() if k.startswith("match_")}
        print("  same tokens: " + ", ".join(f"{k} {v}" for k, v in matches.items()), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
