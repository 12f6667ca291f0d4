import dataclasses
import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import model.train.bpe_dropout
import model.train.loop
from model.checkpoint import load_checkpoint
from model.evaluate import main as eval_main
from model.evaluate import translate_corpus
from model.train import main as train_main
from model.train.args import language_of
from model.train.bpe_dropout import dropout_sources
from model.train.loss import batch_loss, teacher_probs
from model.train.state import load_grown
from model.transformer import Transformer, TransformerConfig
from tests.conftest import tiny_config, train_args, write_corpus


def test_short_training_run_writes_a_loadable_checkpoint_and_learns(trained_checkpoint):
    state = json.loads((trained_checkpoint / "train_state" / "state.json").read_text())
    losses = [h["valid_loss"] for h in state["history"]]
    assert losses[-1] < losses[0] / 5, losses
    model, tok, meta = load_checkpoint(trained_checkpoint)
    assert meta["valid"]["valid_bleu"] > 60 and meta["command"].startswith("nmt-train ")
    assert translate_corpus(model, tok, ["A dog is running in the park."]) == ["Ein Hund läuft im Park."]


def test_a_run_of_no_epochs_is_refused_before_it_starts(tmp_path, pairs):
    """It ended with exit 0 and no model in --out (only train_state/), which nothing could load."""
    with pytest.raises(SystemExit, match="--epochs must be at least 1, not 0"):
        train_main(train_args(tmp_path, pairs, tmp_path / "none", epochs=0))
    assert not (tmp_path / "none").exists()


def test_resume_continues_where_the_run_stopped(tmp_path, pairs):
    args = train_args(tmp_path, pairs, tmp_path / "ck", epochs=1)
    train_main(args)
    first = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    (tmp_path / "ck" / "confidence.json").write_text("{}")  # nmt-calibrate's, of the first epoch's weights
    train_main([*args[:-4], "--epochs", "2", "--seed", "1", "--resume"])
    assert not (tmp_path / "ck" / "confidence.json").exists()  # the new weights are not what it calibrated
    second = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    assert [h["epoch"] for h in second["history"]] == [1, 2]
    assert second["history"][0] == first["history"][0]
    assert second["step"] == 2 * first["step"]


def test_nmt_eval_prints_one_json_line(tmp_path, capsys, trained_checkpoint, pairs):
    src, ref = write_corpus(tmp_path, pairs[360:380], "test")
    ck = tmp_path / "ck"
    shutil.copytree(trained_checkpoint, ck, ignore=shutil.ignore_patterns("train_state"))
    eval_main(
        [
            "--model-dir",
            str(ck),
            "--src",
            str(src),
            "--ref",
            str(ref),
            "--hyp-out",
            str(tmp_path / "hyp"),
            "--record",
            "synthetic",
        ]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) == {"bleu", "bleu_lc", "chrf", "sentences", "seconds", "decoding"}
    assert result["decoding"] == "greedy, KV cache"
    assert result["sentences"] == 20 and result["bleu"] > 60
    assert len((tmp_path / "hyp").read_text().splitlines()) == 20
    recorded = json.loads((ck / "metadata.json").read_text())["scores"]["synthetic"]
    assert recorded["bleu"] == result["bleu"] and recorded["sentences"] == 20


def test_the_language_pair_comes_from_the_corpus_file_names():
    assert [language_of(p) for p in ("d/train.fr.gz", "val.en", "train.deu.gz", "corpus")] == [
        "fr", "en", "deu", "unknown"
    ]  # fmt: skip


def test_a_checkpoint_records_its_language_pair(trained_checkpoint):
    _, _, metadata = load_checkpoint(trained_checkpoint)
    assert (metadata["source_language"], metadata["target_language"]) == ("en", "de")  # train.en / train.de


