"""What a model shape would cost to serve, before anyone trains it: random-weight models of other shapes decode the
work the bundled model does, compiled as nmt-serve compiles them, at batch 1 and 32, taking turns with its shape.

    python bench/shape_cost.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 300] [--rounds 3]
        [--shapes d256-e6-d2-f1024-v8000,d256-e3-d3-f1536-v8000] [--threads 2]

A shape is written d<d_model>-e<encoder layers>-d<decoder layers>-f<FFN>-v<vocabulary>[-h<heads>] (heads default
4); the first in the table is always the bundled checkpoint's own shape (--model-dir), the baseline. The work is real:
the bundled model translates the first --limit sources greedily once, and every shape then decodes those sources'
token counts (random ids: a step's time does not depend on their values) for exactly as many steps as each of those
translations took, rows leaving the batch as they end, as a server's batch does (a trained model of another shape
would write other lengths; that part of the cost is not counted). Each model is compiled as nmt-serve compiles it
(model/compile/: AOTInductor, the logit screen where the CPU has bfloat16 matmuls; --eager skips that), with a KV
cache for 32 rows. In each round every model decodes the whole set at each batch size, the order rotating; the ratio
to the baseline is taken per round and its median printed with its range, with the CPU and each shape's parameters.
This is how to choose a student's shape within a serving budget (docs/performance.md, Training); a trained model's
speed is measured by bench/compare_models.py.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import corpus_arguments, cpu_description, load_corpus, pad_batch
from model.decoding import KVCache, greedy_decode, remove_rows
from model.transformer import Transformer, TransformerConfig

SHAPE = re.compile(r"d(\d+)-e(\d+)-d(\d+)-f(\d+)-v(\d+)(?:-h(\d+))?$")
CANDIDATES = "d256-e3-d3-f1024-v6000,d256-e6-d2-f1024-v8000,d256-e4-d3-f1024-v8000,d256-e3-d3-f1536-v8000,d320-e3-d3-f1280-v8000"  # fmt: skip
MAX_ROWS = 32


def shape_name(c: TransformerConfig) -> str:
    name = f"d{c.d_model}-e{c.n_encoder_layers}-d{c.n_decoder_layers}-f{c.d_ff}-v{c.tgt_vocab_size}"
    return name if c.n_heads == 4 else f"{name}-h{c.n_heads}"


def config_for(shape: str, base: TransformerConfig) -> TransformerConfig:
    m = SHAPE.match(shape)
    if not m:
        sys.exit(f"shape_cost.py: {shape!r} is not a shape: write d256-e3-d3-f1024-v8000[-h4]")
    d, e, dd, f, v, h = (int(x) if x else None for x in m.groups())
    return dataclasses.replace(base, d_model=d, n_encoder_layers=e, n_decoder_layers=dd, d_ff=f, src_vocab_size=v,
                               tgt_vocab_size=v, n_heads=h or 4)  # fmt: skip


@torch.inference_mode()
def forced_pass(
    model: Transformer, cache: KVCache, sources: list[list[int]], steps: list[int], batch: int
) -> tuple[float, int]:
    """Decode `sources` in batches of `batch` (in order), each row for exactly its `steps`, leaving the batch when
    done (model.decoding.remove_rows, as greedy_decode): (seconds, rows stepped in all). The cache is left empty."""
    c = model.config
    row_steps = 0
    t0 = time.perf_counter()
    for start in range(0, len(sources), batch):
        todo = steps[start : start + batch]
        cache.add(model, pad_batch(sources[start : start + batch], c.source_pad_id))
        row_to_seq = list(range(len(todo)))
        tokens = torch.full((len(todo),), c.bos_id, dtype=torch.long)
        for step in range(1, max(todo) + 1):
            ids, _ = model.decode_greedy(tokens, cache)
            row_steps += cache.n
            done = [r for r, s in enumerate(row_to_seq) if todo[s] == step]
            if len(done) == cache.n:
                break
            if done:
                ids = remove_rows(cache, done, ids, row_to_seq)
            tokens = ids
        cache.remove(range(cache.n))
    return time.perf_counter() - t0, row_steps


def main() -> None:
    p = corpus_arguments(__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=CANDIDATES, help="comma-separated shapes beside the baseline's")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--eager", action="store_true", help="do not compile (the tests' quick run)")
    p.set_defaults(limit=300)
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if max(batch_sizes) > MAX_ROWS:
        p.error(f"--batch-sizes: at most {MAX_ROWS} rows")
    bundled, _, encoded = load_corpus(args)
    translations = greedy_decode(bundled, pad_batch(encoded, bundled.config.source_pad_id), 256)  # eager, once
    steps = [len(h.tokens) + (h.finish_reason == "eos") for h in translations]
    shapes = list(dict.fromkeys([shape_name(bundled.config)] + [s for s in args.shapes.split(",") if s]))
    configs = {shape: config_for(shape, bundled.config) for shape in shapes}
    g, high = torch.Generator().manual_seed(0), min(c.src_vocab_size for c in configs.values())
    sources = [
        torch.randint(4, high, (len(ids) - 1,), generator=g).tolist() + [bundled.config.eos_id] for ids in encoded
    ]
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {args.threads} threads", flush=True)
    print(f"work: {len(sources)} sources, {sum(steps):,} decoder row-steps (the bundled model's translations)")

    models, directory = {}, None
    if not args.eager:  # the packages, hundreds of MB for a few shapes: removed when the run ends
        directory = tempfile.mkdtemp(prefix="shape-cost-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    for shape, config in configs.items():
        torch.manual_seed(0)
        model = Transformer(config).eval()
        cache = KVCache(model, MAX_ROWS, max(steps) + 1, max(map(len, sources)))
        if not args.eager:
            from model.compile import compile_model

            model.use_screen(True)
            compiled = compile_model(model, cache, steps=("greedy",), directory=directory)
            print(f"{shape}: compiled in {compiled.seconds:.0f} s", file=sys.stderr, flush=True)
        models[shape] = (model, cache)
    for model, cache in models.values():  # warm-up
        forced_pass(model, cache, sources[:MAX_ROWS], steps[:MAX_ROWS], MAX_ROWS)

    seconds, row_steps = {(s, b): [] for s in models for b in batch_sizes}, {}
    for r in range(args.rounds):
        order = list(models)[r % len(models) :] + list(models)[: r % len(models)]
        for b in batch_sizes:
            for shape in order:
                took, row_steps[shape, b] = forced_pass(*models[shape], sources, steps, b)
                seconds[shape, b].append(took)
    baseline, results = shapes[0], {}
    print(
        f"\n| shape | parameters | {' | '.join(f'batch {b}: sentences/s, / baseline (range)' for b in batch_sizes)} |"
    )
    print(f"|---|---|{'---|' * len(batch_sizes)}")
    for shape, (model, _) in models.items():
        row = {"parameters": model.num_parameters(), "row_steps": {b: row_steps[shape, b] for b in batch_sizes}}
        cells = []
        for b in batch_sizes:
            ratios = [base / own for own, base in zip(seconds[shape, b], seconds[baseline, b], strict=True)]
            rate = len(sources) / statistics.median(seconds[shape, b])
            row[str(b)] = {"sentences_per_s": round(rate, 1), "speed_vs_baseline": round(statistics.median(ratios), 3),
                           "range": [round(min(ratios), 3), round(max(ratios), 3)]}  # fmt: skip
            cells.append(f"{rate:.1f}, {statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})")
        results[shape] = row
        print(f"| {shape}{' (baseline)' if shape == baseline else ''} | {row['parameters']:,} | {' | '.join(cells)} |")
    print(json.dumps({"cpu": cpu_description(), "threads": args.threads, "compiled": not args.eager,
                      "rounds": args.rounds, "sources": len(sources), "row_steps": sum(steps), "baseline": baseline,
                      "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()
