"""The bfloat16 screen picks exactly float32 greedy's tokens, and hands back the rows it cannot vouch for."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from model.decoding import greedy_decode
from model.screen import BLOCK, LogitScreen, greedy_pick
from tests.model.helpers import SOURCES, batch

ROWS = SOURCES + [[5, 2], [20, 21, 22, 23, 24, 25, 26, 27, 28, 2], [29, 30, 31, 2], [8, 9, 10, 11, 2]]


def screened(model, min_rows: int = 1):
    m = copy.deepcopy(model)
    m.screen = LogitScreen(m.generator_weight, min_rows=min_rows)  # whether or not this CPU has native bfloat16
    return m


@pytest.mark.parametrize("which", ["tiny_model", "eos_model"])
def test_screened_greedy_decoding_equals_float32_greedy(request, which):
    model = request.getfixturevalue(which)
    src = batch(ROWS)
    want, got = greedy_decode(model, src, 25), greedy_decode(screened(model), src, 25)
    for g, w in zip(got, want, strict=True):
        assert (g.tokens, g.finish_reason) == (w.tokens, w.finish_reason)
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-2)


def test_rows_the_bound_cannot_vouch_for_are_settled_in_float32(tiny_model):
    model = screened(tiny_model)
    model.screen.eps = math.inf  # no row passes: every pick goes to confirm's float32 projection
    src = batch(ROWS)
    for g, w in zip(greedy_decode(model, src, 25), greedy_decode(tiny_model, src, 25), strict=True):
        assert (g.tokens, g.finish_reason) == (w.tokens, w.finish_reason)
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)  # confirm's log-probabilities are float32's


@pytest.fixture(scope="module")
def near_ties():
    """Output rows in pairs a bfloat16 rounding cannot tell apart, and hidden states of several scales."""
    torch.manual_seed(0)
    w = torch.randn(500, 64) * 0.2
    w = torch.cat([w, w + 1e-4 * torch.randn_like(w)])  # (1000, 64): token j and j + 500 nearly equal
    h = torch.randn(256, 64) * torch.logspace(-1, 1.5, 256)[:, None]  # (256, 64)
    return h, w


def test_a_vouched_pick_is_always_the_float32_argmax(near_ties):
    h, w = near_ties
    ids, logprobs = LogitScreen(w)(h, w)
    logits = F.linear(h, w)
    sure = ids >= 0
    assert 0 < int(sure.sum()) < len(h), "near ties: some rows must be handed back, some vouched for"
    assert torch.equal(ids[sure], logits.argmax(-1)[sure])
    want = logits.max(-1).values - logits.logsumexp(-1)
    assert logprobs[sure] == pytest.approx(want[sure], abs=1e-2)

    ids, logprobs = LogitScreen.confirm(ids, logprobs, h, lambda x: F.linear(x, w))
    assert torch.equal(ids, logits.argmax(-1))
    assert logprobs[~sure] == pytest.approx(want[~sure], abs=1e-5)


def test_most_rows_of_a_spread_out_distribution_are_vouched_for():
    torch.manual_seed(1)
    w, h = torch.randn(3000, 64) * 0.3, torch.randn(64, 64) * 3
    ids, _ = LogitScreen(w)(h, w)
    assert int((ids >= 0).sum()) >= 60 and torch.equal(ids[ids >= 0], F.linear(h, w).argmax(-1)[ids >= 0])


@pytest.mark.parametrize("vocab", [BLOCK * 5, BLOCK * 5 + 13, 40])  # whole blocks, a part block, fewer than K blocks
def test_top_k_finds_the_k_largest_values(vocab):
    torch.manual_seed(vocab)
    screen = LogitScreen(torch.randn(vocab, 8))
    x = torch.randn(6, vocab).bfloat16()
    top, at = screen.top_k(x)
    want = x.float().topk(screen.candidates, -1).values
    assert torch.equal(top, want)
    assert torch.equal(x.float().gather(-1, at), top)


def test_greedy_pick_computes_logsumexps_arithmetic_in_place():
    torch.manual_seed(3)
    logits = torch.randn(6, 5000) * 8
    logits[1, ::3] = float("-inf")  # suppressed ids
    logits[2] = float("-inf")  # nothing allowed: nan, as max - logsumexp gives
    logits[3, 7] = float("inf")
    best, want_ids = logits.max(-1)
    want = best - logits.logsumexp(-1)
    ids, got = greedy_pick(logits.clone())
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # the same arithmetic, bit for bit
