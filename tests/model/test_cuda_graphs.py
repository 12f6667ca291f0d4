"""The CUDA graphs' buckets and padding, checked on any device: GraphedSteps(emulate=True) runs the padded shapes the
graphs replay, eagerly. A real capture is tests/cuda's."""

import pytest
import torch

from model.batch import decode
from model.checkpoint import load_checkpoint
from model.compile import adopt, uncompile
from model.cuda_graphs import GraphedSteps, bucket, capture_graphs, row_buckets, window_buckets
from model.decoding import KVCache, greedy_decode
from model.search import DecodingOptions
from tests.model.helpers import SOURCES, batch

MORE = [[5, 2], [20, 21, 22, 23, 24, 25, 26, 27, 28, 2], [29, 30, 31, 2], list(range(40, 79)) + [2]]


def test_buckets_are_powers_of_two_up_to_the_cache():
    assert row_buckets(1) == [1] and row_buckets(2) == [1, 2] and row_buckets(6) == [1, 2, 4, 6]
    assert row_buckets(512) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert window_buckets(257) == [32, 64, 128, 256, 257] and window_buckets(20) == [20]
    assert [bucket(n, [1, 2, 4, 6]) for n in range(1, 7)] == [1, 2, 4, 4, 6, 6]


def test_a_cpu_cache_is_refused_unless_emulated(tiny_model):
    cache = KVCache(tiny_model, 2, 8, 8)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA cache"):
        GraphedSteps(tiny_model, cache)


def test_a_batch_runs_the_smallest_graph_that_holds_it(tiny_model):
    cache = KVCache(tiny_model, 6, 70, 40)
    steps = GraphedSteps(tiny_model, cache, emulate=True)
    plan = steps.plan()
    assert plan[0] == ("greedy_step", 6, 70) and plan[-1] == ("step_hidden", 1, 32) and len(plan) == 2 * 4 * 3
    assert steps.padded("greedy_step", 3, 5, 9) is None  # nothing captured yet: the step runs eagerly
    for key in plan[:12]:
        steps.capture(*key)
    assert steps.padded("greedy_step", 3, 5, 9) == (4, 32, 32)
    assert steps.padded("greedy_step", 5, 40, 9) == (6, 64, 40)  # one window for keys and sources, each cut
    assert steps.padded("greedy_step", 1, 70, 40) == (1, 70, 40)
    assert steps.padded("greedy_step", 7, 5, 5) is None
    assert steps.padded("step_hidden", 3, 5, 9) is None  # the full step's graphs come after the greedy step's


@pytest.fixture(scope="module")
def models(trained_checkpoint):
    return load_checkpoint(trained_checkpoint)[0], load_checkpoint(trained_checkpoint)[0]


def test_padding_rows_never_change_a_real_rows_tokens(models):
    """Rows leave at different steps, so the live rows run graphs of 6, 4, 2 and 1 rows with stale padding rows
    after them (freed rows: old keys, positions and sources, or none at all); every token and score is eager's."""
    eager, graphed = models
    cache = KVCache(graphed, max_batch=6, max_len=61, max_src_len=40)
    graphs = capture_graphs(graphed, cache, emulate=True)
    adopt(graphed, graphs)
    steps = graphed.steps.greedy_step.steps  # the greedy step adopted: its captured graphs
    try:
        for rows in ([SOURCES[1]], SOURCES, MORE, SOURCES[:2] + MORE, [MORE[3]] * 5):
            got, want = greedy_decode(graphed, batch(rows), 60, cache), greedy_decode(eager, batch(rows), 60)
            for g, w in zip(got, want, strict=True):
                assert (g.tokens, g.finish_reason) == (w.tokens, w.finish_reason)
                assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
        assert steps.replays > 0
    finally:
        uncompile(graphed)


def test_beam_search_and_sampling_on_the_graphs_equal_eager(models):
    eager, graphed = models
    cache = KVCache(graphed, max_batch=6, max_len=61, max_src_len=40)
    adopt(graphed, capture_graphs(graphed, cache, emulate=True))
    try:
        sources = SOURCES + MORE
        budgets = [30] * len(sources)
        for options in (DecodingOptions(beam_size=3, num_hypotheses=2), DecodingOptions(sampling_topk=5, seed=3)):
            got = decode(graphed, sources, budgets, options, max_rows=6, cache=cache)
            want = decode(eager, sources, budgets, options, max_rows=6)
            assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
    finally:
        uncompile(graphed)


def test_nan_in_a_padding_row_stays_there(models):
    """A freed row whose source mask is all False attends to nothing (NaN): the live rows are untouched."""
    eager, graphed = models
    cache = KVCache(graphed, max_batch=4, max_len=61, max_src_len=40)
    adopt(graphed, capture_graphs(graphed, cache, emulate=True))
    try:
        cache.src_keep.zero_()  # every free row: no source token to attend to
        cache.tokens.fill_(7)
        got = greedy_decode(graphed, batch(SOURCES[:3]), 30, cache)
        want = greedy_decode(eager, batch(SOURCES[:3]), 30)
        assert [h.tokens for h in got] == [h.tokens for h in want]
        assert all(torch.isfinite(torch.tensor(h.logprobs)).all() for h in got)
    finally:
        uncompile(graphed)
