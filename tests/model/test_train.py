import dataclasses
import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from model.checkpoint import load_checkpoint
from model.evaluate import main as eval_main
from model.evaluate import translate_corpus
from model.train import batch_loss, language_of
from model.train import main as train_main
from model.transformer import Transformer, TransformerConfig
from tests.conftest import train_args, write_corpus


def test_short_training_run_writes_a_loadable_checkpoint_and_learns(trained_checkpoint):
    state = json.loads((trained_checkpoint / "train_state" / "state.json").read_text())
    losses = [h["valid_loss"] for h in state["history"]]
    assert losses[-1] < losses[0] / 5, losses
    model, tok, meta = load_checkpoint(trained_checkpoint)
    assert meta["valid"]["valid_bleu"] > 60 and meta["command"].startswith("nmt-train ")
    assert translate_corpus(model, tok, ["A dog is running in the park."]) == ["Ein Hund läuft im Park."]


def test_resume_continues_where_the_run_stopped(tmp_path, pairs):
    args = train_args(tmp_path, pairs, tmp_path / "ck", epochs=1)
    train_main(args)
    first = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    train_main([*args[:-4], "--epochs", "2", "--seed", "1", "--resume"])
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


def test_r_drop_adds_the_symmetric_divergence_of_two_dropout_runs_to_their_mean_cross_entropy():
    src = torch.randint(4, 50, (3, 7))
    tgt = torch.randint(4, 50, (3, 6))
    tgt[0, 4:] = 0  # padding: neither term counts it
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
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
