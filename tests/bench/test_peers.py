"""bench/peers.py's GPU race, as far as it runs without a GPU: its refusal, its engines on the CPU, its arithmetic."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import decode, peers
from model.checkpoint import load_checkpoint
from model.decoding import max_new_tokens_for
from tests.bench.helpers import refused, without_ctranslate2
from tests.importers.marian_fixture import held_out_sentences

BENCH = Path(__file__).resolve().parents[2] / "bench"

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no CUDA device")


@no_gpu
def test_device_cuda_is_refused_with_a_clear_message_where_there_is_no_gpu(tmp_path):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    done = subprocess.run(
        [sys.executable, str(BENCH / "peers.py"), "--device", "cuda", "--src", str(src)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--device cuda: PyTorch finds no CUDA device here" in done.stderr
    assert "leave out --device" in done.stderr
    assert not done.stdout  # refused before anything was built or printed


@pytest.mark.parametrize("args, message", [
    (["--engines", "ours_fp32,ct2_int8"], "unknown engines ['ct2_int8'] for --device cuda"),
    (["--beam", "4"], "--device cuda races greedy decoding only"),
])  # fmt: skip
def test_device_cuda_refuses_what_it_does_not_race(tmp_path, args, message):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    done = subprocess.run(
        [sys.executable, str(BENCH / "peers.py"), "--device", "cuda", "--src", str(src), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr


def batches_of(encoded: list[list[int]], size: int) -> list[list[list[int]]]:
    corpus = peers.corpus_for(encoded, size)
    return [corpus[i : i + size] for i in range(0, len(corpus), size)]


@pytest.mark.parametrize("layout", ["shared", "separate"])
def test_transformers_generate_gives_our_greedy_tokens_and_counts(marian_models, layout):
    """hf_engine on the Marian directory and ours on its import: the same tokens and token counts per sentence, at
    batch 1 and in padded batches, with the race's budgets and with one short enough to end sentences."""
    hf_dir, ours_dir = marian_models[layout]
    _, tok, _ = load_checkpoint(ours_dir)
    encoded = tok.encode_batch(held_out_sentences("en")[:48])
    longest = max(map(len, encoded))
    theirs = peers.hf_engine(str(ours_dir), "cpu", torch.float32)
    ours = peers.ours_on(str(ours_dir), "cpu", torch.float32, 16, longest, graphs=False)
    for size in (1, 16):
        batches = batches_of(encoded, size)
        _, ours_tokens, ours_out = peers.run(ours, batches)
        _, their_tokens, their_out = peers.run(theirs, batches)
        assert their_out == ours_out
        assert their_tokens == ours_tokens
    short = 5  # the forced </s> is the 5th token: at most 4 of the model's own
    ours_short, theirs_short = ours(encoded[:16], short), theirs(encoded[:16], short)
    assert theirs_short == ours_short
    assert any(len(ids) == short - 1 and n == short - 1 for ids, n in ours_short)  # reached the budget
    assert all(len(ids) < short for ids, _ in ours_short)


def test_a_checkpoint_not_imported_from_marian_has_no_transformers_engine(tiny_checkpoint):
    assert peers.marian_source(str(tiny_checkpoint)) is None
    with pytest.raises(peers.Unavailable, match="not imported from a local Marian directory"):
        peers.hf_engine(str(tiny_checkpoint), "cpu", torch.float32)


def test_emulated_graphs_decode_as_the_eager_step(tiny_checkpoint, tokenizer):
    from tests.synthetic import synthetic_pairs

    encoded = tokenizer.encode_batch([en for en, _ in synthetic_pairs(12, seed=3)])
    longest = max(map(len, encoded))
    args = (str(tiny_checkpoint), "cpu", torch.float32, 4, longest)
    eager = peers.ours_on(*args, graphs=False)
    graphed = peers.ours_on(*args, graphs=True, log=lambda m: None, emulate=True)
    batches = batches_of(encoded, 4)
    assert peers.run(graphed, batches)[1:] == peers.run(eager, batches)[1:]


def test_batch_1_takes_the_first_sentences_of_the_file_and_every_corpus_is_length_sorted():
    encoded = [[1] * n for n in (5, 2, 9, 3, 7, 1)]
    assert peers.corpus_for(encoded, 1, 3) == [[1] * 2, [1] * 5, [1] * 9]
    assert peers.corpus_for(encoded, 32, 3) == sorted(encoded, key=len)
    assert peers.corpus_for(encoded, 1) == sorted(encoded, key=len)


