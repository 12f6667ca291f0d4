"""nmt-eval --beam N: beam search through model.batch.decode, the same hypotheses as the reference search; n-best
lists and the hypotheses closest to the references, for distillation."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import sacrebleu

from model.batch import decode
from model.checkpoint import load_checkpoint
from model.decoding import max_new_tokens_for
from model.evaluate import closest_to_reference, score, translate_corpus
from model.evaluate import main as eval_main
from model.search import DecodingOptions, beam_search_reference
from tests.conftest import write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pairs):
    dir_ = tmp_path_factory.mktemp("beam-eval")
    return write_corpus(dir_, pairs[360:376], "test")


@pytest.mark.parametrize("penalty", [1.0, 0.0])
def test_nmt_eval_beam_prints_the_hypotheses_of_batch_decode_and_the_reference(
    tmp_path, capsys, trained_checkpoint, corpus, penalty
):
    src, ref = corpus
    ck = tmp_path / "ck"
    shutil.copytree(trained_checkpoint, ck, ignore=shutil.ignore_patterns("train_state"))
    eval_main([
        "--model-dir", str(ck), "--src", str(src), "--ref", str(ref), "--hyp-out", str(tmp_path / "hyp"),
        "--beam", "2", "--length-penalty", str(penalty), "--batch-size", "5", "--record", "beam",
    ])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["decoding"] == f"beam 2, length penalty {penalty:g}" and result["sentences"] == 16
    assert json.loads((ck / "metadata.json").read_text())["scores"]["beam"]["decoding"] == result["decoding"]
    printed = (tmp_path / "hyp").read_text().splitlines()

    model, tokenizer, _ = load_checkpoint(ck)
    sources = tokenizer.encode_batch(src.read_text().splitlines(), side="source")
    budgets = [max_new_tokens_for(len(s)) for s in sources]
    options = DecodingOptions(beam_size=2, length_penalty=penalty)
    batched = [hyps[0] for hyps in decode(model, sources, budgets, options)]
    reference = [beam_search_reference(model, s, b, options)[0] for s, b in zip(sources, budgets)]
    assert [h.tokens for h in batched] == [h.tokens for h in reference]
    assert all(h.finish_reason == "eos" for h in reference), "the trained model should end its sentences with </s>"
    assert printed == tokenizer.decode_batch([h.tokens for h in reference])
    greedy = [hyps[0].tokens for hyps in decode(model, sources, budgets, DecodingOptions())]
    assert greedy != [h.tokens for h in reference], "beam 2 should change a sentence or two on this corpus"


def test_nmt_eval_beam_1_is_the_greedy_path(tmp_path, capsys, trained_checkpoint, corpus):
    src, ref = corpus
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "1",
               "--length-penalty", "0.6", "--hyp-out", str(tmp_path / "hyp")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["decoding"] == "greedy, KV cache"
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    greedy = translate_corpus(model, tokenizer, src.read_text().splitlines())
    assert (tmp_path / "hyp").read_text().splitlines() == greedy


def test_nmt_eval_quantize_int8_prints_the_int8_models_translations(tmp_path, capsys, trained_checkpoint, corpus):
    """--quantize int8 decodes with model/quantize.py's layers, as NMT_QUANTIZE=int8 serves, and says so."""
    from model.quantize import quantize_int8

    src, ref = corpus
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(src), "--ref", str(ref), "--quantize", "int8",
               "--hyp-out", str(tmp_path / "hyp")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["decoding"] == "greedy, KV cache, int8"
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    quantize_int8(model)
    assert (tmp_path / "hyp").read_text().splitlines() == translate_corpus(
        model, tokenizer, src.read_text().splitlines()
    )


def test_nmt_eval_without_ref_only_translates_for_distillation(tmp_path, capsys, trained_checkpoint, corpus):
    """A training set's sources have no reference to score: --hyp-out alone writes the teacher's translations."""
    src, _ = corpus
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(src), "--beam", "2",
               "--hyp-out", str(tmp_path / "distilled")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) == {"sentences", "seconds", "decoding"} and result["sentences"] == 16
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    sources = tokenizer.encode_batch(src.read_text().splitlines(), side="source")
    budgets = [max_new_tokens_for(len(s)) for s in sources]
    best = [hyps[0].tokens for hyps in decode(model, sources, budgets, DecodingOptions(beam_size=2))]
    assert (tmp_path / "distilled").read_text().splitlines() == tokenizer.decode_batch(best)


def read_nbest(path) -> list[list[tuple[str, float]]]:
    lists: list[list[tuple[str, float]]] = []
    for line in path.read_text().splitlines():
        index, text, score = line.split(" ||| ")
        if int(index) == len(lists):
            lists.append([])
        assert int(index) == len(lists) - 1, "the n-best lists come in source order, each whole"
        lists[-1].append((text, float(score)))
    return lists