def test_init_from_starts_from_the_checkpoint_weights_shape_and_vocabulary(tmp_path, trained_checkpoint, pairs):
    """At learning rate 0 the tuned model is the checkpoint it started from, whatever the shape flags; dropout is its own."""
    args = train_args(tmp_path, pairs, tmp_path / "tuned", epochs=1)
    train_main([*args, "--init-from", str(trained_checkpoint), "--lr", "0", "--d-model", "64", "--vocab-size", "300",
                "--dropout", "0.2"])  # fmt: skip
    start, start_tok, _ = load_checkpoint(trained_checkpoint)
    tuned, tuned_tok, meta = load_checkpoint(tmp_path / "tuned")
    assert (
        tuned.config == dataclasses.replace(start.config, dropout=0.2)
        and tuned_tok.hf.to_str() == start_tok.hf.to_str()
    )
    start_weights, tuned_weights = start.state_dict(), tuned.state_dict()
    assert all(torch.equal(start_weights[k], tuned_weights[k]) for k in start_weights)
    assert f"--init-from {trained_checkpoint}" in meta["command"]
    _, _, start_meta = load_checkpoint(trained_checkpoint)
    assert meta["started_from"] == {"checkpoint": str(trained_checkpoint),
                                    **{k: start_meta[k] for k in ("name", "command", "training_data", "steps",
                                                                  "epochs", "train_seconds", "valid")}}  # fmt: skip
    again = tmp_path / "again"  # a chain of runs: each records the one before
    train_main([*train_args(tmp_path, pairs, again, epochs=1), "--init-from", str(tmp_path / "tuned"), "--lr", "0"])
    assert load_checkpoint(again)[2]["started_from"]["started_from"] == meta["started_from"]


def test_a_grown_encoder_computes_what_the_model_it_grew_from_computes(tokenizer):
    start = Transformer(tiny_config(tokenizer)).eval()
    grown = Transformer(dataclasses.replace(start.config, n_encoder_layers=start.config.n_encoder_layers + 2)).eval()
    load_grown(grown, start)
    src, tgt = torch.randint(4, tokenizer.vocab_size, (3, 9)), torch.randint(4, tokenizer.vocab_size, (3, 7))
    assert torch.equal(grown(src, tgt), start(src, tgt))
    assert all(torch.equal(grown.state_dict()[k], v) for k, v in start.state_dict().items())
    new = grown.encoder_layers[2]
    assert new.self_attn.qkv_proj.weight.abs().sum() > 0 and not new.self_attn.out_proj.weight.any()
    with pytest.raises(ValueError, match="cannot grow"):  # only upward, only the encoder
        load_grown(start, grown)


def test_grow_encoder_adds_layers_that_first_change_no_translation_then_learn(tmp_path, trained_checkpoint, pairs):
    args = train_args(tmp_path, pairs, tmp_path / "grown", epochs=1)
    train_main([*args, "--init-from", str(trained_checkpoint), "--grow-encoder", "2", "--lr", "0"])
    start, tok, _ = load_checkpoint(trained_checkpoint)
    grown, _, meta = load_checkpoint(tmp_path / "grown")
    assert grown.config == dataclasses.replace(start.config, n_encoder_layers=start.config.n_encoder_layers + 2)
    sources = [s for s, _ in pairs[360:]]
    assert translate_corpus(grown, tok, sources) == translate_corpus(start, tok, sources)
    assert "--grow-encoder 2" in meta["command"] and meta["started_from"]["checkpoint"] == str(trained_checkpoint)
    train_main([*train_args(tmp_path, pairs, tmp_path / "learnt", epochs=1), "--init-from", str(trained_checkpoint),
                "--grow-encoder", "2"])  # fmt: skip
    learnt = load_checkpoint(tmp_path / "learnt")[0]
    assert learnt.encoder_layers[-1].ffn.w2.weight.abs().sum() > 0  # the zeroed projections took gradients


@pytest.mark.parametrize("extra", [["--grow-encoder", "1"], ["--init-from", "CK", "--grow-encoder", "-1"]])
def test_grow_encoder_needs_init_from_and_a_positive_count(tmp_path, trained_checkpoint, pairs, extra):
    args = train_args(tmp_path, pairs, tmp_path / "grown", epochs=1)
    with pytest.raises(SystemExit, match="--grow-encoder takes a positive number of layers and needs --init-from"):
        train_main([*args, *[str(trained_checkpoint) if a == "CK" else a for a in extra]])