def passes(seconds: list[float], outputs: list[list[int]], tokens: int = 10) -> list[dict]:
    return [{"seconds": s, "tokens": tokens, "outputs": outputs} for s in seconds]


def test_ratios_are_the_median_over_rounds_against_the_first_peer_that_ran():
    out = [[1], [2], [3], [4]]
    results = {
        1: {
            "ours_fp32": passes([2.0, 2.0], out), "ours_fp16": passes([1.0, 2.0], out),
            "hf_fp16": passes([3.0, 4.0], [[1], [2], [0], [0]]), "hf_fp32": passes([4.0, 8.0], out),
            "ours_eager_fp16": passes([5.0, 5.0], out),
        },
        32: {
            "ours_fp32": passes([1.0, 1.0], out), "ours_fp16": passes([1.0, 1.0], out),
            "ct2_fp16": passes([2.0, 2.0], out), "hf_fp16": passes([9.0, 9.0], out),
            "ct2_int8_fp16": passes([0.5], out),  # one round of two: left out
        },
    }  # fmt: skip
    figures, ratios = peers.summarize(results, rounds=2)
    assert ratios[1]["ours_fp16/hf_fp16"] == 2.5  # rounds: 3/1 and 4/2
    assert ratios[1]["ours_fp32/hf_fp32"] == 3.0  # rounds: 4/2 and 8/2
    assert ratios[1]["ours_fp16/ours_eager_fp16"] == 3.75  # rounds: 5/1 and 5/2
    assert ratios[1]["ours_fp16/hf_fp16_time_per_sentence"] == round(0.25 / 0.75, 3)  # the best passes': 1 s, 3 s
    assert "ours_bf16/hf_fp16" not in ratios[1]
    assert ratios[32]["ours_fp16/ct2_fp16"] == 2.0  # CT2 where it ran, not transformers
    assert not any(k.endswith("_time_per_sentence") for k in ratios[32])
    assert "ct2_int8_fp16" not in figures[32] and not any("ct2_int8_fp16" in k for k in ratios[32])
    hf = figures[1]["hf_fp16"]
    assert hf["same_as_ours_fp32"] == 0.5 and figures[1]["ours_fp16"]["same_as_ours_fp32"] == 1.0
    assert (hf["sentences"], hf["seconds"], hf["sent_s"], hf["tok_s"], hf["ms_per_sentence"]) == (4, 3.0, 1.3, 3.3, 750)


def test_without_the_reference_there_is_no_agreement_but_there_are_figures():
    figures, _ = peers.summarize({1: {"ours_fp16": passes([1.0], [[1]])}}, rounds=1)
    assert figures[1]["ours_fp16"]["sent_s"] == 1.0 and "same_as_ours_fp32" not in figures[1]["ours_fp16"]


class FakeChild:
    def __init__(self, stdout: str, code: int = 1, tail: tuple[str, ...] = ()):
        self.stdout, self.code, self.stderr_tail = io.StringIO(stdout), code, tail

    def wait(self):
        return self.code


def test_an_engine_error_or_a_crash_reads_as_unavailable_with_its_message():
    child = FakeChild('loading\n{"error": "RuntimeError: Library libcublas.so.12 is not found or cannot be loaded"}\n')
    with pytest.raises(peers.Unavailable, match=r"^RuntimeError: Library libcublas\.so\.12 is not found"):
        peers.answer(child)
    crashed = FakeChild("", -6, ("what():  cuda error", "Aborted"))
    with pytest.raises(peers.Unavailable, match=r"exited with -6: what\(\):  cuda error \| Aborted"):
        peers.answer(crashed)
    assert peers.answer(FakeChild('noise\n{"ready": true}\n')) == {"ready": True}


