"""A checkpoint converted to CTranslate2 decodes greedily to exactly our tokens, and beam-searches to our beams."""

from __future__ import annotations

import pytest
import torch

from model.batch import decode
from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from model.search import DecodingOptions
from model.transformer import Transformer
from tests.conftest import tiny_config
from tests.synthetic import synthetic_pairs

pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed: pip install -e '.[test]'")

from bench import ct2_convert  # after the skip: it imports ctranslate2


def padded(rows: list[list[int]], pad: int = 0) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def both(model, tokenizer, model_dir, sources: list[list[int]], budget: int) -> tuple[list, list]:
    """Greedy tokens from ours and from CTranslate2, for the same batch and budget."""
    translator = ct2_convert.GreedyTranslator(model_dir, tokenizer, intra_threads=1)
    return [h.tokens for h in greedy_decode(model, padded(sources), budget)], translator(sources, budget)


@pytest.fixture(scope="module")
def trained(trained_checkpoint):
    return load_checkpoint(trained_checkpoint)[:2]


@pytest.fixture(scope="module")
def sources(trained) -> list[list[int]]:
    _, tokenizer = trained
    return tokenizer.encode_batch([en for en, _ in synthetic_pairs(20, seed=7)])


def test_trained_checkpoint_decodes_to_our_tokens_in_one_batch_and_alone(trained, sources, tmp_path):
    model, tokenizer = trained
    ct2_convert.convert(model, tokenizer, tmp_path / "ct2")
    ours, theirs = both(model, tokenizer, tmp_path / "ct2", sources, 30)
    assert theirs == ours
    assert {len(t) for t in ours} != {30}, "the trained model should end its sentences with </s>"
    for src, expected in zip(sources[:5], ours):
        assert both(model, tokenizer, tmp_path / "ct2", [src], 30)[1] == [expected]


@pytest.mark.parametrize(
    "overrides",
    [{"norm_first": False}, {"activation": "gelu", "share_embeddings": False, "tie_output": False}],
    ids=["post-ln", "gelu-untied"],
)
def test_random_model_variants_decode_to_our_tokens_up_to_the_budget(trained, overrides, tmp_path):
    _, tokenizer = trained
    torch.manual_seed(0)
    model = Transformer(tiny_config(tokenizer, **overrides)).eval()
    ct2_convert.convert(model, tokenizer, tmp_path / "ct2")
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, tokenizer.vocab_size, (n,), generator=g).tolist() + [2] for n in (3, 9, 6, 14)]
    ours, theirs = both(model, tokenizer, tmp_path / "ct2", sources, 12)
    assert theirs == ours


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_beam_search_gives_our_beam_search_tokens(trained, sources, tmp_path, penalty):
    """What bench/peers.py --beam races: CT2's translate_batch(beam_size=4) against model.batch.decode, one batch.
    Both divide the summed log-probabilities by the length with </s> counted; with length_penalty 0 both stop as soon
    as the top beam has finished."""
    model, tokenizer = trained
    ct2_convert.convert(model, tokenizer, tmp_path / "ct2")
    translator = ct2_convert.BeamTranslator(tmp_path / "ct2", tokenizer, 4, penalty, intra_threads=1)
    ours = decode(model, sources, [30] * len(sources), DecodingOptions(beam_size=4, length_penalty=penalty))
    assert translator(sources, 30) == [h[0].tokens for h in ours]


def test_int8_conversion_loads_and_decodes(trained, sources, tmp_path):
    model, tokenizer = trained
    ct2_convert.convert(model, tokenizer, tmp_path / "ct2", quantization="int8")
    translator = ct2_convert.GreedyTranslator(tmp_path / "ct2", tokenizer, intra_threads=1)
    assert translator.translator.compute_type.startswith("int8")
    out = translator(sources, 30)
    assert len(out) == len(sources) and all(0 <= i < tokenizer.vocab_size for ids in out for i in ids)
