"""Our greedy decoding (or beam search, --beam N) against CTranslate2 on the same weights, at batch 1 and 32.

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz [--limit 100] [--rounds 3]
        [--ref ../shared/data/multi30k/test_2016_flickr.de.gz]   (each engine's BLEU too)
        [--isa avx2]   (every engine kept to AVX2, as on a CPU without AVX-512)

Converts the checkpoint to CTranslate2 (bench/ct2_convert.py) and decodes the length-sorted sentences
in the same batches with each engine: CT2 float32 and int8; ours compiled (model/compile/) with the
bfloat16 logit screen where the CPU has bfloat16 matmuls (model/screen.py: float32 greedy's tokens;
what nmt-serve runs by default), ours compiled without it (ours_compiled_fp32), ours eager (float32),
and ours in int8 (model/quantize.py's int8 linears, NMT_QUANTIZE=int8), eager (ours_int8: oneDNN's int8 kernels
called eagerly, as with NMT_COMPILE=off) and compiled (ours_int8_compiled), and ours compiled with each sentence judged as the server
judges it (ours_compiled_judged: its text detokenized, the confidence's signals, calibrated confidence and flags,
model/confidence.py; its ratio to ours_compiled is the confidence's cost). Each engine
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

    git worktree add /tmp/before REV
    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz --baseline /tmp/before \
        --engines ct2_fp32,ct2_fp32_dnnl,ours_compiled,ours_compiled@base

With --baseline DIR (another checkout of the project: an earlier commit, say) any of ours named with "@base" runs
from DIR's code, in the same rounds as the others, with its graphs in a compile cache of its own: a change's before
and after on one machine in one run ("ours_compiled/ours_compiled@base" is this tree's speed over DIR's).

    python bench/peers.py --src ../shared/data/multi30k/test_2016_flickr.en.gz --beam 4 [--length-penalty 1.0]

With --beam N (N > 1) the race is beam search: ours is model.batch.decode with DecodingOptions(beam_size=N,
length_penalty=P), the RowBatch code the server steps with, on the compiled model (ours_compiled: its full step,
log-probabilities for every token, compiled as the server compiles it) and on the eager one (ours_eager), against
CT2's translate_batch(beam_size=N, length_penalty=P) in the same batches of sources with the same budgets. The
engines are then ct2_fp32, ct2_fp32_dnnl, ours_compiled and ours_eager by default (ct2_int8, ct2_int8_dnnl and
ours_int8 on request; ours_compiled_fp32 does not apply: the logit screen is greedy's). Both score a finished hypothesis
as its summed log-probabilities / length ** P with </s> counted in the length (CT2 drops </s> from the returned tokens
only after scoring), so at any P the two should pick the same tokens; "same tokens" counts the sentences where they do.

    python bench/peers.py --device cuda --src ../shared/data/multi30k/test_2016_flickr.en.gz [--model opus-shape]

With --device cuda the race is greedy on the GPU, batch sizes 1, 32, 128 and 512 by default, over the first 1000
sentences (--limit) and the first 50 at batch 1 (--limit-batch1). Ours loads the checkpoint in float32 (TF32
matmuls off: ours_fp32 is the reference every engine's tokens are compared with), float16 and bfloat16, each with a
KVCache for the largest batch and its decoder step captured as CUDA graphs (model/cuda_graphs.py); ours_eager_fp16
is float16 without the graphs, to show what they give. CT2 runs float32, float16 and int8_float16 on the GPU; where it
cannot (its wheels load CUDA 12's libraries) the error is printed and recorded, and a model imported from Marian
races transformers' MarianMTModel.generate instead (hf_fp32, hf_fp16: greedy, on the directory it was imported from,
with our source ids and the same budgets: max_new_tokens is ours, its last token the forced </s> as in ours).
Every engine has a process of its own; a GPU's speed does not drift as a shared CPU's does, so one round is the
default. Prints the GPU, its driver and torch's CUDA beside the figures, and one JSON line at the end:
{"device", "gpu", "model", "results": {batch size: {engine: {...}}}, "ratios": {batch size: {...}}, "unavailable"}.

--model opus-shape races a Marian model of OPUS-MT's shape with random weights (bench/make_marian.py's), built and
imported with nmt-import's importer into --opus-dir once; its SentencePiece models are trained on Multi30k's
training text when it is beside --src. Random weights never end a sentence early: every engine decodes to the budget.
--model nllb-shape races an M2M100 model of NLLB-200-distilled-600M's shape (nllb_shape: a 256,206-row vocabulary,
an NllbTokenizer padded to NLLB's 256,000 pieces), built in nmt-nllb-shape beside --opus-dir once; CT2 converts the
directory it was imported from with its own converter. Neither engine is given a target language: the same work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import (
    check_corpus,
    corpus_arguments,
    cpu_description,
    ct2_missing,
    cuda_missing,
    read_sentences,
    require_files,
)
from model.decoding import max_new_tokens_for  # imports torch, runs nothing in it

ENGINES = [
    "ct2_fp32", "ct2_fp32_dnnl", "ct2_int8", "ct2_int8_dnnl", "ours_compiled", "ours_compiled_fp32", "ours_eager",
    "ours_int8", "ours_int8_compiled", "ours_compiled_judged",
]  # fmt: skip
BEAM_ENGINES = ["ct2_fp32", "ct2_fp32_dnnl", "ours_compiled", "ours_eager"]  # the default with --beam N > 1
NO_BEAM = ("ours_compiled_fp32", "ours_compiled_judged")  # greedy's only (the logit screen; the judged race)
ON_REQUEST = ("ours_compiled_judged",)  # left out of the default engines
# CTranslate2 runs its GEMMs with MKL by default and with oneDNN under CT2_USE_MKL=0 (the *_dnnl engines); which is
# faster depends on the CPU (MKL ran 10x slower at batch 1 on one AMX Xeon), so both are timed and the faster counts.
BACKEND = {False: "MKL", True: "oneDNN"}
BASE = "@base"  # an engine of ours with this suffix runs from --baseline's checkout
# --isa avx2: what keeps each library to AVX2 on a CPU that has more (torch's ATen kernels and Inductor's generated
# ones, oneDNN, MKL, CTranslate2's own kernels), to race as on an AVX2-only CPU; the engines' processes inherit them
ISA_LIMITS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"},
}  # fmt: skip


def keep_to(isa: str | None, restart: bool = False) -> str:
    """Keep this process and those it starts to ISA_LIMITS[isa] (nothing when isa is None) and return what to add to
    the printed CPU line. The libraries read the limits before their first kernel: a script that runs torch itself
    passes restart=True and starts again with them set, where they are not yet (its imports have loaded torch)."""
    if not isa:
        return ""
    limits = ISA_LIMITS[isa]
    if restart and any(os.environ.get(k) != v for k, v in limits.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **limits})
    os.environ.update(limits)
    return f"; limited to {isa.upper()} ({', '.join(f'{k}={v}' for k, v in limits.items())})"


# With --device cuda: ours in three dtypes with CUDA graphs and one without, CT2 in three compute types; and where
# CT2 cannot run, transformers' Marian on a model imported from Marian (HF_ENGINES)
CUDA_ENGINES = ["ours_fp32", "ours_fp16", "ours_bf16", "ours_eager_fp16", "ct2_fp32", "ct2_fp16", "ct2_int8_fp16"]
HF_ENGINES = ["hf_fp32", "hf_fp16"]
CT2_COMPUTE = {"ct2_fp32": "float32", "ct2_fp16": "float16", "ct2_int8_fp16": "int8_float16"}
REFERENCE = "ours_fp32"  # on CUDA, the tokens every engine is compared with
# (ours, its peers in order of preference): the first peer that ran is the one the ratio is taken against
CUDA_PAIRS = [
    ("ours_fp32", ("ct2_fp32", "hf_fp32")), ("ours_fp16", ("ct2_fp16", "hf_fp16")), ("ours_bf16", ("ct2_fp16", "hf_fp16")),
    ("ours_fp16", ("ct2_int8_fp16",)), ("ours_fp16", ("ours_eager_fp16",)),
]  # fmt: skip
# what a flag left out means on each device: the GPU race runs more sentences at larger batches, fewer at batch 1
DEFAULTS = {
    "cpu": {"batch_sizes": "1,32", "limit": 0, "limit_batch1": 0, "rounds": 3},
    "cuda": {"batch_sizes": "1,32,128,512", "limit": 1000, "limit_batch1": 50, "rounds": 1},
}
# An engine decodes one batch of source id lists (each ending in </s>) with a budget of new tokens
# and returns, per sentence, the generated ids without </s> and how many tokens it generated (</s> included).
Engine = Callable[[list[list[int]], int], list[tuple[list[int], int]]]


class Unavailable(RuntimeError):
    """An engine that could not load or decode here; the message is its error."""


def ours(model, pad_id: int, cache=None, device=None, judge: Callable | None = None) -> Engine:
    """Greedy decoding on the model; `judge(source ids, hypothesis)` is called on each sentence when given."""
    from bench.common import pad_batch
    from model.decoding import greedy_decode

    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        src = pad_batch(batch, pad_id)
        hyps = greedy_decode(model, src if device is None else src.to(device), budget, cache)
        if judge is not None:
            for ids, h in zip(batch, hyps, strict=True):
                judge(ids, h)
        return [(h.tokens, len(h.logprobs)) for h in hyps]

    return decode


def judging(model_dir: str, tokenizer, sentences: list[str]) -> Callable:
    """What the server adds to each translation for its confidence (app/text/results.py): the translation's text,
    the signals and the calibrated confidence and flags. The source texts are looked up, as the server has them."""
    from model.confidence import Calibration, Quality, judge

    calibration = Calibration.load(model_dir)
    texts = {tuple(ids): text for ids, text in zip(tokenizer.encode_batch(sentences), sentences, strict=True)}

    def sentence(ids: list[int], h) -> Quality:
        target = tokenizer.decode(h.tokens)
        return judge(ids, h.tokens, h.logprobs, texts[tuple(ids)], target, calibration, 0, (), h.attention, h.aligned)

    return sentence


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
    from bench.common import load_corpus
    from model.decoding import KVCache

    model, _, encoded = load_corpus(args)
    pad = model.config.source_pad_id
    if name in ("ours_int8", "ours_int8_compiled"):  # NMT_QUANTIZE=int8: eager (NMT_COMPILE=off) or compiled
        from model.quantize import quantize_int8

        quantize_int8(model)
    if name not in ("ours_compiled", "ours_compiled_fp32", "ours_int8_compiled", "ours_compiled_judged"):
        return (ours_beam(model, args.beam, args.length_penalty) if args.beam > 1 else ours(model, pad)), encoded
    from model.compile import compile_model

    # ours_compiled is what nmt-serve runs by default: the output projection screened in bfloat16 where
    # the CPU has bfloat16 matmuls (model/screen.py, the same tokens); ours_compiled_fp32 without the screen
    screened = model.use_screen(name in ("ours_compiled", "ours_compiled_judged") and args.beam == 1)
    print(f"  {name}: logit screen {'on' if screened else 'off'}", file=sys.stderr, flush=True)
    longest = max(map(len, encoded))
    cache = KVCache(model, max_batch * args.beam, max_new_tokens_for(longest) + 1, longest)
    # the graphs the race steps with: greedy decoding's steps, or beam search's full ones (and the prefill)
    compiled = compile_model(model, cache, steps=("greedy",) if args.beam == 1 else ("logprobs",))
    print(f"  {name}: compiling took {compiled.seconds:.0f} s ({len(compiled.built)} graphs built, "
          f"{len(compiled.loaded)} loaded from {compiled.directory})", file=sys.stderr, flush=True)  # fmt: skip
    for graph, chosen in compiled.choices.items():  # the large-row steps' GEMMs, timed on this CPU
        print(f"  {name}: {graph} runs {chosen.describe()}", file=sys.stderr, flush=True)
    if args.beam > 1:
        return ours_beam(model, args.beam, args.length_penalty, cache), encoded
    judge = None
    if name == "ours_compiled_judged":
        from model.tokenizer import load_tokenizer, read_lines

        sentences = list(read_lines(args.src))
        judge = judging(args.model_dir, load_tokenizer(args.model_dir), sentences[: args.limit or None])
    return ours(model, pad, cache, judge=judge), encoded


def torch_dtype(name: str):
    """The dtype an engine's name ends in: fp32, fp16 or bf16."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name.rsplit("_", 1)[-1]]


