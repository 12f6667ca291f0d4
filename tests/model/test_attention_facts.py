"""What each decoder step's cross-attention says of its row (KVCache.facts, Hypothesis.attention and .aligned):
the same as a teacher-forced pass over the finished hypotheses finds, for greedy, sampled and beam rows stepped
together, with and without a forced start token."""

from __future__ import annotations

import pytest
import torch

from model.batch import RowBatch, decode, new_search
from model.decoding import KVCache, greedy_decode
from model.search import DecodingOptions, alignment
from model.transformer import attention_facts


def budget(src: list[int]) -> int:
    return min(30, len(src) + 6)


def distances(model, src: list[int], tokens: list[int], start: tuple[int, ...] = ()) -> list[float]:
    """Each step's Wasserstein-1 distance of the alignment layer's head-averaged cross-attention from uniform over the
    source, written out plainly from a teacher-forced pass: one per generated token and one for </s>."""
    c = model.config
    tgt = torch.tensor([[c.bos_id, *start, *tokens]])
    _, _, cross = model.attention_weights(torch.tensor([src]), tgt)
    weights = cross[model.alignment_layer][0].mean(0)[len(start) :]  # (T, S): row t predicts token t
    n = len(src)
    out = []
    for row in weights.tolist():
        spent = uniform = distance = 0.0
        for w in row:
            spent, uniform = spent + w, uniform + 1 / n
            distance += abs(spent - uniform)
        out.append(distance / n)
    return out


def check(model, src: list[int], h, start: tuple[int, ...] = ()) -> None:
    steps = len(h.logprobs)
    assert len(h.attention) == len(h.aligned) == steps
    assert h.attention == pytest.approx(distances(model, src, h.tokens, start)[:steps], abs=2e-5)
    with_eos = h.tokens + [model.config.eos_id] if h.finish_reason == "eos" else h.tokens
    assert h.aligned == alignment(model, src, [with_eos], start)[0][:steps]


@pytest.fixture(scope="module")
def sources(trained, pairs):
    return trained[1].encode_batch([en for en, _ in pairs[:40]], side="source")


def test_greedy_decoding_keeps_each_steps_attention_facts(trained, sources):
    model = trained[0]
    for src, h in zip(sources, decode(model, sources, [budget(s) for s in sources], DecodingOptions())):
        check(model, src, h[0])
    padded = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sources[:8]], batch_first=True,
                                             padding_value=model.config.source_pad_id)  # fmt: skip
    for src, h in zip(sources[:8], greedy_decode(model, padded, 30)):
        check(model, src, h)


KINDS = [DecodingOptions(beam_size=4, num_hypotheses=2), DecodingOptions(sampling_topk=5, num_hypotheses=2, seed=3),
         DecodingOptions(beam_size=3, start=(9,))]  # fmt: skip


@pytest.mark.parametrize("options", KINDS, ids=["beam", "sampled", "beam-start"])
def test_beam_and_sampled_rows_keep_their_own_hypotheses_facts(trained, sources, options):
    model = trained[0]
    for src, hyps in zip(sources, decode(model, sources, [budget(s) for s in sources], options, max_rows=48)):
        for h in hyps:
            check(model, src, h, options.start)


def test_rows_of_every_kind_in_one_batch_keep_their_facts(trained, sources):
    """Greedy rows beside beam and sampled ones: the step then is the full one (or the greedy one with hidden
    states), and each search still gets its own rows' facts."""
    model, c = trained[0], trained[0].config
    kinds = [DecodingOptions(), *KINDS]
    searches = [new_search(kinds[i % len(kinds)], budget(s), c) for i, s in enumerate(sources[:16])]
    rows = sum(s.rows for s in searches)
    batch = RowBatch(model, KVCache(model, rows, 40, max(map(len, sources[:16]))))
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sources[:16]], batch_first=True,
                                          padding_value=c.source_pad_id)  # fmt: skip
    batch.add(searches, src)
    while len(batch):
        batch.step()
    for i, (src, search) in enumerate(zip(sources, searches)):
        for h in search.results():
            check(model, src, h, kinds[i % len(kinds)].start)


def test_attention_facts_of_even_and_peaked_weights():
    keep = torch.tensor([[True, True, True, True], [True, True, True, False]])
    even = torch.tensor([[0.25] * 4, [1 / 3] * 3 + [0.0]])
    assert attention_facts(even, keep)[:, 0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    on_last = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])  # all on the closing token
    facts = attention_facts(on_last, keep)
    assert facts[:, 0].tolist() == pytest.approx([(0.25 + 0.5 + 0.75) / 4, (1 / 3 + 2 / 3) / 3])
    assert facts[:, 1].tolist() == [0.0, 0.0]  # the closing token is never the aligned one: the first of the rest
    peaked = torch.tensor([[0.1, 0.7, 0.1, 0.1], [0.2, 0.1, 0.7, 0.0]])
    assert attention_facts(peaked, keep)[:, 1].tolist() == [1.0, 0.0]


def test_the_aligned_token_is_one_of_the_text_s_never_a_language_code_around_it():
    """A many-to-many source: `code text </s>` (lead 1, tail 1) or NLLB's legacy `text </s> code` (lead 0, tail 2).
    The weights rest on the specials; the aligned token is the text's most weighed, or a special where there is no
    text."""
    keep = torch.tensor([[True] * 5, [True] * 4 + [False], [True, True, False, False, False]])
    weights = torch.tensor([[0.5, 0.1, 0.2, 0.0, 0.2], [0.4, 0.05, 0.1, 0.45, 0.0], [0.7, 0.3, 0.0, 0.0, 0.0]])
    assert attention_facts(weights, keep, lead=1, tail=1)[:, 1].tolist() == [2.0, 2.0, 0.0]
    assert attention_facts(weights, keep, lead=0, tail=2)[:, 1].tolist() == [0.0, 0.0, 0.0]
    legacy = torch.tensor([[0.1, 0.05, 0.15, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4, 0.0], [0.7, 0.3, 0.0, 0.0, 0.0]])
    assert attention_facts(legacy, keep, lead=0, tail=2)[:, 1].tolist() == [2.0, 1.0, 0.0]