def test_the_race_goes_on_without_an_engine_that_fails_and_starts_the_fallback(monkeypatch):
    """measure with `unavailable`: a failed start is recorded, the fallback is asked with the failures, and an engine
    failing at one batch size keeps its earlier figures."""
    monkeypatch.setattr(peers, "stop_worker", lambda child: None)

    def start_worker(args, name, ct2_dir):
        if name.startswith("ct2_"):
            raise peers.Unavailable("RuntimeError: no libcublas.so.12")
        return name

    def decode_once(child, bs):
        if child == "hf_fp32" and bs == 32:
            raise peers.Unavailable("CUDA out of memory")
        return {"seconds": 1.0, "tokens": 1, "outputs": [[bs]]}

    monkeypatch.setattr(peers, "start_worker", start_worker)
    monkeypatch.setattr(peers, "decode_once", decode_once)
    asked = []

    def fallback(failed):
        asked.append(dict(failed))
        return peers.HF_ENGINES

    class Args:
        rounds = 1

    unavailable = {}
    results = peers.measure(Args, ["ours_fp32", "ct2_fp16"], [1, 32], "", unavailable, fallback)
    assert asked == [{"ct2_fp16": "RuntimeError: no libcublas.so.12"}]
    assert unavailable == {"ct2_fp16": "RuntimeError: no libcublas.so.12", "hf_fp32": "at batch 32: CUDA out of memory"}
    assert set(results[1]) == {"ours_fp32", "hf_fp32", "hf_fp16"} and len(results[1]["hf_fp32"]) == 1
    figures, _ = peers.summarize(results, rounds=1)
    assert set(figures[32]) == {"ours_fp32", "hf_fp16"}


def test_budgets_are_the_same_rule_for_every_engine():
    seen = []

    def engine(batch, budget):
        seen.append(budget)
        return [([], 1) for _ in batch]

    peers.run(engine, [[[1] * 3, [1] * 7], [[1] * 20]])
    assert seen == [max_new_tokens_for(7), max_new_tokens_for(20)]


def test_the_judged_engine_decodes_the_same_and_judges_each_sentence_as_the_server_does(tiny_checkpoint, tokenizer):
    """ours_compiled_judged's extra work (bench/peers.py judging()) is the server's assessment of each sentence."""
    from model.confidence import assess, signals
    from tests.synthetic import synthetic_pairs

    model, _, _ = load_checkpoint(tiny_checkpoint)
    sentences = [en for en, _ in synthetic_pairs(6, seed=4)]
    encoded = tokenizer.encode_batch(sentences)
    judge, seen = peers.judging(str(tiny_checkpoint), tokenizer, sentences), []
    plain = peers.ours(model, model.config.source_pad_id)
    judged = peers.ours(model, model.config.source_pad_id, judge=lambda ids, h: seen.append((judge(ids, h), ids, h)))
    batch = encoded[:3]
    assert judged(batch, 12) == plain(batch, 12)
    assert [ids for _, ids, _ in seen] == batch
    for quality, ids, h in seen:
        source = sentences[encoded.index(ids)]
        target = tokenizer.decode(h.tokens)
        assert h.attention and len(h.attention) == len(h.aligned) == len(h.logprobs)
        assert quality == assess(
            signals(ids, h.tokens, h.logprobs, source, target, None, 0, h.attention, h.aligned), None
        )