def test_a_post_ln_checkpoint_cannot_grow(tmp_path, pairs):
    """A post-LN layer normalises its output: with zero projections it is a LayerNorm, not the identity."""
    train_main([*train_args(tmp_path, pairs, tmp_path / "post", epochs=1), "--norm", "post"])
    args = train_args(tmp_path, pairs, tmp_path / "grown", epochs=1)
    with pytest.raises(SystemExit, match="--grow-encoder needs a pre-LN checkpoint"):
        train_main([*args, "--init-from", str(tmp_path / "post"), "--grow-encoder", "1"])


def test_init_from_a_directory_nmt_train_did_not_write_is_refused(tmp_path, pairs):
    args = train_args(tmp_path, pairs, tmp_path / "tuned", epochs=1)
    with pytest.raises(SystemExit, match="is not a checkpoint written by nmt-train"):
        train_main([*args, "--init-from", str(tmp_path / "nowhere")])


def test_resume_at_the_epochs_already_done_only_averages_the_last_snapshots(tmp_path, pairs, capsys):
    """A long run stopped early is finished with --resume --epochs N: no more updates, the snapshots averaged."""
    args = [*train_args(tmp_path, pairs, tmp_path / "ck", epochs=2), "--average-last", "2"]
    train_main(args)
    before = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    capsys.readouterr()
    train_main([*args, "--resume"])
    after = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    assert after["step"] == before["step"] and after["history"] == before["history"]
    averaged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith('{"averaged"')]
    assert len(averaged) == 1 and averaged[0]["averaged"] == ["epoch1.safetensors", "epoch2.safetensors"]


def _tiny_model(dropout: float) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=32, n_heads=4,
                                         n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=dropout))  # fmt: skip


def _tiny_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """src (3, 7), tgt_in and tgt_out (3, 5) for _tiny_model, the first target padded from its 5th token."""
    src = torch.randint(4, 50, (3, 7))
    tgt = torch.randint(4, 50, (3, 6))
    tgt[0, 4:] = 0  # padding: no loss term counts it
    return src, tgt[:, :-1], tgt[:, 1:]


def test_r_drop_adds_the_symmetric_divergence_of_two_dropout_runs_to_their_mean_cross_entropy():
    src, tgt_in, tgt_out = _tiny_batch()
    model = _tiny_model(dropout=0.3).train()

    torch.manual_seed(5)
    got = batch_loss(model, src, tgt_in, tgt_out, pad_id=0, label_smoothing=0.1, r_drop=4.0)
    torch.manual_seed(5)  # the same dropout masks: the reference, written with torch's own KL divergence
    lp1, lp2 = model(torch.cat([src, src]), torch.cat([tgt_in, tgt_in])).float().log_softmax(-1).chunk(2)
    keep = tgt_out != 0
    ce = sum(F.cross_entropy(lp.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1,
                             reduction="sum") for lp in (lp1, lp2))  # fmt: skip
    kl = F.kl_div(lp2, lp1, log_target=True, reduction="none").sum(-1) + F.kl_div(
        lp1, lp2, log_target=True, reduction="none"
    ).sum(-1)
    kl_masked = kl[keep].sum()
    assert kl_masked > 0.01  # the two runs' dropout differed
    torch.testing.assert_close(got, (ce + 4.0 * kl_masked / 2) / 2)

    model.eval()  # no dropout: both runs agree, and R-Drop's loss is the plain loss
    plain = batch_loss(model, src, tgt_in, tgt_out, pad_id=0, label_smoothing=0.1)
    torch.testing.assert_close(batch_loss(model, src, tgt_in, tgt_out, 0, 0.1, r_drop=4.0), plain)