def test_nmt_eval_n_best_writes_each_sources_hypotheses_best_first(tmp_path, capsys, trained_checkpoint, corpus):
    src, ref = corpus
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "3",
               "--n-best", "3", "--length-penalty", "1.2", "--hyp-out", str(tmp_path / "hyp"),
               "--n-best-out", str(tmp_path / "nbest")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    lists = read_nbest(tmp_path / "nbest")
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    sources = tokenizer.encode_batch(src.read_text().splitlines(), side="source")
    budgets = [max_new_tokens_for(len(s)) for s in sources]
    options = DecodingOptions(beam_size=3, num_hypotheses=3, length_penalty=1.2)
    expected = decode(model, sources, budgets, options)
    assert [[text for text, _ in hyps] for hyps in lists] == [tokenizer.decode_batch([h.tokens for h in hyps])
                                                               for hyps in expected]  # fmt: skip
    assert [[score for _, score in hyps] for hyps in lists] == [[pytest.approx(h.score, abs=1e-6) for h in hyps]
                                                                 for hyps in expected]  # fmt: skip
    assert all(len(hyps) == 3 and [s for _, s in hyps] == sorted((s for _, s in hyps), reverse=True)
               for hyps in lists)  # fmt: skip
    best = [hyps[0][0] for hyps in lists]
    assert (tmp_path / "hyp").read_text().splitlines() == best
    assert result["bleu"] == score(best, ref.read_text().splitlines())["bleu"]


def test_nmt_eval_closest_out_picks_the_n_best_hypothesis_nearest_the_reference(
    tmp_path, capsys, trained_checkpoint, corpus
):
    """Sequence-level interpolation: of each source's n-best, the one with the highest sentence BLEU is kept."""
    src, ref = corpus
    refs = ref.read_text().splitlines()
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "4",
               "--n-best", "4", "--closest-out", str(tmp_path / "inter"), "--hyp-out", str(tmp_path / "hyp"),
               "--n-best-out", str(tmp_path / "nbest")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    picked, lists = (tmp_path / "inter").read_text().splitlines(), read_nbest(tmp_path / "nbest")
    bleu = sacrebleu.BLEU(effective_order=True)
    for choice, hyps, reference in zip(picked, lists, refs):
        scores = [bleu.sentence_score(text, [reference]).score for text, _ in hyps]
        assert choice in [text for text, _ in hyps]
        assert bleu.sentence_score(choice, [reference]).score == max(scores)
    best = [hyps[0][0] for hyps in lists]
    assert (tmp_path / "hyp").read_text().splitlines() == best, "--hyp-out keeps the best hypotheses"
    assert picked != best, "on this corpus some source's closest hypothesis is not its best"
    assert score(picked, refs)["bleu"] > score(best, refs)["bleu"] == result["bleu"]
    assert closest_to_reference([[("a b", -1.0), ("a b", -2.0)]], ["c"]) == ["a b"]


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "give --ref to score the translations, --hyp-out (or --n-best-out) to keep them"),
     (["--hyp-out", "h", "--record", "x"], "--record stores scores: it needs --ref"),
     (["--hyp-out", "h", "--beam", "2", "--n-best", "3"], "--n-best must be between 1 and --beam (2)"),
     (["--hyp-out", "h", "--beam", "2", "--n-best", "2"], "--n-best keeps hypotheses for --n-best-out or --closest-out"),
     (["--n-best-out", "h", "--beam", "2"], "--n-best-out writes the n-best lists: give --n-best N > 1"),
     (["--hyp-out", "h", "--beam", "2", "--n-best", "2", "--closest-out", "c"],
      "--closest-out picks among n-best hypotheses by their references: it needs --ref"),
     (["--hyp-out", "h", "--batch-size", "-1"], "--batch-size must be at least 1"),  # translated nothing, BLEU 0
     (["--hyp-out", "h", "--batch-size", "0"], "--batch-size must be at least 1"),  # a traceback
     (["--hyp-out", "h", "--threads", "-3"], "--threads must be 0 (torch's default) or more")],
)  # fmt: skip
def test_nmt_eval_refuses_a_run_with_nothing_to_do_or_scores_to_record_without_ref(
    capsys, trained_checkpoint, corpus, args, message
):
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model-dir", str(trained_checkpoint), "--src", str(corpus[0]), *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_nmt_eval_says_in_one_line_which_checkpoint_or_file_it_cannot_read(trained_checkpoint, corpus, tmp_path):
    """Each was a traceback (CheckpointError, FileNotFoundError, UnicodeDecodeError, BadGzipFile) after the model
    had loaded, or before."""
    (tmp_path / "bad.en").write_bytes(b"\xff\xfe a\n")
    (tmp_path / "fake.en.gz").write_text("not gzip\n")
    model, src = ["--model-dir", str(trained_checkpoint)], ["--src", str(corpus[0]), "--hyp-out", str(tmp_path / "h")]
    for args, message in [
        (["--model-dir", str(tmp_path / "nothing"), *src[:2], "--hyp-out", "h"], "does not exist"),
        ([*model, "--src", str(tmp_path / "no.en"), "--hyp-out", "h"], f"cannot read {tmp_path / 'no.en'}: "),
        ([*model, "--src", str(tmp_path / "bad.en"), "--hyp-out", "h"], f"cannot read {tmp_path / 'bad.en'}: 'utf-8'"),
        ([*model, "--src", str(tmp_path / "fake.en.gz"), "--hyp-out", "h"], "cannot read"),
        ([*model, *src, "--ref", str(tmp_path / "no.de")], f"cannot read {tmp_path / 'no.de'}"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            eval_main(args)
        said = exit_.value.code
        assert isinstance(said, str) and said.startswith("nmt-eval: ") and message in said, (args, said)


def test_nmt_eval_splits_lines_at_newlines_alone_and_drops_a_byte_order_mark(tmp_path, trained_checkpoint, corpus):
    """A lone \r inside a sentence made two lines of it (wc -l counts one), and the sources then outnumbered their
    references; a UTF-8 BOM was translated as three byte tokens at the start of the first sentence."""
    src, ref = corpus
    lines = src.read_text().splitlines()
    plain = tmp_path / "plain.en"
    plain.write_text("\n".join(lines) + "\n")
    odd = tmp_path / "odd.en"  # a BOM, CRLF endings and a carriage return inside line 4
    odd.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([*lines[:3], lines[3].replace(" ", "\r", 1), *lines[4:]]).encode())
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(odd), "--ref", str(ref),
               "--hyp-out", str(tmp_path / "odd.hyp")])  # fmt: skip
    eval_main(["--model-dir", str(trained_checkpoint), "--src", str(plain), "--hyp-out", str(tmp_path / "plain.hyp")])
    odd_hyps, plain_hyps = ((tmp_path / f"{n}.hyp").read_text().split("\n") for n in ("odd", "plain"))
    assert len(odd_hyps) == len(plain_hyps) == len(lines) + 1  # one a line, each ending with "\n"
    assert odd_hyps[0] == plain_hyps[0] and odd_hyps[4:] == plain_hyps[4:]