def exact_float32() -> None:
    """float32 matmuls in float32 on the GPU, not TF32: the reference's tokens."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def ours_on(
    model_dir: str, device, dtype, max_batch: int, longest: int, graphs: bool, log=print, emulate: bool = False
) -> Engine:
    """Our greedy decoding of the checkpoint loaded on `device` in `dtype`, every batch in one KVCache for up to
    max_batch sources of up to `longest` tokens; graphs: its decoder step captured as CUDA graphs first
    (model/cuda_graphs.py; emulate: its eager stand-in, on any device)."""
    from model.checkpoint import load_checkpoint
    from model.decoding import KVCache

    model, _, _ = load_checkpoint(model_dir, device=device, dtype=dtype)
    cache = KVCache(model, max_batch, max_new_tokens_for(longest) + 1, longest)
    if graphs:
        from model.cuda_graphs import capture_model

        capture_model(model, cache, log=log, emulate=emulate)
    return ours(model, model.config.source_pad_id, cache, device)


def marian_source(model_dir: str) -> Path | None:
    """The local Marian directory a model was imported from (metadata.json's imported_from), else None."""
    from model.checkpoint import read_metadata

    meta = read_metadata(model_dir)
    source = meta.get("imported_from", {}).get("path")
    return Path(source) if meta.get("architecture") == "marian" and source and Path(source).is_dir() else None


def hf_generate(model, pad_id: int, forced_eos: int, device) -> Engine:
    """transformers' greedy generate on our source ids (a Marian import's ids are Marian's): max_new_tokens is our
    budget, whose last token transformers forces to </s> as ours does (forced_eos_token_id); counted as ours counts."""
    import torch

    from bench.common import pad_batch

    eos = model.config.eos_token_id

    def decode(batch: list[list[int]], budget: int) -> list[tuple[list[int], int]]:
        src = pad_batch(batch, pad_id)  # (B, S)
        mask = torch.arange(src.size(1))[None, :] < torch.tensor(list(map(len, batch)))[:, None]  # (B, S)
        with torch.inference_mode():
            out = model.generate(
                input_ids=src.to(device), attention_mask=mask.long().to(device), num_beams=1, do_sample=False,
                max_new_tokens=budget,
            )  # fmt: skip
        results = []
        for row in out[:, 1:].tolist():  # without the decoder start; a row that ended early is padded after </s>
            ids = row[: row.index(eos)] if eos in row else row
            results.append((ids, len(ids) + (len(ids) < budget - forced_eos)))  # short = ended by </s>
        return results

    return decode


def hf_engine(model_dir: str, device, dtype) -> Engine:
    """MarianMTModel.generate on the directory the checkpoint was imported from: the same weights as ours."""
    from transformers import MarianMTModel

    from model.transformer import TransformerConfig

    source = marian_source(model_dir)
    if source is None:
        raise Unavailable(f"{model_dir} was not imported from a local Marian directory: transformers has no weights")
    config = TransformerConfig.from_dict(json.loads((Path(model_dir) / "config.json").read_text()))
    model = MarianMTModel.from_pretrained(source).to(device=device, dtype=dtype).eval()
    return hf_generate(model, config.source_pad_id, int(config.force_eos), device)


def cuda_engine(name: str, args, max_batch: int) -> tuple[Engine, list[list[int]], Callable[[], None] | None]:
    """One engine on the GPU, the corpus as ids in the file's order, and what waits for the GPU (None for CT2,
    whose results are on the host)."""
    import torch

    from model.tokenizer import load_tokenizer

    tok = load_tokenizer(args.model_dir)
    encoded = tok.encode_batch(read_sentences(args))
    if name.startswith("ct2_"):
        from bench.ct2_translator import GreedyTranslator

        forced_eos = int(json.loads((Path(args.model_dir) / "config.json").read_text()).get("force_eos", False))
        translator = GreedyTranslator(args.ct2_dir, tok, device="cuda", compute_type=CT2_COMPUTE[name])
        return ct2(translator, forced_eos), encoded, None
    dtype = torch_dtype(name)
    if dtype == torch.float32:
        exact_float32()
    if name.startswith("hf_"):
        return hf_engine(args.model_dir, "cuda", dtype), encoded, torch.cuda.synchronize

    def log(message: str) -> None:
        print(f"  {name}: {message}", file=sys.stderr, flush=True)

    graphs = name != "ours_eager_fp16"
    engine = ours_on(args.model_dir, "cuda", dtype, max_batch, max(map(len, encoded)), graphs, log)
    return engine, encoded, torch.cuda.synchronize


def run(
    engine: Engine, batches: list[list[list[int]]], sync: Callable[[], None] | None = None
) -> tuple[float, int, list[list[int]]]:
    """Seconds, generated tokens (</s> included) and the outputs in order. sync: waits for the device's queued work
    (torch.cuda.synchronize), before either clock is read."""
    out, tokens = [], 0
    if sync:
        sync()
    t0 = time.perf_counter()
    for batch in batches:
        for ids, n in engine(batch, max_new_tokens_for(max(map(len, batch)))):
            out.append(ids)
            tokens += n
    if sync:
        sync()
    return time.perf_counter() - t0, tokens, out


def corpus_for(encoded: list[list[int]], batch_size: int, first_at_batch1: int = 0) -> list[list[int]]:
    """The sentences decoded at `batch_size`, length-sorted as a server batches them: at batch 1 only the first
    `first_at_batch1` of them when it is set (batch 1 is slow)."""
    return sorted(encoded[:first_at_batch1] if batch_size == 1 and first_at_batch1 else encoded, key=len)


def worker(args) -> None:
    """In a child process: load one engine, warm it up, print {"ready": true}; then for each batch size read from
    stdin, decode the whole corpus once and print {seconds, tokens, outputs} as one JSON line. On CUDA an engine that
    cannot load or warm up prints {"error": ...} instead, for the race to record and go on without it."""
    sizes = list(map(int, args.batch_sizes.split(",")))
    sync = None
    try:
        if args.device == "cuda":
            engine, encoded, sync = cuda_engine(args.worker, args, max(sizes))
        elif args.worker.startswith("ct2_"):
            engine, encoded = ct2_engine(args.worker, args)
        else:
            engine, encoded = our_engine(args.worker, args, max(sizes))
        batches = {}
        for bs in sizes:
            corpus = corpus_for(encoded, bs, args.limit_batch1)
            batches[bs] = [corpus[i : i + bs] for i in range(0, len(corpus), bs)]
        for bs in sizes:
            run(engine, batches[bs][:2], sync)  # warm-up
    except Exception as e:  # noqa: BLE001 - on CUDA: reported to the parent, which goes on without this engine
        if args.device != "cuda":
            raise
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        seconds, tokens, out = run(engine, batches[int(line)], sync)
        print(json.dumps({"seconds": seconds, "tokens": tokens, "outputs": out}), flush=True)


def answer(child: subprocess.Popen) -> dict:
    """The child's next JSON line (libraries may print other lines to stdout); its error raises Unavailable."""
    for line in child.stdout:
        if line.startswith("{"):
            reply = json.loads(line)
            if "error" in reply:
                raise Unavailable(reply["error"])
            return reply
    code = child.wait()
    tail = " | ".join(getattr(child, "stderr_tail", ()))  # a crash in native code leaves no JSON: its last words
    raise Unavailable(f"the benchmark process exited with {code}" + (f": {tail}" if tail else ""))


def same(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def forward_stderr(child: subprocess.Popen) -> None:
    """Pass the child's stderr on as it comes, keeping its last lines (child.stderr_tail) for when it dies."""
    child.stderr_tail = deque(maxlen=3)

    def pump() -> None:
        for line in child.stderr:
            sys.stderr.write(line)
            if line.strip():
                child.stderr_tail.append(line.strip())

    threading.Thread(target=pump, daemon=True).start()


def start_worker(args, name: str, ct2_dir: str) -> subprocess.Popen:
    """One engine in a process of its own (see `worker`), loaded and warmed up for args.batch_sizes; one named
    "...@base" from args.baseline's code (`baseline_run`)."""
    env = {**os.environ, "CT2_USE_MKL": "0"} if name.endswith("_dnnl") else None
    script, cwd = __file__, None
    if name.endswith(BASE):
        name, (script, cwd, env) = name.removesuffix(BASE), baseline_run(args.baseline)
    cuda = args.device == "cuda"
    child = subprocess.Popen(
        [sys.executable, script, "--model-dir", os.path.abspath(args.model_dir), "--src", os.path.abspath(args.src),
         "--limit", str(args.limit), "--threads", str(args.threads), "--batch-sizes", args.batch_sizes, "--ct2-dir",
         ct2_dir, "--worker", name, "--beam", str(args.beam), "--length-penalty", str(args.length_penalty),
         "--device", args.device, "--limit-batch1", str(args.limit_batch1)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE if cuda else None, text=True, env=env,
        cwd=cwd,
    )  # fmt: skip
    if cuda:
        forward_stderr(child)
    try:
        answer(child)  # {"ready": true}
    except BaseException:
        child.kill()
        raise
    return child


def baseline_run(directory: Path) -> tuple[str, str, dict[str, str]]:
    """How an engine runs from another checkout: its bench/peers.py, in it, importing its code, with Inductor's caches
    and the packages apart (both trees' packages have the same names: each would take the other's as stale)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # where this tree's engines keep theirs

    env = {**os.environ, "PYTHONPATH": str(directory), "TORCHINDUCTOR_CACHE_DIR": f"{cache_dir()}-baseline"}
    return str(directory / "bench" / "peers.py"), str(directory), env


def commit_of(directory: Path) -> str:
    """The checkout's commit ("+ changes" where its tracked files differ), or "unknown" outside git."""
    git = ["git", "-C", str(directory)]
    try:
        rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "diff", "--quiet", "HEAD"], check=False).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev.stdout.strip() + (" + changes" if dirty else "")


def decode_once(child: subprocess.Popen, batch_size: int) -> dict:
    """Have a started worker decode the whole corpus once at `batch_size`: {seconds, tokens, outputs}."""
    child.stdin.write(f"{batch_size}\n")
    child.stdin.flush()
    return answer(child)


def stop_worker(child: subprocess.Popen) -> None:
    with contextlib.suppress(BrokenPipeError):  # a child that died
        child.stdin.close()
    child.wait(timeout=60)


def measure(
    args, names: list[str], sizes: list[int], ct2_dir: str, unavailable: dict[str, str] | None = None,
    fallback: Callable[[dict[str, str]], list[str]] | None = None,
) -> dict[int, dict[str, list[dict]]]:  # fmt: skip
    """{batch size: {engine: one result per round}}, the engines taking turns in rotating order.

    With `unavailable` (a dict), an engine that fails to start or to decode is recorded there with its error and the
    race goes on without it; `fallback`, given those, names engines to start in their place."""
    children: dict[str, subprocess.Popen] = {}

    def start(name: str) -> None:
        print(f"starting {name} ...", file=sys.stderr, flush=True)
        try:
            children[name] = start_worker(args, name, ct2_dir)
        except Unavailable as e:
            if unavailable is None:
                raise
            unavailable[name] = str(e)

    try:
        for name in names:  # one at a time: a compile must not share the cores with another engine
            start(name)
        for name in fallback(unavailable) if fallback else []:
            start(name)
        live = list(children)
        results: dict[int, dict[str, list[dict]]] = {bs: {name: [] for name in live} for bs in sizes}
        for r in range(args.rounds):
            order = live[r % len(live) :] + live[: r % len(live)] if live else []
            for bs in sizes:
                for name in order:
                    if unavailable is not None and name in unavailable:
                        continue
                    try:
                        results[bs][name].append(decode_once(children[name], bs))
                    except Unavailable as e:
                        if unavailable is None:
                            raise
                        unavailable[name] = f"at batch {bs}: {e}"
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        return results
    finally:
        for child in children.values():
            stop_worker(child)


def convert_for_ct2(model_dir: str, ct2_dir: str) -> None:
    """Our checkpoint with bench/ct2_convert.py; an imported model (Marian, M2M100, mBART) from its source with CT2's
    own converter."""
    from model.checkpoint import read_metadata

    meta = read_metadata(model_dir)
    source = meta.get("imported_from", {}).get("path")
    if meta.get("architecture") in ("marian", "m2m_100", "mbart"):
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


def speed_ratios(passes: dict[str, list[dict]], batch_size: int) -> dict[str, float]:
    """Each of ours against the first of its peers that ran (CUDA_PAIRS), on the same sentences: the median over
    rounds of their seconds / ours (ours' sentences/s over theirs), under "ours/theirs"; at batch 1 also ours' time
    per sentence over theirs (the best passes'), under "ours/theirs_time_per_sentence"."""
    out = {}
    for mine, peers in CUDA_PAIRS:
        theirs = next((p for p in peers if passes.get(p)), None)
        if not passes.get(mine) or theirs is None:
            continue
        per_round = [t["seconds"] / m["seconds"] for m, t in zip(passes[mine], passes[theirs])]
        out[f"{mine}/{theirs}"] = round(statistics.median(per_round), 3)
        if batch_size == 1:
            best = {n: min(x["seconds"] / len(x["outputs"]) for x in passes[n]) for n in (mine, theirs)}
            out[f"{mine}/{theirs}_time_per_sentence"] = round(best[mine] / best[theirs], 3)
    return out


def summarize(results: dict[int, dict[str, list[dict]]], rounds: int) -> tuple[dict, dict]:
    """Per batch size, each engine's best pass ({sentences, seconds, tokens, sent_s, tok_s, ms_per_sentence,
    same_as_ours_fp32: the fraction of sentences with ours_fp32's tokens}) and the speed ratios. An engine that did
    not decode every round at a batch size is left out there."""
    figures, ratios = {}, {}
    for bs, by_engine in results.items():
        passes = {name: rs for name, rs in by_engine.items() if rs and len(rs) == rounds}
        best = {name: min(rs, key=lambda x: x["seconds"]) for name, rs in passes.items()}
        ref = best.get(REFERENCE)
        figures[bs] = {}
        for name, x in best.items():
            n = len(x["outputs"])
            f = {
                "sentences": n, "seconds": round(x["seconds"], 4), "tokens": x["tokens"],
                "sent_s": round(n / x["seconds"], 1), "tok_s": round(x["tokens"] / x["seconds"], 1),
                "ms_per_sentence": round(1000 * x["seconds"] / n, 3),
            }  # fmt: skip
            if ref is not None:
                f[f"same_as_{REFERENCE}"] = round(same(x["outputs"], ref["outputs"]), 4)
            figures[bs][name] = f
        ratios[bs] = speed_ratios(passes, bs)
    return figures, ratios


def gpu_description() -> dict[str, str]:
    """The GPU's name, its driver (nvidia-smi), and the torch and CUDA it runs with."""
    import torch

    info = {
        "gpu": torch.cuda.get_device_name(0), "driver": "unknown", "torch": torch.__version__,
        "cuda": torch.version.cuda or "none", "cudnn": str(torch.backends.cudnn.version()),
    }  # fmt: skip
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        first = subprocess.run(query, capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()[0]
        info["gpu"], info["driver"] = (x.strip() for x in first.rsplit(",", 1))
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:
        info["driver"] = f"unknown (nvidia-smi: {e})"
    return info


def opus_shape(directory: Path, src: str) -> tuple[str, str]:
    """A Marian model of OPUS-MT's shape with random weights, as bench/make_marian.py builds it, imported as ours into
    directory/imported (built the first time; reused after): its directory, and what its tokenizer was trained on."""
    marian, imported, note = directory / "marian", directory / "imported", directory / "trained_on.txt"
    if (imported / "metadata.json").is_file() and note.is_file():  # metadata.json is the import's last file
        return str(imported), note.read_text().strip()
    data = Path(src).resolve().parent
    if "NMT_TEST_DATA" not in os.environ and (data / "train.en.gz").is_file():
        os.environ["NMT_TEST_DATA"] = str(data)  # the SentencePiece models learn Multi30k's training text
    from model.importers.marian import import_marian
    from tests.importers.marian_fixture import DATA, build_marian

    trained_on = "Multi30k's training text" if (DATA / "train.en.gz").is_file() else "synthetic sentences"
    print(f"building a random Marian model of OPUS-MT's shape in {marian} ...", file=sys.stderr, flush=True)
    build_marian(
        marian, shared=True, seed=0, d_model=512, layers=6, heads=8, ffn=2048, spm_vocab=6000, init_std=0.1,
        vocab_size=58101, lines=29000,
    )  # fmt: skip
    import_marian(marian, imported, {"name": "opus-shape-random", "path": str(marian.resolve())})
    note.write_text(trained_on + "\n")
    return str(imported), trained_on


NLLB_SHAPE = {  # facebook/nllb-200-distilled-600M's config.json, less its weights
    "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16,
    "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "max_position_embeddings": 1024,
    "scale_embedding": True, "activation_function": "relu", "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
    "decoder_start_token_id": 2, "dropout": 0.1, "attention_dropout": 0.1,
}  # fmt: skip
NLLB_PIECES = 256_000  # its SentencePiece model's pieces: NllbTokenizer has 256,204 ids, the model 256,206 rows


def nllb_shape(directory: Path, src: str) -> tuple[str, str]:
    """An M2M100 model of NLLB-200-distilled-600M's shape with random weights, beside an NllbTokenizer whose
    SentencePiece model (trained on Multi30k's training text in en, de and fr) is padded to NLLB's 256,000 pieces with
    pieces no text produces, imported as ours into directory/imported (built the first time; reused after): its
    directory, and what its tokenizer was trained on."""
    source, imported, note = directory / "nllb", directory / "imported", directory / "trained_on.txt"
    if (imported / "metadata.json").is_file() and note.is_file():
        return str(imported), note.read_text().strip()
    data = Path(src).resolve().parent
    if "NMT_TEST_DATA" not in os.environ and (data / "train.en.gz").is_file():
        os.environ["NMT_TEST_DATA"] = str(data)
    import torch
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    from model.importers.m2m100 import import_m2m100
    from model.multilingual_tokenizer import MultilingualTokenizer, spec_from
    from tests.importers.marian_fixture import DATA
    from tests.importers.multilingual_fixture import build_nllb, train_bpe

    trained_on = "Multi30k's training text" if (DATA / "train.en.gz").is_file() else "synthetic sentences"
    print(f"building a random M2M100 model of NLLB-200-distilled-600M's shape in {source} ...", file=sys.stderr,
          flush=True)  # fmt: skip
    source.mkdir(parents=True, exist_ok=True)
    proto = pb.ModelProto.FromString(train_bpe(directory, 8000, "bpe", 29000).read_bytes())
    lowest = min(p.score for p in proto.pieces)
    for i in range(NLLB_PIECES - len(proto.pieces)):  # two private-use characters each, neither a piece alone
        proto.pieces.add(piece=chr(0xF0000 + i // 1024) + chr(0x100000 + i % 1024), score=lowest - 1 - i)
    padded = directory / "padded.model"
    padded.write_bytes(proto.SerializeToString())
    build_nllb(source, padded, legacy=False, src_lang="eng_Latn", tgt_lang="deu_Latn")
    ids = MultilingualTokenizer(spec_from(source)).vocab_size
    torch.manual_seed(0)
    config = M2M100Config(vocab_size=ids + 2, init_std=0.05, **NLLB_SHAPE)
    M2M100ForConditionalGeneration(config).save_pretrained(source)
    import_m2m100(source, imported, {"name": "nllb-shape-random", "path": str(source.resolve())})
    note.write_text(trained_on + "\n")
    return str(imported), trained_on


def race_cuda(args, names: list[str], sizes: list[int], sentences_note: str) -> None:
    """The GPU race: every engine started (those that cannot run recorded), decoding in turns; figures and JSON."""
    from model.checkpoint import read_metadata
    from model.transformer import TransformerConfig

    gpu = gpu_description()
    config = TransformerConfig.from_dict(json.loads((Path(args.model_dir) / "config.json").read_text()))
    meta = read_metadata(args.model_dir)
    model = (
        f"{meta.get('name', Path(args.model_dir).name)}: d_model {config.d_model}, {config.n_encoder_layers}+"
        f"{config.n_decoder_layers} layers, {config.n_heads} heads, FFN {config.d_ff}, vocabulary {config.tgt_vocab_size}"
    )
    print(f"GPU: {gpu['gpu']}, driver {gpu['driver']}; torch {gpu['torch']}, CUDA {gpu['cuda']}, cuDNN {gpu['cudnn']}")
    print(f"model: {model} ({args.model_dir})")
    print(f"sentences: {sentences_note}", flush=True)
    unavailable: dict[str, str] = {}
    source = marian_source(args.model_dir)

    def instead_of_ct2(failed: dict[str, str]) -> list[str]:
        """transformers' Marian on the same weights, when every CT2 engine asked for failed on a Marian import."""
        ct2s = [n for n in names if n.startswith("ct2_")]
        if not ct2s or any(n not in failed for n in ct2s) or any(n.startswith("hf_") for n in names):
            return []
        if source is None:
            print("no transformers fallback: the model was not imported from a local Marian directory", flush=True)
            return []
        print(f"racing transformers' MarianMTModel.generate on {source} instead", flush=True)
        return HF_ENGINES

    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as ct2_dir:
        wanted = list(names)
        if any(n.startswith("ct2_") for n in names):
            try:
                convert_for_ct2(args.model_dir, ct2_dir)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded; the race goes on without CT2
                for n in names:
                    if n.startswith("ct2_"):
                        unavailable[n] = f"converting: {type(e).__name__}: {e}"
                wanted = [n for n in names if n not in unavailable]
        results = measure(args, wanted, sizes, ct2_dir, unavailable, instead_of_ct2)
    for error in dict.fromkeys(e for n, e in unavailable.items() if n.startswith("ct2_")):
        which = ", ".join(n for n, e in unavailable.items() if e == error)
        print(f"ct2 on cuda: unavailable: {error} ({which})", flush=True)
    for name, error in unavailable.items():
        if not name.startswith("ct2_"):
            print(f"{name} on cuda: unavailable: {error}", flush=True)

    figures, ratios = summarize(results, args.rounds)
    for bs in sizes:
        if not figures[bs]:
            continue
        n = max(f["sentences"] for f in figures[bs].values())
        print(f"batch {bs} ({n} sentences, greedy, each engine in its own process, best of {args.rounds} "
              f"round{'s' * (args.rounds > 1)})", flush=True)  # fmt: skip
        for name, f in figures[bs].items():
            match = (
                f" same tokens as {REFERENCE} {f[f'same_as_{REFERENCE}']:.1%}" if f"same_as_{REFERENCE}" in f else ""
            )
            per = f" {f['ms_per_sentence']:>8.2f} ms/sentence" if bs == 1 else ""
            print(f"  {name:<16} {f['sent_s']:>9} sent/s {f['tok_s']:>10} tok/s{per}{match}")
        if ratios[bs]:
            print("  " + " | ".join(f"{k} = {v}x" for k, v in ratios[bs].items()), flush=True)
    print("  (ours/theirs: ours' sentences/s over theirs, median of the rounds; _time_per_sentence: ours' time per "
          "sentence over theirs)")  # fmt: skip
    print(json.dumps({
        "device": "cuda", **gpu, "model": model, "model_dir": args.model_dir, "sentences": sentences_note,
        "rounds": args.rounds, "results": figures, "ratios": ratios, "unavailable": unavailable,
    }))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = corpus_arguments(__doc__)
    p.add_argument("--rounds", type=int, help="passes per engine and batch size, the engines taking turns (default: "
                   "3; with --device cuda, 1)")  # fmt: skip
    p.add_argument(
        "--engines",
        help=f"comma-separated subset of {ENGINES} (default: all but {','.join(ON_REQUEST)}; with --beam, "
        f"{','.join(BEAM_ENGINES)}); with "
        f"--device cuda of {CUDA_ENGINES + HF_ENGINES} (default: {','.join(CUDA_ENGINES)}, then {','.join(HF_ENGINES)} "
        "where CT2 fails on a model imported from Marian)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: the greedy race on the GPU")
    p.add_argument("--limit-batch1", type=int, help="batch 1 decodes only the first N of the --limit sentences "
                   "(default: all on the CPU, 50 with --device cuda; 0 = all)")  # fmt: skip
    p.add_argument("--model", choices=("checkpoint", "opus-shape", "nllb-shape"), default="checkpoint",
                   help="checkpoint: --model-dir; opus-shape: a random Marian model of OPUS-MT's shape; nllb-shape: a "
                   "random M2M100 of NLLB-200-distilled-600M's (built in nmt-nllb-shape beside --opus-dir)")  # fmt: skip
    p.add_argument("--opus-dir", type=Path, default=Path(tempfile.gettempdir()) / "nmt-opus-shape",
                   help="with --model opus-shape: where it is built and imported once, and reused")  # fmt: skip
    p.add_argument("--beam", type=int, default=1, help="beam size: 1 races greedy decoding, N > 1 beam search")
    p.add_argument("--ref", help="the reference translations of --src (plain or .gz): also print each engine's BLEU")
    p.add_argument("--isa", choices=sorted(ISA_LIMITS), help="keep every engine to these instructions (ISA_LIMITS)")
    p.add_argument(
        "--length-penalty", type=float, default=1.0, help="with --beam N > 1: score = log-probability / length ** P"
    )
    p.add_argument("--baseline", type=Path, help="another checkout of the project (git worktree add DIR REV): the "
                   f"engines of ours named with {BASE!r} run from it, in the same rounds")  # fmt: skip
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one engine in this process
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)  # internal: the converted model
    p.set_defaults(batch_sizes=None, limit=None)  # by device (DEFAULTS)
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.worker:
        return worker(args)

    if args.beam < 1:
        p.error("--beam must be at least 1")
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: at least 1")
    if args.limit_batch1 < 0:
        p.error(f"--limit-batch1 {args.limit_batch1}: a number of sentences, at least 0 (0 = all)")
    check_corpus(p, args, model_dir=args.model == "checkpoint")  # the others are built in --opus-dir's place
    require_files(p, ref=args.ref)
    if args.device == "cuda":
        return main_cuda(p, args)
    default = [n for n in ENGINES if n not in ON_REQUEST]
    names = args.engines.split(",") if args.engines else BEAM_ENGINES if args.beam > 1 else default
    if unknown := [n for n in names if n.removesuffix(BASE) not in ENGINES]:
        p.error(f"unknown engines {unknown}: choose from {ENGINES}")
    if based := [n for n in names if n.endswith(BASE)]:
        if args.baseline is None or not (args.baseline / "bench" / "peers.py").is_file():
            p.error(f"{based} run from --baseline DIR, a checkout of the project (git worktree add DIR REV)")
        if others := [n for n in based if not n.startswith("ours_")]:
            p.error(f"{others}: only our engines run from --baseline")
    if args.beam > 1 and (compiled := [n for n in names if n.removesuffix(BASE) in NO_BEAM]):
        p.error(
            f"{compiled}: the logit screen is greedy decoding's; beam search runs ours_compiled (or ours_eager, ours_int8)"
        )
    if ct2s := [n for n in names if n.startswith("ct2_")]:
        others = [n for n in names if n not in ct2s] or ["ours_compiled", "ours_eager"]
        if why := ct2_missing(f"leave the ct2_* engines out (--engines {','.join(others)})"):
            p.error(f"{', '.join(ct2s)}: {why}")
    if args.model == "opus-shape":
        args.model_dir = opus_shape(args.opus_dir, args.src)[0]
    if args.model == "nllb-shape":
        args.model_dir = nllb_shape(args.opus_dir.with_name("nmt-nllb-shape"), args.src)[0]
    sizes = list(map(int, args.batch_sizes.split(",")))
    decoding = f"beam {args.beam}, length penalty {args.length_penalty:g}" if args.beam > 1 else "greedy"
    cpu = cpu_description() + keep_to(args.isa)  # the engines' processes inherit the limits
    print(f"CPU: {cpu}", flush=True)
    print(f"decoding: {decoding}", flush=True)
    if args.baseline:
        print(f"baseline ({BASE}): {args.baseline} at {commit_of(args.baseline)}; here at {commit_of(ROOT)}",
              flush=True)  # fmt: skip
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
                 ("ours_eager", faster["ct2_fp32"]), ("ours_int8", faster["ct2_int8"]),
                 ("ours_int8_compiled", faster["ct2_int8"]), ("ours_int8_compiled", faster["ct2_fp32"]),
                 ("ours_compiled_judged", "ours_compiled")]  # fmt: skip
        pairs += [(n.removesuffix(BASE), n) for n in names if n.endswith(BASE)]  # this tree over --baseline's
        for mine, theirs in pairs:
            if mine in passes and theirs in passes:  # the same sentences: a speed ratio, per round
                per_round = sorted(t["seconds"] / m["seconds"] for m, t in zip(passes[mine], passes[theirs]))
                row[f"{mine}/{theirs}"] = round(statistics.median(per_round), 2)
                ranges[f"{mine}/{theirs}"] = (per_round[0], per_round[-1])
        reference, identical = agreement(best)
        row["reference"] = reference  # the keys below say ours_fp32 whichever of ours it was
        for name, count in identical.items():
            row[f"match_{name}_vs_ours_fp32"] = round(count / n, 4)
            row[f"identical_{name}_vs_ours_fp32"] = count
        rows.append(row)

        print(f"batch {bs} ({n} sentences, {decoding}, {args.threads} threads, each engine in its own process, best "
              f"of {args.rounds} rounds)", flush=True)  # fmt: skip
        for name in best:
            backend = f" ({BACKEND[name.endswith('_dnnl')]})" if name.startswith("ct2_") else ""
            print(f"  {name:<18} {row[f'{name}_sent_s']:>8} sent/s {row[f'{name}_tok_s']:>9} tok/s{backend}")
        ratios = [f"{k} = {v}x (rounds {ranges[k][0]:.2f}-{ranges[k][1]:.2f})" for k, v in row.items() if "/" in k]
        print("  " + " | ".join(ratios) + " (sentences/s, median of the per-round ratios)")
        print("  " + same_tokens_line(reference, identical, n, args.beam == 1), flush=True)
        if args.ref:
            scores = bleu(args, {name: x["outputs"] for name, x in best.items()})
            row |= {f"{name}_bleu_lc": score for name, score in scores.items()}
            print("  BLEU (sacreBLEU, lowercased) against --ref: "
                  + ", ".join(f"{name} {score:.2f}" for name, score in scores.items()), flush=True)  # fmt: skip
    print(json.dumps(rows))


# the engine whose tokens the others are compared with, the first of these that ran: float32 greedy's tokens (or beam
# search's); ours_compiled last, as it may pick its tokens through the bfloat16 logit screen
REFERENCES = ("ours_eager", "ours_compiled_fp32", "ours_compiled")


def agreement(best: dict[str, dict]) -> tuple[str | None, dict[str, int]]:
    """The reference (REFERENCES' first that ran; None when none did) and, per other engine, how many sentences it
    decoded to the reference's tokens."""
    reference = next((name for name in REFERENCES if name in best), None)
    if reference is None:
        return None, {}
    ref = best[reference]["outputs"]
    return reference, {name: sum(a == b for a, b in zip(x["outputs"], ref)) for name, x in best.items()
                       if name != reference}  # fmt: skip


def same_tokens_line(reference: str | None, identical: dict[str, int], n: int, greedy: bool = True) -> str:
    """What the race prints of `agreement`: the engines compared, or why none were (greedy: ours_compiled screens
    its logits; beam search's does not)."""
    if reference is None:
        return (f"same tokens: not compared: no float32 engine of ours ran (one of {', '.join(REFERENCES)}; "
                "add one to --engines)")  # fmt: skip
    screened = reference == "ours_compiled" and greedy
    what = "with the bfloat16 logit screen where the CPU has bfloat16 matmuls" if screened else "float32"
    if not identical:
        return f"same tokens: not compared: only {reference} ran"
    matches = ", ".join(f"{name} {count / n:.1%} ({count}/{n})" for name, count in identical.items())
    return f"same tokens as {reference} ({what}): {matches}"


def bleu(args, outputs: dict[str, list[list[int]]]) -> dict[str, float]:
    """Each engine's corpus BLEU (lowercased) against --ref; the outputs are in load_corpus's length-sorted order."""
    from sacrebleu import corpus_bleu

    from model.tokenizer import load_tokenizer, read_lines

    tok = load_tokenizer(args.model_dir)
    sentences = read_sentences(args)
    refs = list(read_lines(args.ref))[: len(sentences)]
    encoded = tok.encode_batch(sentences)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # stable, as load_corpus's sort
    refs = [refs[i] for i in order]
    return {name: round(corpus_bleu(tok.decode_batch(ids), [refs], lowercase=True).score, 2)
            for name, ids in outputs.items()}  # fmt: skip


def main_cuda(p: argparse.ArgumentParser, args) -> None:
    """--device cuda: check what was asked, then race_cuda."""
    if args.beam != 1:
        p.error("--device cuda races greedy decoding only: leave out --beam")
    names = args.engines.split(",") if args.engines else CUDA_ENGINES
    if unknown := [n for n in names if n not in CUDA_ENGINES + HF_ENGINES]:
        p.error(f"unknown engines {unknown} for --device cuda: choose from {CUDA_ENGINES + HF_ENGINES}")
    if why := cuda_missing(args.device, "leave out --device for the CPU race"):
        p.error(why)
    sizes = list(map(int, args.batch_sizes.split(",")))
    note = f"first {args.limit or 'all'} of {args.src}"
    if 1 in sizes and args.limit_batch1:
        note += f" (first {args.limit_batch1} at batch 1)"
    if args.model == "opus-shape":
        args.model_dir, trained_on = opus_shape(args.opus_dir, args.src)
        note += f", tokenized by the random model's SentencePiece models (trained on {trained_on})"
    else:
        note += ", tokenized by the model's tokenizer"
    race_cuda(args, names, sizes, note)


if __name__ == "__main__":
    main()
