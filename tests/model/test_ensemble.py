"""model/ensemble.py: models with one vocabulary decoding as one, through model.batch.decode and nmt-eval."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from model.batch import decode
from model.checkpoint import load_checkpoint, save_checkpoint
from model.decoding import max_new_tokens_for
from model.ensemble import Ensemble
from model.evaluate import main as eval_main
from model.search import DecodingOptions
from model.transformer import Transformer
from tests.conftest import write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pairs):
    return write_corpus(tmp_path_factory.mktemp("ensemble"), pairs[360:376], "test")


@pytest.fixture(scope="module")
def second_checkpoint(tmp_path_factory, trained_checkpoint):
    """Another model on trained_checkpoint's vocabulary: its weights moved by seeded noise."""
    model, tokenizer, meta = load_checkpoint(trained_checkpoint)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * p.std().nan_to_num(0.02) * 0.25)
    out = tmp_path_factory.mktemp("second") / "ckpt"
    save_checkpoint(out, model, tokenizer, meta)
    return out


def sources_of(tokenizer, src_path) -> tuple[list[list[int]], list[int]]:
    sources = tokenizer.encode_batch(src_path.read_text().splitlines(), side="source")
    return sources, [max_new_tokens_for(len(s)) for s in sources]


@torch.inference_mode()
def greedy_reference(models: list[Transformer], src: list[int], budget: int) -> list[int]:
    """Greedy decoding of the mean of the models' probabilities, every prefix decoded again in full (no cache)."""
    c = models[0].config
    ys = [c.bos_id]
    for _ in range(budget - c.force_eos):
        probs = torch.stack([m(torch.tensor([src]), torch.tensor([ys]))[0, -1].float().softmax(-1) for m in models])
        token = int(probs.mean(0).argmax())
        if token == c.eos_id:
            break
        ys.append(token)
    return ys[1:]


def test_an_ensemble_decodes_the_mean_of_its_members_probabilities(trained_checkpoint, second_checkpoint, corpus):
    first, tokenizer, _ = load_checkpoint(trained_checkpoint)
    second = load_checkpoint(second_checkpoint)[0]
    sources, budgets = sources_of(tokenizer, corpus[0])
    ensemble = Ensemble([first, second])
    got = [hyps[0].tokens for hyps in decode(ensemble, sources, budgets, DecodingOptions(), max_rows=5)]
    assert got == [greedy_reference([first, second], s, b) for s, b in zip(sources, budgets)]
    alone = [[hyps[0].tokens for hyps in decode(m, sources, budgets, DecodingOptions())] for m in (first, second)]
    assert alone[0] != alone[1], "the two members should translate some sentence differently"


@torch.inference_mode()
def test_an_ensembles_beam_scores_are_the_log_mean_probabilities_of_its_members(
    trained_checkpoint, second_checkpoint, corpus
):
    first, tokenizer, _ = load_checkpoint(trained_checkpoint)
    second = load_checkpoint(second_checkpoint)[0]
    sources, budgets = sources_of(tokenizer, corpus[0])
    options = DecodingOptions(beam_size=2, num_hypotheses=2)
    c = first.config
    for src, hyps in zip(sources, decode(Ensemble([first, second]), sources, budgets, options)):
        for h in hyps:
            tgt = torch.tensor([[c.bos_id, *h.tokens]])
            probs = torch.stack([m(torch.tensor([src]), tgt)[0].float().softmax(-1) for m in (first, second)])
            steps = probs.mean(0).log()[torch.arange(len(h.logprobs)), [*h.tokens, c.eos_id][: len(h.logprobs)]]
            assert h.logprobs == pytest.approx(steps.tolist(), abs=1e-4)


def test_an_ensemble_of_copies_of_one_model_decodes_as_that_model(trained_checkpoint, corpus):
    """Beam search, n-best lists and their scores: the mean of identical probabilities is those probabilities."""
    model, tokenizer, _ = load_checkpoint(trained_checkpoint)
    sources, budgets = sources_of(tokenizer, corpus[0])
    options = DecodingOptions(beam_size=3, num_hypotheses=2, length_penalty=1.2)
    alone = decode(model, sources, budgets, options, max_rows=12)
    for members in ([model], [model, model, model]):
        together = decode(Ensemble(members), sources, budgets, options, max_rows=12)
        assert [[h.tokens for h in hyps] for hyps in together] == [[h.tokens for h in hyps] for hyps in alone]
        assert all(math.isclose(a.score, b.score, abs_tol=1e-5) for x, y in zip(together, alone) for a, b in zip(x, y))


def test_an_ensemble_refuses_models_with_other_vocabularies(trained_checkpoint):
    model = load_checkpoint(trained_checkpoint)[0]
    other = Transformer(type(model.config).from_dict({**model.config.to_dict(), "src_vocab_size": 999,
                                                      "tgt_vocab_size": 999}))  # fmt: skip
    with pytest.raises(ValueError, match="share their vocabularies"):
        Ensemble([model, other])


@pytest.mark.parametrize("beam", [1, 2])
def test_nmt_eval_with_several_model_dirs_decodes_their_ensemble(
    tmp_path, capsys, trained_checkpoint, second_checkpoint, corpus, beam
):
    src, ref = corpus
    eval_main(["--model-dir", str(trained_checkpoint), str(second_checkpoint), "--src", str(src), "--ref", str(ref),
               "--beam", str(beam), "--hyp-out", str(tmp_path / "hyp")])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["decoding"].endswith(", ensemble of 2") and result["sentences"] == 16
    first, tokenizer, _ = load_checkpoint(trained_checkpoint)
    sources, budgets = sources_of(tokenizer, src)
    ensemble = Ensemble([first, load_checkpoint(second_checkpoint)[0]])
    expected = [hyps[0].tokens for hyps in decode(ensemble, sources, budgets, DecodingOptions(beam_size=beam))]
    assert (tmp_path / "hyp").read_text().splitlines() == tokenizer.decode_batch(expected)


def test_nmt_eval_refuses_an_ensemble_of_other_vocabularies_or_a_record_of_its_scores(
    tmp_path, capsys, trained_checkpoint, corpus
):
    other = tmp_path / "other"
    shutil.copytree(trained_checkpoint, other, ignore=shutil.ignore_patterns("train_state"))
    spec = json.loads((other / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]  # two pieces swap their ids: the same size, another vocabulary
    a, b = list(vocab)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(spec))
    base = ["--src", str(corpus[0]), "--hyp-out", str(tmp_path / "hyp")]
    with pytest.raises(SystemExit, match="must share one BPE vocabulary"):
        eval_main(["--model-dir", str(trained_checkpoint), str(other), *base])
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model-dir", str(trained_checkpoint), str(trained_checkpoint), *base, "--ref", str(corpus[1]),
                   "--record", "x"])  # fmt: skip
    assert exit_.value.code == 2 and "--record stores one checkpoint's scores" in capsys.readouterr().err
