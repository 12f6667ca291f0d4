import math

import pytest
import torch

from model.layers import MultiHeadAttention, sinusoidal_table
from model.transformer import Transformer, TransformerConfig, padding_mask, subsequent_mask
from tests.conftest import tiny_config


def test_sinusoidal_table_sin_on_even_cos_on_odd():
    pe = sinusoidal_table(50, 8)
    pos = torch.arange(50, dtype=torch.float32)
    assert torch.allclose(pe[:, 0], torch.sin(pos))
    assert torch.allclose(pe[:, 1], torch.cos(pos))
    assert torch.allclose(pe[:, 6], torch.sin(pos / 10000 ** (6 / 8)), atol=1e-6)
    assert torch.allclose(pe[:, 7], torch.cos(pos / 10000 ** (6 / 8)), atol=1e-6)


def test_attention_divides_scores_by_sqrt_dk_and_fast_path_agrees():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, n_heads=2, dropout=0.0, cross=False).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    out_w, w = mha(x, mask, need_weights=True)
    out_fast, none = mha(x, mask)
    assert none is None
    torch.testing.assert_close(out_w, out_fast, atol=1e-5, rtol=1e-5)
    q, k, _ = mha.project_qkv(x)
    expected = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf")).softmax(-1)
    torch.testing.assert_close(w, expected)


def test_cross_attention_takes_queries_from_decoder_and_keys_from_memory():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, n_heads=2, dropout=0.0, cross=True).eval()
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 7, 16)
    out, w = mha(x, torch.ones(1, 1, 1, 7, dtype=torch.bool), memory=memory, need_weights=True)
    assert out.shape == (1, 3, 16) and w.shape == (1, 2, 3, 7)  # T queries over S keys


def test_attention_rows_sum_to_one_and_ignore_padded_keys(tiny_model):
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])
    src_mask = padding_mask(src, 0)
    memory, enc_w = tiny_model.encode(src, src_mask, need_weights=True)
    tgt_mask = padding_mask(tgt, 0) & subsequent_mask(4)
    _, self_w, cross_w = tiny_model.decode(tgt, memory, src_mask, tgt_mask, need_weights=True)
    for w in enc_w + self_w + cross_w:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    for w in enc_w + cross_w:
        assert torch.all(w[1, :, :, 3:] == 0)  # padded source keys get no weight
    for w in self_w:
        assert torch.all(w[0, :, :, 3] == 0)  # padded target key
        assert torch.all(w.triu(1) == 0)  # no query sees the future


def test_future_target_token_does_not_change_earlier_logits(tiny_model):
    src = torch.tensor([[5, 6, 7, 2]])
    tgt = torch.tensor([[1, 8, 9, 10, 11]])
    changed = tgt.clone()
    changed[0, 3] = 12
    a, b = tiny_model(src, tgt), tiny_model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_output_projection_is_tied_to_the_target_embedding(tokenizer):
    m = Transformer(tiny_config(tokenizer))
    h = torch.randn(2, 32)
    torch.testing.assert_close(m.generator(h), h @ m.tgt_embed.token.weight.T)
    assert m.tgt_embed is m.src_embed  # joint vocabulary, shared table


@pytest.mark.parametrize("norm_first,activation", [(True, "relu"), (False, "relu"), (True, "gelu")])
def test_variants_train_a_step(tokenizer, norm_first, activation):
    m = Transformer(tiny_config(tokenizer, norm_first=norm_first, activation=activation, share_embeddings=False, tie_output=False))
    logits = m(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7, 8]]))
    logits.sum().backward()
    assert logits.shape == (1, 3, tokenizer.vocab_size)
    assert m.output_proj.weight.grad is not None


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown config keys"):
        TransformerConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "colour": "red"})