def test_nmt_eval_refuses_a_cut_short_gzip_or_an_empty_source_in_one_line(tmp_path, trained_checkpoint, corpus):
    """An EOFError and sacrebleu's IndexError, each a traceback."""
    src, _ = corpus
    whole = gzip.compress(src.read_bytes() * 20)
    (tmp_path / "cut.en.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "empty.de").write_text("")
    for args, message in [
        (["--src", str(tmp_path / "cut.en.gz"), "--hyp-out", str(tmp_path / "h")],
         f"nmt-eval: cannot read {tmp_path / 'cut.en.gz'}: it is cut short"),
        (["--src", str(tmp_path / "empty.en"), "--ref", str(tmp_path / "empty.de")],
         f"nmt-eval: {tmp_path / 'empty.en'} is empty: give a file of one source sentence a line"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            eval_main(["--model-dir", str(trained_checkpoint), *args])
        assert str(exit_.value.code).startswith(message), exit_.value.code


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--ref", "REF", "--hyp-out", "/no/such/dir/h"], "--hyp-out /no/such/dir/h: there is no directory /no/such/dir"),
     (["--hyp-out", "TMP"], "--hyp-out TMP is a directory: give the name of a file to write"),
     (["--ref", "REF", "--beam", "2", "--n-best", "2", "--n-best-out", "/no/such/x"],
      "--n-best-out /no/such/x: there is no directory /no/such"),
     (["--ref", "REF", "--beam", "2", "--n-best", "2", "--closest-out", "TMP"], "--closest-out TMP is a directory")],
)  # fmt: skip
def test_nmt_eval_refuses_an_output_it_cannot_write_before_it_decodes(
    tmp_path, trained_checkpoint, corpus, monkeypatch, args, message
):
    """It was said with a traceback once the whole file had been translated."""
    import model.evaluate

    def decoded(*a, **kw):
        raise AssertionError("decoded before finding that it cannot write the output")

    monkeypatch.setattr(model.evaluate, "translate_corpus", decoded)
    monkeypatch.setattr(model.evaluate, "beam_translate_corpus", decoded)
    args = [str(corpus[1]) if a == "REF" else str(tmp_path) if a == "TMP" else a for a in args]
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model-dir", str(trained_checkpoint), "--src", str(corpus[0]), *args])
    said = exit_.value.code
    assert said.startswith("nmt-eval: ") and message.replace("TMP", str(tmp_path)) in said, said
