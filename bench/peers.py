"""Our greedy decoding against CTranslate2 on the same weights, side by side in one run, at batch 1 and 32.

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 100] [--threads 2]

Converts the checkpoint to CTranslate2 (bench/ct2_convert.py) in a temporary directory, decodes the
length-sorted sentences in the same batches with each engine — CT2 float32 and int8, ours float32 and
ours with dynamic int8 Linear layers — checks that CT2 float32 produces our float32 tokens, and prints
sentences/s, tokens/s and the ours/CT2 ratios, then one JSON line with every figure.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_arguments, load_corpus, pad_batch  # noqa: E402
from ct2_convert import GreedyTranslator, convert  # noqa: E402

from model.decoding import greedy_decode  # noqa: E402
from model.evaluate import max_new_tokens_for  # noqa: E402
from model.transformer import Transformer  # noqa: E402

# An engine decodes one batch of source id lists (each ending in </s>) with a budget of new tokens
# and returns, per sentence, the generated ids without </s> and how many tokens it generated (</s> included).
Engine = Callable[[list[list[int]], int], list[tuple[list[int], int]]]


def ours(model: Transformer, pad_id: int) -> Engine:
    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        return [(h.tokens, len(h.logprobs)) for h in greedy_decode(model, pad_batch(batch, pad_id), budget)]

    return decode


def ct2(translator: GreedyTranslator) -> Engine:
    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        return [(ids, len(ids) + (len(ids) < budget)) for ids in translator(batch, budget)]  # short = ended by </s>

    return decode


def batches_of(encoded: list[list[int]], size: int) -> list[list[list[int]]]:
    return [encoded[i : i + size] for i in range(0, len(encoded), size)]


def run(engine: Engine, batches: list[list[list[int]]]) -> tuple[float, int, list[list[int]]]:
    """Seconds, generated tokens (</s> included) and the outputs in order."""
    out, tokens = [], 0
    t0 = time.perf_counter()
    for batch in batches:
        for ids, n in engine(batch, max_new_tokens_for(max(map(len, batch)))):
            out.append(ids)
            tokens += n
    return time.perf_counter() - t0, tokens, out


def time_engines(
    engines: dict[str, Engine], batches: list[list[list[int]]], repeats: int
) -> tuple[dict[str, tuple[float, int]], dict[str, list[list[int]]]]:
    """Each engine's fastest (seconds, tokens) over `repeats` interleaved passes, and its outputs."""
    best, outputs = {}, {}
    for engine in engines.values():
        run(engine, batches[:2])  # warm-up
    for _ in range(repeats):
        for name, engine in engines.items():
            seconds, tokens, outputs[name] = run(engine, batches)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, tokens)
    return best, outputs


def same(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> None:
    p = corpus_arguments(__doc__)
    p.add_argument("--repeats", type=int, default=1, help="timed passes per engine, interleaved; the fastest counts")
    args = p.parse_args()

    model, tok, encoded = load_corpus(args)

    mine: dict[str, Engine] = {"ours_fp32": ours(model, tok.pad_id)}
    try:
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
        mine["ours_int8"] = ours(quantized, tok.pad_id)
    except RuntimeError as e:  # not every torch build ships a quantized engine
        print(f"ours_int8 skipped: quantize_dynamic failed: {e}", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as tmp:
        convert(model, tok, tmp)  # float32 weights; int8 is chosen at load time
        engines: dict[str, Engine] = {
            f"ct2_{name}": ct2(
                GreedyTranslator(tmp, tok, compute_type=compute_type, intra_threads=args.threads, inter_threads=1)
            )
            for name, compute_type in (("fp32", "float32"), ("int8", "int8"))
        }
        engines.update(mine)

        rows = []
        for bs in map(int, args.batch_sizes.split(",")):
            batches = batches_of(encoded, bs)
            best, outputs = time_engines(engines, batches, args.repeats)
            row = {"batch": bs, "sentences": len(encoded), "threads": args.threads}
            for name, (seconds, tokens) in best.items():
                row[f"{name}_sent_s"] = round(len(encoded) / seconds, 1)
                row[f"{name}_tok_s"] = round(tokens / seconds, 1)
            row["ours/ct2_fp32"] = round(best["ct2_fp32"][0] / best["ours_fp32"][0], 2)  # same sentences: a speed ratio
            if "ours_int8" in best:
                row["ours/ct2_int8"] = round(best["ct2_int8"][0] / best["ours_int8"][0], 2)
            row["match_ct2_fp32_vs_ours_fp32"] = round(same(outputs["ct2_fp32"], outputs["ours_fp32"]), 4)
            row["match_ct2_int8_vs_ours_fp32"] = round(same(outputs["ct2_int8"], outputs["ours_fp32"]), 4)
            if "ours_int8" in outputs:
                row["match_ours_int8_vs_ours_fp32"] = round(same(outputs["ours_int8"], outputs["ours_fp32"]), 4)
            rows.append(row)

            print(f"batch {bs} ({len(encoded)} sentences, {args.threads} threads)", flush=True)
            for name in best:
                print(f"  {name:<10} {row[f'{name}_sent_s']:>8} sent/s {row[f'{name}_tok_s']:>9} tok/s")
            ratios = f"ours/CT2 fp32 = {row['ours/ct2_fp32']}x"
            if "ours/ct2_int8" in row:
                ratios += f" | ours/CT2 int8 = {row['ours/ct2_int8']}x"
            print(f"  {ratios} (sentences/s)")
            matches = {k.removeprefix("match_"): f"{v:.1%}" for k, v in row.items() if k.startswith("match_")}
            print("  same tokens: " + ", ".join(f"{k} {v}" for k, v in matches.items()), flush=True)
            if row["match_ct2_fp32_vs_ours_fp32"] < 0.99:
                i = next(i for i, (a, b) in enumerate(zip(outputs["ct2_fp32"], outputs["ours_fp32"])) if a != b)
                print(f"  first difference: source {tok.decode(encoded[i])!r}\n"
                      f"    ours {tok.decode(outputs['ours_fp32'][i])!r}\n"
                      f"    CT2  {tok.decode(outputs['ct2_fp32'][i])!r}")  # fmt: skip
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
