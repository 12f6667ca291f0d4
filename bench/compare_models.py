"""Two checkpoints decoded as nmt-serve serves them, side by side, at batch 1 and 32: does a new model cost more?

    python bench/compare_models.py --model-dir NEW_DIR --baseline checkpoints/multi30k-en-de \
        --src ../shared/data/multi30k/test_2016_flickr.en.gz [--ref ...de.gz] [--rounds 5] [--engine ours_compiled]

Each model runs in a child process of bench/peers.py's (its engine code: ours_compiled is nmt-serve's default, the
compiled greedy step with the bfloat16 logit screen where the CPU has bfloat16 matmuls). The two load and compile one
after the other, then take turns: in every round each decodes the whole corpus once at each batch size, the first to
go alternating. The two tokenizers differ, so speed is in sentences/s of the same sentences (each length-sorted and
batched by its own token counts, as a server batches them); tokens/s are printed beside. The ratio new / baseline is
taken per round from passes run back to back, and the median with its range is printed, with the CPU, each model's
shape and parameters, and with --ref each model's BLEU (lowercased). One JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import peers
from bench.common import check_corpus, corpus_arguments, cpu_description, require_checkpoint, require_files

ENGINES = ["ours_compiled", "ours_compiled_fp32", "ours_eager", "ours_int8_compiled"]


def shape(model_dir: str) -> str:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    meta = json.loads((Path(model_dir) / "metadata.json").read_text())
    return (
        f"d_model {config['d_model']}, {config['n_encoder_layers']}+{config['n_decoder_layers']} layers, FFN "
        f"{config['d_ff']}, vocabulary {config['tgt_vocab_size']}, {meta.get('parameters', 0) / 1e6:.2f} M parameters"
    )


def ratios(new: list[dict], baseline: list[dict]) -> dict[str, float]:
    """new's sentences/s over baseline's, per round (passes run back to back): the median and the range."""
    per_round = [b["seconds"] / n["seconds"] for n, b in zip(new, baseline)]
    return {"median": round(statistics.median(per_round), 3), "min": round(min(per_round), 3),
            "max": round(max(per_round), 3)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = corpus_arguments(__doc__)
    p.add_argument(
        "--baseline", required=True, help="the checkpoint directory the new one (--model-dir) is timed against"
    )
    p.add_argument("--engine", choices=ENGINES, default="ours_compiled", help="how both decode (bench/peers.py's)")
    p.add_argument("--rounds", type=int, default=5, help="passes per model and batch size, the two taking turns")
    p.add_argument("--ref", help="the reference translations of --src (plain or .gz): also print each model's BLEU")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    check_corpus(p, args)
    require_checkpoint(p, "--baseline", args.baseline)
    require_files(p, ref=args.ref)
    sizes = list(map(int, args.batch_sizes.split(",")))
    common = {**vars(args), "beam": 1, "length_penalty": 1.0, "device": "cpu", "limit_batch1": 0}
    models = {
        "new": argparse.Namespace(**common),
        "baseline": argparse.Namespace(**{**common, "model_dir": args.baseline}),
    }
    print(f"CPU: {cpu_description()}; {args.threads} threads; engine {args.engine}")
    for label, a in models.items():
        print(f"{label}: {a.model_dir}: {shape(a.model_dir)}")

    children = {}
    try:
        for label, a in models.items():  # one at a time: a compile must not share the cores with the other
            print(f"starting {label} ...", file=sys.stderr, flush=True)
            children[label] = peers.start_worker(a, args.engine, "")
        passes: dict[int, dict[str, list[dict]]] = {bs: {label: [] for label in models} for bs in sizes}
        for r in range(args.rounds):
            order = list(models) if r % 2 == 0 else list(models)[::-1]
            for bs in sizes:
                for label in order:
                    passes[bs][label].append(peers.decode_once(children[label], bs))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for child in children.values():
            peers.stop_worker(child)

    results = {}
    for bs in sizes:
        row = {}
        for label in models:
            best = min(passes[bs][label], key=lambda x: x["seconds"])
            n = len(best["outputs"])
            row[label] = {"sentences_per_s": round(n / best["seconds"], 1), "tokens_per_s": round(best["tokens"] / best["seconds"]),
                          "ms_per_sentence": round(1000 * best["seconds"] / n, 2)}  # fmt: skip
            if args.ref:
                row[label]["bleu_lc"] = peers.bleu(models[label], {label: best["outputs"]})[label]
        row["new/baseline"] = ratios(passes[bs]["new"], passes[bs]["baseline"])
        results[bs] = row
        r = row["new/baseline"]
        print(f"batch {bs}: " + " | ".join(
            f"{label} {row[label]['sentences_per_s']} sentences/s ({row[label]['tokens_per_s']} tokens/s"
            + (f", BLEU {row[label]['bleu_lc']}" if args.ref else "") + ")" for label in models
        ) + f" | new/baseline {r['median']}x (rounds {r['min']}-{r['max']})")  # fmt: skip
    print("  (new/baseline: the new model's sentences/s over the baseline's, median of the per-round ratios)")
    print(json.dumps({"cpu": cpu_description(), "threads": args.threads, "engine": args.engine, "rounds": args.rounds,
                      "new": args.model_dir, "baseline": args.baseline, "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()