def test_an_engine_named_at_base_runs_from_the_baseline_checkout_in_the_same_rounds(tiny_checkpoint, tmp_path):
    """--baseline DIR: "ours_eager@base" decodes with DIR's code (here a copy of this tree that says so as it starts),
    beside ours_eager from this tree, and the race prints this tree's speed over DIR's with the tokens compared."""
    root = BENCH.parent
    before = tmp_path / "before"
    for part in ("bench", "model"):
        shutil.copytree(root / part, before / part, ignore=shutil.ignore_patterns("__pycache__"))
    script = before / "bench" / "peers.py"
    future, says = "from __future__ import annotations\n", 'import sys\nprint("the baseline copy", sys.argv[0], file=sys.stderr)\n'
    script.write_text(script.read_text().replace(future, future + says, 1))
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\nTwo men are talking on the street.\nA child plays.\n")
    command = [sys.executable, str(BENCH / "peers.py"), "--model-dir", str(tiny_checkpoint), "--src", str(src),
               "--rounds", "2", "--batch-sizes", "1,2", "--threads", "1", "--engines", "ours_eager,ours_eager@base"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2 and "run from --baseline DIR" in refused.stderr
    done = subprocess.run([*command, "--baseline", str(before)], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count(f"the baseline copy {script}") == 1  # one engine from it, started once
    assert f"baseline (@base): {before} at unknown" in done.stdout  # not a git checkout
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    for row in rows:
        assert row["ours_eager/ours_eager@base"] > 0 and row["identical_ours_eager@base_vs_ours_fp32"] == 3


def refusal(capsys, argv: list[str]) -> str:
    return refused(capsys, peers.main, argv)


def test_files_that_are_not_there_are_refused_at_the_start(tmp_path, tiny_checkpoint, capsys):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    ours = ["--model-dir", str(tiny_checkpoint), "--engines", "ours_eager"]
    assert f"--ref {tmp_path / 'ref.de'}: no such file" in refusal(
        capsys, [*ours, "--src", str(src), "--ref", str(tmp_path / "ref.de")]
    )
    assert f"--src {tmp_path / 'none.en'}: no such file" in refusal(capsys, [*ours, "--src", str(tmp_path / "none.en")])
    missing = tmp_path / "no-model"
    assert f"--model-dir {missing}: no such directory" in refusal(
        capsys, ["--model-dir", str(missing), "--src", str(src)]
    )
    assert f"--model-dir {tmp_path}: not a checkpoint directory (it has no config.json)" in refusal(
        capsys, ["--model-dir", str(tmp_path), "--src", str(src)]
    )


@pytest.mark.parametrize("value", ["0", "1,0", "1,x", "1,,32", "-32"])
@pytest.mark.parametrize("script", [peers, decode], ids=["peers", "decode"])
def test_batch_sizes_below_one_or_not_numbers_are_refused(tmp_path, script, value, capsys):
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    err = refused(capsys, script.main, ["--src", str(src), f"--batch-sizes={value}"])
    assert f"argument --batch-sizes: {value!r}: comma-separated whole numbers, each at least 1" in err


def test_without_ctranslate2_its_engines_are_refused_before_any_work(tmp_path, tiny_checkpoint, monkeypatch, capsys):
    without_ctranslate2(monkeypatch)
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\n")
    err = refusal(capsys, ["--model-dir", str(tiny_checkpoint), "--src", str(src), "--engines", "ct2_fp32,ours_eager"])
    assert "ct2_fp32: CTranslate2 is not installed: install the bench extra (bash scripts/install.sh bench)" in err
    assert "leave the ct2_* engines out (--engines ours_eager)" in err
    err = refusal(capsys, ["--model-dir", str(tiny_checkpoint), "--src", str(src)])  # the default engines
    assert "ct2_fp32, ct2_fp32_dnnl, ct2_int8, ct2_int8_dnnl: CTranslate2 is not installed" in err


def best(**outputs: list[list[int]]) -> dict[str, dict]:
    return {name: {"outputs": out} for name, out in outputs.items()}


def test_same_tokens_names_the_engines_compared_and_says_when_none_could_be():
    a, b = [[1], [2], [3], [4]], [[1], [2], [0], [4]]
    reference, identical = peers.agreement(best(ct2_fp32=b, ours_compiled=a, ours_eager=a))
    assert (reference, identical) == ("ours_eager", {"ct2_fp32": 3, "ours_compiled": 4})
    assert peers.same_tokens_line(reference, identical, 4) == (
        "same tokens as ours_eager (float32): ct2_fp32 75.0% (3/4), ours_compiled 100.0% (4/4)"
    )
    reference, identical = peers.agreement(best(ct2_fp32=b, ours_compiled=a))  # the screened one is all there is
    line = peers.same_tokens_line(reference, identical, 4)
    assert line.startswith("same tokens as ours_compiled (with the bfloat16 logit screen") and "ct2_fp32 75.0%" in line
    assert "(float32)" in peers.same_tokens_line(reference, identical, 4, greedy=False)  # beam search screens nothing
    assert peers.agreement(best(ct2_fp32=a, ct2_int8=b)) == (None, {})
    assert peers.same_tokens_line(None, {}, 4).startswith("same tokens: not compared: no float32 engine of ours ran")
    alone = peers.same_tokens_line(*peers.agreement(best(ours_eager=a)), 4)
    assert alone == "same tokens: not compared: only ours_eager ran"


def test_limit_batch1_says_it_applies_on_the_cpu_too(capsys):
    with pytest.raises(SystemExit):
        peers.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "batch 1 decodes only the first N of the --limit sentences (default: all on the CPU, 50 with --device cuda" \
        in text  # fmt: skip
