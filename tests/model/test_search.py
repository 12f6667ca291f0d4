"""Beam search, sampling and forced prefixes: the batched, cached searches against plain references."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from model.batch import RowBatch, decode, new_search
from model.decoding import KVCache, greedy_decode
from model.search import DecodingOptions, alignment, alignments, beam_search_reference

BEAMS = [(2, 0.0), (2, 1.0), (2, 1.2), (4, 0.0), (4, 1.0), (4, 1.2), (5, 0.0), (5, 1.0), (5, 1.2)]


@pytest.fixture(scope="module")
def sources(trained, pairs):
    return trained[1].encode_batch([en for en, _ in pairs[:200]], side="source")


def budget(src: list[int]) -> int:
    return min(40, len(src) + 8)


def same(got, want) -> None:
    assert [h.tokens for h in got] == [h.tokens for h in want]
    assert [h.finish_reason for h in got] == [h.finish_reason for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


@pytest.mark.parametrize(("beam", "penalty"), BEAMS, ids=[f"beam{b}-lp{p}" for b, p in BEAMS])
def test_batched_beam_search_equals_the_recompute_reference_on_200_sentences(trained, sources, beam, penalty):
    model = trained[0]
    options = DecodingOptions(beam_size=beam, length_penalty=penalty, num_hypotheses=2)
    batched = decode(model, sources, [budget(s) for s in sources], options, max_rows=64)  # many searches per batch
    for src, got in zip(sources, batched):
        same(got, beam_search_reference(model, src, budget(src), options))


def test_the_hypotheses_come_best_first_with_length_normalized_scores(trained, sources):
    model = trained[0]
    for src in sources[:20]:
        hyps = decode(model, [src], [budget(src)], DecodingOptions(beam_size=4, num_hypotheses=4))[0]
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            assert h.score == pytest.approx(sum(h.logprobs) / len(h.logprobs), abs=1e-6)
            assert len(h.logprobs) == len(h.tokens) + (h.finish_reason == "eos")


def test_beam_search_finds_hypotheses_at_least_as_likely_as_greedy(trained, sources):
    model = trained[0]
    for src in sources[:30]:
        (g,) = greedy_decode(model, torch.tensor([src]), budget(src))
        (b,) = decode(model, [src], [budget(src)], DecodingOptions(beam_size=5, length_penalty=0.0))[0]
        assert sum(b.logprobs) >= sum(g.logprobs) - 1e-4


def test_a_beam_of_one_is_greedy_bit_for_bit(trained, sources):
    model = trained[0]
    for src in sources[:40]:
        ((h,),) = decode(model, [src], [budget(src)], DecodingOptions(beam_size=1))
        (g,) = greedy_decode(model, torch.tensor([src]), budget(src))
        assert (h.tokens, h.logprobs, h.finish_reason) == (g.tokens, g.logprobs, g.finish_reason)


def test_a_prefix_is_forced_and_greedy_continues_it_as_it_would_have(trained, sources):
    model = trained[0]
    for src in sources[:30]:
        (g,) = greedy_decode(model, torch.tensor([src]), budget(src))
        k = len(g.tokens) // 2
        (h,) = decode(model, [src], [budget(src)], DecodingOptions(prefix=tuple(g.tokens[:k])))[0]
        assert h.tokens == g.tokens and h.logprobs == pytest.approx(g.logprobs, abs=1e-5)
        forced = (g.tokens[0] + 1, g.tokens[0] + 2)  # unlikely tokens: the output still starts with them
        for options in (DecodingOptions(prefix=forced), DecodingOptions(prefix=forced, beam_size=3)):
            (h,) = decode(model, [src], [budget(src)], options)[0]
            assert tuple(h.tokens[:2]) == forced


def test_beam_search_with_a_prefix_equals_the_reference(trained, sources):
    model = trained[0]
    for src in sources[:25]:
        (g,) = greedy_decode(model, torch.tensor([src]), budget(src))
        options = DecodingOptions(beam_size=3, num_hypotheses=3, prefix=tuple(g.tokens[:2]))
        same(decode(model, [src], [budget(src)], options)[0], beam_search_reference(model, src, budget(src), options))


def test_sampling_is_seeded_alone_or_batched_and_top_k_1_is_greedy(trained, sources):
    model = trained[0]
    options = DecodingOptions(sampling_topk=20, sampling_temperature=1.3, seed=7, num_hypotheses=2)
    budgets = [budget(s) for s in sources[:24]]
    batched = decode(model, sources[:24], budgets, options)
    for src, b, got in zip(sources, budgets, batched):
        assert [h.tokens for h in decode(model, [src], [b], options)[0]] == [h.tokens for h in got]
    other = decode(model, sources[:24], budgets, DecodingOptions(sampling_topk=20, sampling_temperature=1.3, seed=8))
    assert [h[0].tokens for h in other] != [h[0].tokens for h in batched]
    greedy = decode(model, sources[:24], budgets, DecodingOptions())
    top1 = decode(model, sources[:24], budgets, DecodingOptions(sampling_topk=1, sampling_temperature=0.5, seed=3))
    assert [h[0].tokens for h in top1] == [h[0].tokens for h in greedy]


@torch.inference_mode()
def test_reorder_gives_each_row_the_state_of_its_parent(tiny_model):
    cache = KVCache(tiny_model, 6, 10, 8)
    cache.add(tiny_model, torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]))
    cache.duplicate([0, 0, 1])  # rows 2, 3 copy row 0; row 4 copies row 1
    assert torch.equal(cache.cross_kv[:, :, 2, :, :4], cache.cross_kv[:, :, 0, :, :4])
    assert torch.equal(cache.src_keep[4], cache.src_keep[1])
    for _ in range(3):
        cache.step(tiny_model.step, torch.randint(4, 30, (cache.n,)))
    before = cache.kv.clone()
    cache.reorder([0, 2, 3], [3, 0, 0])  # rows 0 and 2 swap histories through row 3's old state
    assert torch.equal(cache.kv[:, :, 0, :, :3], before[:, :, 3, :, :3])
    assert torch.equal(cache.kv[:, :, 2, :, :3], before[:, :, 0, :, :3])
    assert torch.equal(cache.kv[:, :, 3, :, :3], before[:, :, 0, :, :3])
    assert torch.equal(cache.kv[:, :, 1], before[:, :, 1]) and torch.equal(cache.kv[:, :, 4], before[:, :, 4])


def test_searches_of_every_kind_joining_a_running_batch_equal_their_runs_alone(trained, sources):
    """RowBatch with greedy, beam, sampled and prefixed searches admitted at different steps."""
    model, c = trained[0], trained[0].config
    kinds = [
        DecodingOptions(), DecodingOptions(beam_size=4, num_hypotheses=2), DecodingOptions(beam_size=2, length_penalty=0),
        DecodingOptions(sampling_topk=5, seed=1, num_hypotheses=3), DecodingOptions(prefix=(7, 8)),
    ]  # fmt: skip
    jobs = [(sources[i], kinds[i % len(kinds)]) for i in range(30)]
    batch = RowBatch(model, KVCache(model, 24, 41, 64))
    pending, searches = list(jobs), []
    with torch.inference_mode():
        while pending or len(batch):
            while pending and batch.cache.free >= max(pending[0][1].beam_size, pending[0][1].num_hypotheses):
                src, options = pending.pop(0)
                s = new_search(options, budget(src), c)
                searches.append(s)
                batch.add([s], torch.tensor([src]))
                if len(searches) % 3:
                    break  # admit one or two per step, so they join mid-decode
            batch.step()
    for (src, options), s in zip(jobs, searches):
        same(s.results(), decode(model, [src], [budget(src)], options)[0])


def test_alignments_in_one_padded_pass_equal_each_sources_own(trained, sources):
    """What the engine aligns a request's sentences with: the per-source alignment, without a pass per source."""
    model, _ = trained
    srcs = sources[:40]
    hyps = [[h.tokens for h in hs] for hs in decode(model, srcs, [30] * len(srcs), DecodingOptions(2, 2))]
    start = (5,)  # a many-to-many model's target language, fed first
    with torch.inference_mode():
        for at in ((), start):
            assert alignments(model, srcs, hyps, at) == [alignment(model, s, h, at) for s, h in zip(srcs, hyps)]
    assert alignments(model, [srcs[0]], [[]]) == [[]]


