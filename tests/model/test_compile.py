"""The compiled decoder step decodes exactly what the eager model decodes, and warm-up leaves nothing to compile."""

import pytest
import torch
from torch._dynamo.utils import counters

import model.compile as model_compile
from model.batch import decode
from model.checkpoint import load_checkpoint
from model.compile import compile_model, uncompile, warm_rows, warm_up
from model.decoding import KVCache, greedy_decode
from model.screen import LogitScreen
from model.search import DecodingOptions
from tests.model.test_decoding import SOURCES, batch

MORE = [[5, 2], [20, 21, 22, 23, 24, 25, 26, 27, 28, 2], [29, 30, 31, 2]]
LONGEST = [list(range(40, 55)) + [2]]  # 16 tokens: the cache's whole source window


def test_warm_up_steps_one_row_two_rows_the_screens_minimum_and_all_rows():
    assert warm_rows(32, 4) == [1, 2, 4, 32] and warm_rows(32, None) == [1, 2, 32]
    assert warm_rows(16, 4) == [1, 2, 4, 16] and warm_rows(15, 4) == [1, 2, 4]
    assert warm_rows(3, 4) == [1, 2] and warm_rows(1, 4) == [1]


@pytest.fixture
def large_rows_from_3(monkeypatch):
    """Steps of 3 rows or more take the large-row graph (tuned at the cache's 4 rows), so that a small cache
    exercises every graph."""
    monkeypatch.setattr(model_compile, "LARGE_ROWS", 3)


@pytest.mark.parametrize("screen", [False, True], ids=["float32", "screened"])
def test_compiled_greedy_decoding_equals_eager_for_every_row_count_without_recompiling(
    trained_checkpoint, screen, large_rows_from_3
):
    eager, compiled = load_checkpoint(trained_checkpoint)[0], load_checkpoint(trained_checkpoint)[0]
    if screen:  # the bfloat16 screen (model/screen.py) inside the compiled step, from 3 rows on
        compiled.screen = LogitScreen(compiled.generator_weight, min_rows=3)
    cache = KVCache(compiled, max_batch=4, max_len=31, max_src_len=16)
    compile_model(compiled)
    assert warm_up(compiled, cache, steps=("greedy",)) > 0 and cache.n == 0
    graphs = counters["stats"]["unique_graphs"]

    # 1, 2, 3 and 4 rows; rows leave at different steps, so the batch shrinks across the graphs
    for rows in ([SOURCES[1]], SOURCES[:2], SOURCES[1:], SOURCES, MORE, [MORE[1]] * 4, LONGEST, LONGEST + MORE):
        got, want = greedy_decode(compiled, batch(rows), 30, cache), greedy_decode(eager, batch(rows), 30)
        for g, w in zip(got, want, strict=True):
            assert (g.tokens, g.finish_reason) == (w.tokens, w.finish_reason)
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-2 if screen else 1e-4)
        assert cache.n == 0, "greedy_decode hands the cache back empty"
    assert counters["stats"]["unique_graphs"] == graphs, "a batch after warm-up compiled a new graph"
    assert compiled.compiled_step.missed == 0, "a step fell back to the eager model"

    uncompile(compiled)
    assert not hasattr(compiled, "compiled_step") and not hasattr(compiled, "compiled_prefill")


def test_compiled_beam_search_and_sampling_equal_eager_without_recompiling(trained_checkpoint, monkeypatch):
    """Beam search and sampling step through the compiled full step (log-probabilities), also beside greedy rows."""
    eager, compiled = load_checkpoint(trained_checkpoint)[0], load_checkpoint(trained_checkpoint)[0]
    monkeypatch.setattr(model_compile, "LARGE_ROWS", 5)  # 1, 2 and 8 rows compile, 5 rows or more take the last
    cache = KVCache(compiled, max_batch=8, max_len=31, max_src_len=16)
    compile_model(compiled)
    warm_up(compiled, cache, steps=("logprobs",))  # only the full step runs below
    graphs = counters["stats"]["unique_graphs"]
    sources = SOURCES + MORE + LONGEST
    for options in (
        DecodingOptions(beam_size=4, num_hypotheses=4),
        DecodingOptions(beam_size=2, length_penalty=0.0),
        DecodingOptions(beam_size=8),  # one source fills the cache
        DecodingOptions(sampling_topk=5, seed=3),
    ):
        for rows in (8, 4):
            want = decode(eager, sources, [30] * len(sources), options, max_rows=rows)
            got = decode(compiled, sources, [30] * len(sources), options, max_rows=rows, cache=cache)
            for g, w in zip(got, want, strict=True):
                assert [h.tokens for h in g] == [h.tokens for h in w]
                assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4)
    assert counters["stats"]["unique_graphs"] == graphs, "a batch after warm-up compiled a new graph"
    assert compiled.compiled_logprob_step.missed == 0, "a step fell back to the eager model"


def test_warm_up_needs_an_empty_cache(tiny_model):
    cache = KVCache(tiny_model, max_batch=2, max_len=8, max_src_len=8)
    cache.add(tiny_model, batch([SOURCES[0]]))
    with pytest.raises(ValueError, match="empty cache"):
        warm_up(tiny_model, cache)


@torch.inference_mode()
def test_a_reused_cache_must_be_empty_and_long_enough(tiny_model):
    cache = KVCache(tiny_model, max_batch=2, max_len=8, max_src_len=8)
    with pytest.raises(ValueError, match="longer than max_new_tokens"):
        greedy_decode(tiny_model, batch([SOURCES[0]]), 8, cache)