def test_training_with_r_drop_learns_and_records_it(tmp_path, pairs):
    args = train_args(tmp_path, pairs, tmp_path / "ck", epochs=3)
    dropout = args.index("--dropout") + 1
    args[dropout] = "0.1"
    train_main([*args, "--r-drop", "2"])
    state = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    losses = [h["valid_loss"] for h in state["history"]]
    assert losses[-1] < losses[0], losses
    assert "--r-drop 2" in json.loads((tmp_path / "ck" / "metadata.json").read_text())["command"]


def test_distillation_adds_the_kl_divergence_from_the_teachers_to_the_cross_entropy():
    src, tgt_in, tgt_out = _tiny_batch()
    model = _tiny_model(dropout=0.0).eval()
    teachers = [_tiny_model(dropout=0.0).eval() for _ in range(2)]
    with torch.no_grad():
        for i, t in enumerate(teachers):
            for w in t.parameters():
                w.add_(0.5 * (i + 1) * torch.randn_like(w))
    pt = teacher_probs(teachers, src, tgt_in)
    mean = (teachers[0](src, tgt_in).softmax(-1) + teachers[1](src, tgt_in).softmax(-1)) / 2
    torch.testing.assert_close(pt, mean.detach())  # an ensemble: probabilities averaged

    got = batch_loss(model, src, tgt_in, tgt_out, pad_id=0, label_smoothing=0.1, teacher=pt, kd_alpha=0.3)
    logp = model(src, tgt_in).float().log_softmax(-1)
    ce = F.cross_entropy(logp.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1, reduction="sum")
    kl = F.kl_div(logp, pt, reduction="none").sum(-1)[tgt_out != 0].sum()  # torch's own KL(pt || student)
    assert kl > 0.01
    torch.testing.assert_close(got, 0.7 * ce + 0.3 * kl)

    # A student that already predicts its teacher's distribution has nothing left to learn from it at alpha 1.
    own = model(src, tgt_in).softmax(-1).detach()
    alone = batch_loss(model, src, tgt_in, tgt_out, 0, 0.1, teacher=own, kd_alpha=1.0)
    alone.backward()
    assert abs(alone.item()) < 1e-4
    assert max(p.grad.abs().max().item() for p in model.parameters() if p.grad is not None) < 1e-5


def test_a_student_trained_on_its_teacher_alone_learns_to_translate_like_it(tmp_path, trained_checkpoint, pairs):
    """--kd-alpha 1: the training targets only give the prefixes; all the student learns is the teacher's
    distribution. From scratch it takes the teacher's vocabulary and records its teachers."""
    args = train_args(tmp_path, pairs, tmp_path / "student", epochs=12)
    args[args.index("--vocab-size") + 1] = "300"  # ignored: a student of teachers has their vocabulary
    train_main([*args, "--teacher", str(trained_checkpoint), "--kd-alpha", "1"])
    teacher, teacher_tok, _ = load_checkpoint(trained_checkpoint)
    student, student_tok, meta = load_checkpoint(tmp_path / "student")
    assert student_tok.hf.to_str() == teacher_tok.hf.to_str()
    assert meta["distillation"] == {"teachers": [str(trained_checkpoint)], "kd_alpha": 1.0}
    valid = [s for s, _ in pairs[360:]]
    same = sum(a == b for a, b in zip(translate_corpus(student, student_tok, valid),
                                      translate_corpus(teacher, teacher_tok, valid)))  # fmt: skip
    assert meta["valid"]["valid_bleu"] > 50 and same >= 3 * len(valid) // 4, (meta["valid"], same, len(valid))