def test_after_a_prefix_that_ended_in_a_space_the_next_token_begins_a_word_in_every_search(trained, sources):
    """DecodingOptions.word_after_prefix: the first token after the prefix is none of `glued` (the tokens that
    continue a word), in greedy, sampling and beam search; here `glued` bars the token greedy would pick there."""
    model = trained[0]
    for src in sources[:20]:
        (g,) = greedy_decode(model, torch.tensor([src]), budget(src))
        if len(g.tokens) < 3:
            continue
        glued = torch.zeros(model.config.tgt_vocab_size, dtype=torch.bool)
        glued[g.tokens[1]] = True
        asked = DecodingOptions(prefix=(g.tokens[0],), word_after_prefix=True, glued=glued)
        for options in (asked, replace(asked, sampling_topk=5, seed=1), replace(asked, beam_size=3)):
            (h, *_) = decode(model, [src], [budget(src)], options)[0]
            assert h.tokens[0] == g.tokens[0] and h.tokens[1] != g.tokens[1], options
        beam = replace(asked, beam_size=3, num_hypotheses=3)
        same(decode(model, [src], [budget(src)], beam)[0], beam_search_reference(model, src, budget(src), beam))
        (h,) = decode(model, [src], [budget(src)], replace(asked, word_after_prefix=False))[0]
        assert h.tokens == g.tokens  # not asked: the prefix goes on as greedy would
