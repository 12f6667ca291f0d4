"""nmt-eval: translate a file with KV-cached greedy decoding (or beam search, --beam N) and score it with sacreBLEU."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import sacrebleu
import torch

from model.batch import decode
from model.decoding import greedy_decode, max_new_tokens_for
from model.search import DecodingOptions
from model.tokenizer import Tokenizer, lines_or_exit
from model.transformer import Transformer


@torch.inference_mode()
def translate_corpus(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    batch_size: int = 64,
    max_new_tokens: int | None = None,
) -> list[str]:
    """Greedy-translate sentences in length-sorted batches; returns them in input order."""
    device = next(model.parameters()).device
    encoded = tokenizer.encode_batch(sentences, side="source")
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        idx = [i for i in idx if sentences[i].strip()]
        if not idx:
            continue
        width = max(len(encoded[i]) for i in idx)
        src = torch.full((len(idx), width), model.config.source_pad_id, dtype=torch.long)
        for row, i in enumerate(idx):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        budget = max_new_tokens or max_new_tokens_for(width)
        hyps = greedy_decode(model, src.to(device), budget)
        for i, text in zip(idx, tokenizer.decode_batch([h.tokens for h in hyps])):
            out[i] = text
    return out


@torch.inference_mode()
def beam_translate_corpus(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    beam_size: int,
    length_penalty: float = 1.0,
    batch_size: int = 64,
    n_best: int = 1,
) -> list[list[tuple[str, float]]]:
    """Beam-search sentences with model.batch.decode (length-sorted batches of `batch_size` sources, beam_size rows
    each); each source's budget is max_new_tokens_for its own length. Returns each source's `n_best` hypotheses,
    best first, as (text, score), in input order (an empty source: one empty hypothesis scored 0)."""
    encoded = tokenizer.encode_batch(sentences, side="source")
    idx = [i for i, s in enumerate(sentences) if s.strip()]
    options = DecodingOptions(beam_size=beam_size, num_hypotheses=n_best, length_penalty=length_penalty)
    hyps = decode(
        model, [encoded[i] for i in idx], [max_new_tokens_for(len(encoded[i])) for i in idx], options,
        max_rows=batch_size * beam_size,
    )  # fmt: skip
    out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sentences]
    for i, found in zip(idx, hyps):
        texts = tokenizer.decode_batch([h.tokens for h in found[:n_best]])
        out[i] = [(t, h.score) for t, h in zip(texts, found)]
    return out


def closest_to_reference(nbest: list[list[tuple[str, float]]], refs: list[str]) -> list[str]:
    """For each source, the one of its n-best hypotheses with the highest sentence BLEU against its reference (the
    model's order breaks ties): sequence-level interpolation (Kim and Rush, 2016), distillation targets that stay
    the teacher's own output yet lean towards the human translation."""
    bleu = sacrebleu.BLEU(effective_order=True)
    return [
        max(enumerate(hyps), key=lambda h: (bleu.sentence_score(h[1][0], [ref]).score, -h[0]))[1][0]
        for hyps, ref in zip(nbest, refs)
    ]


def decoding_description(beam: int, length_penalty: float) -> str:
    return "greedy, KV cache" if beam == 1 else f"beam {beam}, length penalty {length_penalty:g}"


def score(hyps: list[str], refs: list[str]) -> dict[str, float]:
    return {
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "bleu_lc": round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
    }


def writable_or_exit(path: str, flag: str) -> None:
    """Exits if the file `flag` names cannot be written: said before the decoding, not after the whole corpus."""
    file, directory = Path(path), Path(path).parent
    if file.is_dir():
        sys.exit(f"nmt-eval: {flag} {path} is a directory: give the name of a file to write")
    if not directory.is_dir():
        sys.exit(f"nmt-eval: {flag} {path}: there is no directory {directory}; give a file in an existing directory")
    if not os.access(file if file.exists() else directory, os.W_OK):
        sys.exit(f"nmt-eval: {flag} {path}: permission denied; give a file you can write")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="nmt-eval", description=__doc__)
    p.add_argument(
        "--model-dir", required=True, nargs="+",
        help="a checkpoint; several with one vocabulary decode as an ensemble (the log of their mean probabilities: "
        "model/ensemble.py), e.g. a teacher for distillation",
    )  # fmt: skip
    p.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    p.add_argument("--ref", help="reference translations, one a line (plain or .gz): score against them")
    p.add_argument(
        "--hyp-out",
        help="write the translations here, one a line (without --ref it only translates: e.g. a training set's "
        "sources, for sequence-level distillation)",
    )
    p.add_argument("--batch-size", type=int, default=64, help="sources decoded together")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy decoding)")
    p.add_argument(
        "--length-penalty", type=float, default=1.0,
        help="with --beam > 1: a hypothesis's score is its summed log-probabilities / length ** P (</s> counted)",
    )  # fmt: skip
    p.add_argument(
        "--n-best", type=int, default=1,
        help="with --beam: keep the N best hypotheses of each source (--n-best-out, --closest-out)",
    )  # fmt: skip
    p.add_argument(
        "--n-best-out", metavar="FILE",
        help="write each source's --n-best hypotheses here, best first, as 'index ||| text ||| score' lines (Moses's "
        "and Marian's n-best format; index from 0)",
    )  # fmt: skip
    p.add_argument(
        "--closest-out", metavar="FILE",
        help="with --ref and --n-best: write, for each source, the one of its n-best hypotheses with the highest "
        "sentence BLEU against its reference, one a line (sequence-level interpolation, for distillation)",
    )  # fmt: skip
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    p.add_argument(
        "--quantize",
        choices=("none", "int8"),
        default="none",
        help="int8: the linear layers in int8, as NMT_QUANTIZE=int8 serves them (model/quantize.py)",
    )
    p.add_argument(
        "--record", metavar="NAME", help="also store the scores in the checkpoint's metadata.json under scores.NAME"
    )
    args = p.parse_args(argv)
    if args.beam < 1:
        p.error("--beam must be at least 1")
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    if args.threads < 0:
        p.error("--threads must be 0 (torch's default) or more")
    if not args.ref and not args.hyp_out and not args.n_best_out:
        p.error("give --ref to score the translations, --hyp-out (or --n-best-out) to keep them, or both")
    if args.record and not args.ref:
        p.error("--record stores scores: it needs --ref")
    if args.record and len(args.model_dir) > 1:
        p.error("--record stores one checkpoint's scores, not an ensemble's")
    if not 1 <= args.n_best <= args.beam:
        p.error(f"--n-best must be between 1 and --beam ({args.beam})")
    if args.n_best > 1 and not (args.n_best_out or args.closest_out):
        p.error("--n-best keeps hypotheses for --n-best-out or --closest-out: give one of them")
    if args.n_best_out and args.n_best == 1:
        p.error("--n-best-out writes the n-best lists: give --n-best N > 1 (and --beam N or more)")
    if args.closest_out and not (args.ref and args.n_best > 1):
        p.error("--closest-out picks among n-best hypotheses by their references: it needs --ref and --n-best > 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this torch has no CUDA device; use --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)

    from model.checkpoint import CheckpointError, load_checkpoint

    src = lines_or_exit(args.src, "nmt-eval")  # the files first: one it cannot read is said before the model loads
    refs = lines_or_exit(args.ref, "nmt-eval") if args.ref else None
    if not src:  # sacrebleu has nothing to score either (an IndexError)
        sys.exit(f"nmt-eval: {args.src} is empty: give a file of one source sentence a line")
    if refs is not None and len(src) != len(refs):
        sys.exit(f"nmt-eval: {args.src} has {len(src)} lines but {args.ref} has {len(refs)}")
    for flag in ("hyp_out", "n_best_out", "closest_out"):
        if getattr(args, flag):
            writable_or_exit(getattr(args, flag), f"--{flag.replace('_', '-')}")
    try:
        loaded = [load_checkpoint(d, device=args.device)[:2] for d in args.model_dir]
    except CheckpointError as e:
        sys.exit(f"nmt-eval: {e}")
    model, tokenizer = loaded[0]
    if args.quantize == "int8":
        from model.quantize import quantize_int8

        for member, _ in loaded:
            quantize_int8(member)
    if len(loaded) > 1:
        from model.ensemble import Ensemble

        specs = {t.hf.to_str() if hasattr(t, "hf") else None for _, t in loaded}
        if len(specs) > 1 or None in specs:
            sys.exit("nmt-eval: an ensemble's checkpoints must share one BPE vocabulary (the same tokenizer.json)")
        model = Ensemble([member for member, _ in loaded])
    t0 = time.perf_counter()
    if args.beam == 1 and len(loaded) == 1:
        hyps = translate_corpus(model, tokenizer, src, batch_size=args.batch_size)
    else:
        nbest = beam_translate_corpus(
            model, tokenizer, src, args.beam, args.length_penalty, batch_size=args.batch_size, n_best=args.n_best
        )
        hyps = [found[0][0] for found in nbest]
        if args.closest_out:
            with open(args.closest_out, "w", encoding="utf-8") as f:
                f.writelines(text + "\n" for text in closest_to_reference(nbest, refs))
        if args.n_best_out:
            with open(args.n_best_out, "w", encoding="utf-8") as f:
                f.writelines(
                    f"{i} ||| {text} ||| {value:.6f}\n" for i, found in enumerate(nbest) for text, value in found
                )
    seconds = time.perf_counter() - t0
    if args.hyp_out:
        with open(args.hyp_out, "w", encoding="utf-8") as f:
            f.writelines(h + "\n" for h in hyps)
    decoding = decoding_description(args.beam, args.length_penalty) + (", int8" if args.quantize == "int8" else "")
    result = {
        **(score(hyps, refs) if refs is not None else {}),
        "sentences": len(src),
        "seconds": round(seconds, 2),
        "decoding": decoding,
    }
    if len(loaded) > 1:
        result["decoding"] += f", ensemble of {len(loaded)}"
    if args.record:
        from model.checkpoint import read_metadata, write_metadata

        meta = read_metadata(args.model_dir[0])
        meta.setdefault("scores", {})[args.record] = {**result, "src": args.src}
        write_metadata(args.model_dir[0], meta)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