def test_a_teacher_with_another_vocabulary_is_refused(tmp_path, trained_checkpoint, pairs):
    other = tmp_path / "other"
    train_main(train_args(tmp_path, pairs, other, epochs=1)[:-4] + ["--epochs", "1", "--seed", "1",
                                                                   "--vocab-size", "300"])  # fmt: skip
    args = train_args(tmp_path, pairs, tmp_path / "student", epochs=1)
    with pytest.raises(SystemExit, match="has another vocabulary than the student's"):
        train_main([*args, "--init-from", str(trained_checkpoint), "--teacher", str(other)])
    with pytest.raises(SystemExit, match="is not a checkpoint written by nmt-train"):
        train_main([*args, "--teacher", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match="--kd-alpha must lie between 0 and 1"):
        train_main([*args, "--teacher", str(trained_checkpoint), "--kd-alpha", "1.5"])


def test_bpe_dropout_cuts_words_in_many_ways_that_all_read_back_as_the_text(tokenizer, pairs):
    texts = [s for s, _ in pairs[:50]]
    plain = tokenizer.encode_batch(texts, "source")
    assert dropout_sources(tokenizer, texts, 0.0) == plain
    first, second = dropout_sources(tokenizer, texts, 0.3), dropout_sources(tokenizer, texts, 0.3)
    assert first != plain and second != first  # drawn afresh each call
    assert sum(map(len, first)) > sum(map(len, plain))  # skipped merges leave more, shorter pieces
    for ids in (*first, *second):
        assert ids[-1] == tokenizer.eos_id
    assert tokenizer.decode_batch(first) == tokenizer.decode_batch(plain) == tokenizer.decode_batch(second)
    assert tokenizer.encode_batch(texts, "source") == plain  # the caller's tokenizer keeps its merges


def test_bpe_dropout_feeds_the_student_cut_sources_the_teacher_the_served_ones_and_resumes_on_the_same_draw(
    tmp_path, trained_checkpoint, pairs, monkeypatch
):  # fmt: skip
    """A student of trained_checkpoint under --bpe-dropout: the student reads sources cut in other ways than the
    tokenizer serves them, its teacher the served ones; a run stopped mid-epoch saves the epoch's draw, and the
    resumed run finishes that epoch on it, then draws the next."""
    served = {tuple(ids) for ids in load_checkpoint(trained_checkpoint)[1].encode_batch([s for s, _ in pairs[:360]])}
    seen: dict[str, set] = {"student": set(), "teacher": set()}
    draws = []

    def rows(src):
        return {tuple(i for i in row if i != 0) for row in src.tolist()}

    def student_loss(net, src, *rest, **kw):
        seen["student"] |= rows(src)
        return batch_loss(net, src, *rest, **kw)

    def teacher(teachers, src, tgt_in):
        seen["teacher"] |= rows(src)
        return teacher_probs(teachers, src, tgt_in)

    def draw(*a):
        draws.append(a[1])
        return dropout_sources(*a)

    monkeypatch.setattr(model.train.loop, "batch_loss", student_loss)  # where the loop looks them up
    monkeypatch.setattr(model.train.loop, "teacher_probs", teacher)
    monkeypatch.setattr(model.train.bpe_dropout, "dropout_sources", draw)
    out = tmp_path / "student"
    args = train_args(tmp_path, pairs, out, epochs=2)
    args = [*args, "--teacher", str(trained_checkpoint), "--bpe-dropout", "0.2", "--dropout", "0.1"]
    train_main([*args, "--max-steps", "3"])
    saved = json.loads((out / "train_state" / "epoch_sources.json").read_text())
    assert saved["epoch"] == 1 and len(saved["sources"]) == 360 and len(draws) == 1
    assert seen["teacher"] <= served and seen["student"] - served  # some of the student's sources are cut anew

    train_main([*args, "--resume"])
    assert len(draws) == 2  # epoch 2's draw only: epoch 1 went on with the saved one
    assert not (out / "train_state" / "epoch_sources.json").exists()
    state = json.loads((out / "train_state" / "state.json").read_text())
    assert [h["epoch"] for h in state["history"]] == [1, 2]
    assert "--bpe-dropout 0.2" in json.loads((out / "metadata.json").read_text())["command"]
    assert seen["teacher"] <= served and len(seen["student"] - served) > 100
    with pytest.raises(SystemExit, match="--bpe-dropout is a probability below 1"):
        train_main([*args[:-2], "--bpe-dropout", "1"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--heads", "5"], "--d-model 32 does not divide into --heads 5 equal parts"),  # a ValueError's traceback
     (["--heads", "0"], "--d-model 32 does not divide into --heads 0 equal parts"),
     (["--vocab-size", "10"], "--vocab-size must be at least 260")],  # the BPE trainer's OverflowError
)  # fmt: skip
def test_a_shape_or_vocabulary_it_cannot_make_is_refused_in_one_line_before_any_work(tmp_path, pairs, extra, message):
    with pytest.raises(SystemExit, match=message):
        train_main([*train_args(tmp_path, pairs, tmp_path / "x", epochs=1), *extra])
    assert not (tmp_path / "x").exists()


def test_average_last_0_averages_nothing_and_keeps_no_snapshot(tmp_path, pairs, capsys):
    """[-0:] is the whole list: --average-last 0 averaged every epoch and kept every snapshot."""
    out = tmp_path / "ck"
    train_main([*train_args(tmp_path, pairs, out, epochs=2), "--average-last", "0"])
    assert '{"averaged"' not in capsys.readouterr().err
    assert not list((out / "train_state").glob("epoch*.safetensors"))
    assert json.loads((out / "train_state" / "state.json").read_text())["snapshots"] == []
    assert (out / "model.safetensors").is_file()
    with pytest.raises(SystemExit, match="--average-last takes 0 \\(no averaging\\) or more epochs, not -1"):
        train_main([*train_args(tmp_path, pairs, tmp_path / "x", epochs=1), "--average-last", "-1"])


def test_resume_with_other_shape_flags_names_them_instead_of_a_tensor_size_traceback(tmp_path, pairs):
    out = tmp_path / "ck"
    args = train_args(tmp_path, pairs, out, epochs=1)
    train_main(args)
    more = [*args[:-4], "--epochs", "2", "--seed", "1", "--resume"]
    with pytest.raises(SystemExit, match=r"has --d-model 32, not 48; --d-ff 64, not 96: resume with the shape flags"):
        train_main([*more, "--d-model", "48", "--d-ff", "96"])
    with pytest.raises(SystemExit, match="has --encoder-layers 2, not 3"):  # a KeyError
        train_main([*more, "--encoder-layers", "3"])
    state = out / "train_state" / "state.json"  # saved before runs recorded their shape: the weights say it
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "shape"}))
    with pytest.raises(SystemExit, match="the saved weights have another shape than the model the flags ask for"):
        train_main([*more, "--d-model", "48"])
    train_main(more)  # the same shape goes on
    assert json.loads(state.read_text())["epoch"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--warmup", "0"], "--warmup must be at least 1 step, not 0"),  # ZeroDivisionError
     (["--d-model", "0", "--heads", "1"], "--d-model must be at least 1, not 0"),
     (["--dropout", "1.5"], "--dropout is a probability: at least 0 and below 1, not 1.5"),
     (["--label-smoothing", "2"], "--label-smoothing is a probability: at least 0 and below 1, not 2.0"),
     (["--threads", "-1"], "--threads takes 0 \\(torch's default\\) or more, not -1"),
     (["--max-steps", "-1"], "--max-steps takes 0 \\(no limit\\) or more, not -1"),  # trained nothing, exit 0
     (["--teacher", "TEACHER", "--heads", "5"], "--d-model 32 does not divide into --heads 5 equal parts")],
)  # fmt: skip
def test_a_setting_out_of_range_is_refused_with_what_is_allowed(tmp_path, pairs, trained_checkpoint, extra, message):
    """Each was a traceback (a student of teachers from scratch has the shape its flags give: it went unchecked)."""
    extra = [str(trained_checkpoint) if a == "TEACHER" else a for a in extra]
    with pytest.raises(SystemExit, match=message):
        train_main([*train_args(tmp_path, pairs, tmp_path / "x", epochs=1), *extra])
    assert not (tmp_path / "x").exists()


