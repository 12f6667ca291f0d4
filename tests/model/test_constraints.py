"""Lexically constrained decoding: every hypothesis holds every phrase, whatever the search, and the rows of other
searches in the same batch decode as they would alone."""

from __future__ import annotations

import random

import pytest
import torch

from model.batch import RowBatch, decode, new_search
from model.constraints import Constraints, Phrase, Progress, continues_word
from model.decoding import KVCache
from model.search import DecodingOptions


@pytest.fixture(scope="module")
def sources(trained, pairs):
    return trained[1].encode_batch([en for en, _ in pairs[:40]], side="source")


def holds(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


def random_phrases(rng: random.Random, vocab: int, low: int) -> tuple[Phrase, ...]:
    """1 to 3 phrases of 1 to 3 ordinary tokens (ids from `low`: past the special ones)."""
    return tuple(
        Phrase(tuple(rng.randrange(low, vocab) for _ in range(rng.randint(1, 3)))) for _ in range(rng.randint(1, 3))
    )


KINDS = {
    "greedy": {},
    "beam4": {"beam_size": 4},
    "beam2-nbest2": {"beam_size": 2, "num_hypotheses": 2},
    "sampling": {"sampling_topk": 5, "seed": 3},
    "prefix": {"prefix": (7, 8)},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_hypothesis_holds_every_phrase(trained, sources, kind):
    model = trained[0]
    rng, vocab = random.Random(kind), model.config.tgt_vocab_size
    for src in sources:
        phrases = random_phrases(rng, vocab, 4)
        options = DecodingOptions(constraints=phrases, **KINDS[kind])
        need = sum(len(p.tokens) for p in phrases) + len(options.prefix)
        for budget in (need + 1, need + 12):  # just room for them (and the prefix, which counts), and more
            for hyp in decode(model, [src], [budget], options)[0]:
                assert all(holds(hyp.tokens, p.tokens) for p in phrases), (kind, phrases, hyp.tokens)
                assert len(hyp.logprobs) <= budget
                assert hyp.tokens[: len(options.prefix)] == list(options.prefix)
                # the terms' tokens are marked as the caller's (their probabilities leave the confidence out)
                assert all(hyp.tokens[i] in {t for p in phrases for t in p.tokens} for i in hyp.terms)
                assert len(hyp.terms) >= sum(map(len, {p.tokens for p in phrases}))


def test_a_phrase_begins_in_place_of_the_token_it_stands_for(trained, sources):
    model = trained[0]
    for src in sources[:10]:
        (plain,) = decode(model, [src], [30], DecodingOptions())[0]
        if len(plain.tokens) < 3:
            continue
        word = plain.tokens[1]  # the plain output's second token: the phrase goes where it went
        phrase = Phrase((5, 6), instead_of=frozenset({word}))
        (hyp,) = decode(model, [src], [32], DecodingOptions(constraints=(phrase,)))[0]
        assert hyp.tokens[:3] == [plain.tokens[0], 5, 6]
        assert hyp.tokens[3:4] != [word]  # and the word it replaced does not follow it


def test_no_word_piece_is_glued_to_the_end_of_a_phrase(trained, sources):
    model = trained[0]
    checked = 0
    for beam in (1, 3):
        for src in sources[:10]:
            (plain,) = decode(model, [src], [30], DecodingOptions())[0]
            if len(plain.tokens) < 3:
                continue
            glued = torch.zeros(model.config.tgt_vocab_size, dtype=torch.bool)
            glued[plain.tokens[1]] = True  # as if the plain output's second token went on its first word
            options = DecodingOptions(beam_size=beam, constraints=(Phrase((plain.tokens[0],)),), glued=glued)
            hyp = decode(model, [src], [30], options)[0][0]
            at = hyp.tokens.index(plain.tokens[0])
            assert hyp.tokens[at + 1 : at + 2] != [plain.tokens[1]], hyp.tokens
            checked += 1
    assert checked


def test_a_word_goes_on_with_a_piece_without_a_space_in_front_that_is_a_letter_a_digit_or_a_hyphen():
    assert all(map(continues_word, ["el", "s", "9", "-Fahrer", "-", "‑"]))
    assert not any(map(continues_word, ["▁Hund", "▁", ".", ",", ")", "'s", "", "</s>"]))


def test_unconstrained_rows_beside_constrained_ones_decode_as_they_would_alone(trained, sources):
    model = trained[0]
    rng = random.Random(1)
    plain = [DecodingOptions(), DecodingOptions(beam_size=3)]
    alone = [decode(model, sources, [30] * len(sources), o) for o in plain]
    cache = KVCache(model, 200, 40, max(map(len, sources)))
    batch, searches = RowBatch(model, cache), []
    for i, src in enumerate(sources):  # each source three times: greedy, beam, and constrained
        row = [new_search(o, 30, model.config) for o in plain]
        row.append(
            new_search(
                DecodingOptions(constraints=random_phrases(rng, model.config.tgt_vocab_size, 4)), 30, model.config
            )
        )
        searches.append(row)
        batch.add(row, torch.tensor([src] * 3))
    while len(batch):
        batch.step()
    for i in range(len(sources)):
        for k in range(2):
            assert [h.tokens for h in searches[i][k].results()] == [h.tokens for h in alone[k][i]]


def test_progress_through_phrases_that_share_a_first_token():
    k = Constraints((Phrase((1, 2)), Phrase((1, 3)), Phrase((1, 2))))  # the duplicate counts once
    assert k.phrases == ((1, 2), (1, 3))
    p = k.after(Progress(), 1)
    assert k.forced(p) == 2 and k.needed(p) == 3
    p = k.after(p, 2)
    assert p.met == {0} and p.ended == 0 and not k.done(p)
    p = k.after(k.after(p, 1), 3)
    assert k.done(p) and k.produced(p) == 4
    abandoned = k.after(k.after(Progress(), 1), 7)  # a token other than the forced one (a target prefix) abandons it
    assert abandoned.current == -1 and not abandoned.met


def test_a_phrase_begins_where_the_step_translates_its_source_term(trained, sources):
    """One row: where a step's cross-attention is on the phrase's source positions, the phrase begins (the step's
    own word gives way), and not before; a phrase met does not begin again there."""
    model, checked = trained[0], 0
    for src in sources[:10]:
        (plain,) = decode(model, [src], [30], DecodingOptions())[0]
        assert len(plain.aligned) >= len(plain.tokens)  # </s> has its step too
        if len(plain.tokens) < 4:
            continue
        at = plain.aligned[2]  # the source token the plain output's third token translates
        first = plain.aligned.index(at)  # the first step that translates it
        phrase = Phrase((5, 6), source_at=frozenset({at}))
        options = DecodingOptions(constraints=(phrase,), constraint_margin=0.0)  # no phrase where the model is sure
        (hyp,) = decode(model, [src], [34], options)[0]
        assert hyp.tokens[: first + 2] == [*plain.tokens[:first], 5, 6], (plain.tokens, plain.aligned, hyp.tokens)
        assert hyp.tokens.count(5) == plain.tokens.count(5) + 1
        checked += 1
    assert checked


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_hypothesis_ends_its_sentence_before_every_phrase_is_in(trained, sources, kind):
    """Where the source ends a sentence, the tokens that end one (`stops`) wait, as </s> does, for the phrases:
    a phrase the model leaves out goes before the closing punctuation, not after it ("Ein Hund. Köter")."""
    from app.terms import is_stop

    model, tokenizer = trained
    stops = frozenset(i for i in range(model.config.tgt_vocab_size) if is_stop(tokenizer.id_to_token(i, "target")))
    assert stops
    rng, vocab, ended = random.Random(kind), model.config.tgt_vocab_size, 0
    for src in sources:
        phrases = tuple(p for p in random_phrases(rng, vocab, 4) if not stops & set(p.tokens))
        for hyp in decode(model, [src], [40], DecodingOptions(constraints=phrases, stops=stops, **KINDS[kind]))[0]:
            assert all(holds(hyp.tokens, p.tokens) for p in phrases)
            closing = [i for i, t in enumerate(hyp.tokens) if t in stops]
            assert not closing or not hyp.terms or min(closing) > max(hyp.terms), (phrases, hyp.tokens)
            ended += bool(closing)
    assert ended > len(sources) // 2  # the model does end its sentences