def test_out_that_is_a_file_is_refused(tmp_path, pairs):
    (tmp_path / "afile").write_text("hi\n")
    with pytest.raises(SystemExit, match="--out .*afile is a file: give a directory"):  # NotADirectoryError
        train_main(train_args(tmp_path, pairs, tmp_path / "afile", epochs=1))


def test_empty_data_or_none_within_max_len_is_refused(tmp_path, pairs):
    """An empty validation set divided by zero after a whole epoch; no training pairs gave an untrained model and
    exit 0."""
    args = train_args(tmp_path, pairs, tmp_path / "x", epochs=1)
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "empty.de").write_text("")
    for side in ("train", "valid"):
        at = args.index(f"--{side}-src")
        emptied = [*args[:at], f"--{side}-src", str(tmp_path / "empty.en"), f"--{side}-tgt", str(tmp_path / "empty.de"),
                   *args[at + 4 :]]  # fmt: skip
        with pytest.raises(SystemExit, match=f"--{side}-src .*empty.en is empty: it needs at least one sentence pair"):
            train_main(emptied)
    with pytest.raises(SystemExit, match="all 360 training pairs are longer than --max-len 2 tokens"):
        train_main([*args, "--max-len", "2"])
    assert not (tmp_path / "x" / "model.safetensors").exists()


def test_a_stop_and_resume_with_dropout_trains_as_the_uninterrupted_run(tmp_path, pairs):
    """torch's random numbers are saved with the state: the resumed run draws the dropout masks the uninterrupted run
    drew, so both end with the same weights (they were reseeded, hence other masks)."""

    def args(out, *extra):
        base = train_args(tmp_path, pairs, tmp_path / out, epochs=2)
        return [*base, "--dropout", "0.1", "--log-steps", str(tmp_path / f"{out}.jsonl"), *extra]

    train_main(args("whole"))
    train_main(args("stopped", "--max-steps", "7"))  # mid-epoch 1
    train_main(args("stopped", "--max-steps", "15", "--resume"))  # an epoch's end between the stops
    train_main(args("stopped", "--resume"))
    losses = [[json.loads(line)["loss"] for line in (tmp_path / f"{r}.jsonl").read_text().splitlines()]
              for r in ("whole", "stopped")]  # fmt: skip
    assert len(losses[0]) > 15 and losses[1] == losses[0]
    whole, stopped = (load_file(str(tmp_path / r / "train_state" / "last.safetensors")) for r in ("whole", "stopped"))
    assert all(torch.equal(whole[k], stopped[k]) for k in whole if k.startswith("model."))


def test_a_run_stopped_before_its_first_epoch_ended_says_it_wrote_no_checkpoint(tmp_path, pairs, capsys):
    out = tmp_path / "ck"
    train_main([*train_args(tmp_path, pairs, out, epochs=2), "--max-steps", "3"])
    err = capsys.readouterr().err
    assert not (out / "model.safetensors").exists()
    assert f"no checkpoint in {out} yet: the run stopped at step 3, before its first epoch ended" in err
    assert "with --resume" in err


def test_a_file_name_without_a_language_code_leaves_the_language_unknown(tmp_path, pairs, capsys):
    """c.src / c.tgt were taken for the languages "src" and "tgt", which the server then announced."""
    assert [language_of(p) for p in ("c.src", "c.tgt", "corpus.txt.gz", "train.de-en", "a.TRG")] == ["unknown"] * 5
    args = train_args(tmp_path, pairs, tmp_path / "ck", epochs=1)
    for at, suffix in ((args.index("--train-src") + 1, "src"), (args.index("--train-tgt") + 1, "tgt")):
        args[at] = str(shutil.copy(args[at], tmp_path / f"c.{suffix}"))
    train_main([*args, "--target-language", "de"])
    metadata = load_checkpoint(tmp_path / "ck")[2]
    assert (metadata["source_language"], metadata["target_language"]) == ("unknown", "de")
    err = capsys.readouterr().err
    assert "c.src does not end with a language code" in err and "give --source-language" in err
    assert "c.tgt does not" not in err
