from dataclasses import replace

import pytest
import torch

from model.decoding import KVCache, greedy_decode, greedy_decode_reference
from model.transformer import padding_mask, subsequent_mask
from tests.model.helpers import SOURCES, batch


def test_eos_model_finishes_rows_at_different_lengths(eos_model):
    hyps = greedy_decode_reference(eos_model, batch(SOURCES), 30)
    lengths = {len(h.tokens) for h in hyps if h.finish_reason == "eos"}
    assert len(lengths) >= 2, [(h.finish_reason, len(h.tokens)) for h in hyps]


@pytest.mark.parametrize("which", ["tiny_model", "eos_model"])
def test_cached_greedy_equals_recompute_reference(request, which):
    model = request.getfixturevalue(which)
    src = batch(SOURCES)
    cached, ref = greedy_decode(model, src, 25), greedy_decode_reference(model, src, 25)
    for c, r in zip(cached, ref):
        assert c.tokens == r.tokens
        assert c.finish_reason == r.finish_reason
        assert c.score == pytest.approx(r.score, abs=1e-5)


def test_cached_step_logits_equal_full_decoder_logits(tiny_model):
    """Feed the same target prefix both ways; every next-token logit agrees to 1e-4."""
    src = batch(SOURCES)
    tgt = torch.tensor([[1, 20, 21, 22, 23, 24]] * len(SOURCES))
    src_mask = padding_mask(src, 0)
    full = tiny_model.generator(
        tiny_model.decode(tgt, tiny_model.encode(src, src_mask), src_mask, subsequent_mask(tgt.size(1)))
    )  # (B, T, V)
    cache = KVCache(tiny_model, len(SOURCES), 16, src.size(1))
    cache.add(tiny_model, src)
    with torch.inference_mode():
        for t in range(tgt.size(1)):
            step = tiny_model.decode_step(tgt[:, t], cache)
            torch.testing.assert_close(step, full[:, t], atol=1e-4, rtol=0)


def test_padding_in_a_batch_does_not_change_a_translation(eos_model):
    alone = [greedy_decode(eos_model, batch([s]), 25)[0] for s in SOURCES]
    together = greedy_decode(eos_model, batch(SOURCES), 25)
    for a, t in zip(alone, together):
        assert a.tokens == t.tokens and a.finish_reason == t.finish_reason
        assert a.score == pytest.approx(t.score, abs=1e-5)


def test_rows_join_and_leave_mid_decode(eos_model):
    """Continuous batching on the cache: a row admitted later and a row removed early change nothing."""
    alone = {i: greedy_decode(eos_model, batch([s]), 12)[0].tokens for i, s in enumerate(SOURCES)}
    cache = KVCache(eos_model, 3, 13, 8)
    seqs, out = [], {}
    bos = eos_model.config.bos_id

    def admit(i):
        cache.add(eos_model, batch([SOURCES[i]]))
        seqs.append(i)
        out[i] = []

    admit(0)
    admit(1)
    tokens = torch.tensor([bos, bos])
    pending = [2, 3]
    with torch.inference_mode():
        for step in range(30):
            ids = eos_model.decode_step(tokens, cache).argmax(-1)
            done = []
            for r, tok in enumerate(ids.tolist()):
                if tok == eos_model.config.eos_id or len(out[seqs[r]]) == 12:
                    done.append(r)
                else:
                    out[seqs[r]].append(tok)
            for f, t in cache.remove(done):
                seqs[t] = seqs[f]
                ids[t] = ids[f]
            del seqs[cache.n :]
            tokens = ids[: cache.n]
            if step % 2 == 1 and pending and cache.free:  # join mid-decode
                admit(pending.pop(0))
                tokens = torch.cat([tokens, torch.tensor([bos])])
            if not seqs and not pending:
                break
    assert out == alone


@pytest.mark.parametrize("dead", [[0, 5, 13], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12]], ids=["few", "many"])
@torch.inference_mode()
def test_remove_moves_the_last_live_rows_into_the_holes_with_their_state(tiny_model, dead):
    """Few moves go row by row, many through index tensors (MOVE_BY_SLICES): both carry every row's state."""
    cache = KVCache(tiny_model, 20, 10, 8)
    gen = torch.Generator().manual_seed(0)
    for size in (12, 8):  # two admissions, so the rows sit at different positions
        src = torch.randint(4, 30, (size, 6), generator=gen)
        src[torch.arange(6) >= torch.randint(2, 7, (size, 1), generator=gen)] = tiny_model.config.pad_id
        cache.add(tiny_model, src)  # sources of 2 to 6 tokens
        for _ in range(3):
            cache.step(tiny_model.step, torch.randint(4, 30, (cache.n,), generator=gen))
    before = [t.clone() for t in (cache.kv, cache.cross_kv, cache.src_keep, cache.positions)]
    moves = cache.remove(dead)
    live = [r for r in range(20) if r not in dead]
    assert cache.n == len(live) and sorted(f for f, _ in moves) == [r for r in live if r >= cache.n]
    assert sorted(t for _, t in moves) == [r for r in dead if r < cache.n]
    for f, t in moves:  # the keys/values the row has written (past them it is masked), its source
        written = int(before[3][f])
        assert written in (3, 6) and torch.equal(cache.kv[:, :, t, :, :written], before[0][:, :, f, :, :written])
        real = int(before[2][f].sum())
        assert torch.equal(cache.cross_kv[:, :, t, :, :real], before[1][:, :, f, :, :real])
        assert torch.equal(cache.src_keep[t], before[2][f]) and cache.positions[t] == before[3][f]
    stays = [r for r in live if r < cache.n]
    assert torch.equal(cache.kv[:, :, stays], before[0][:, :, stays])


def test_cache_refuses_to_overflow(tiny_model):
    cache = KVCache(tiny_model, 1, 4, 8)
    with pytest.raises(ValueError, match="free slots"):
        cache.add(tiny_model, batch(SOURCES[:2]))
    with pytest.raises(ValueError, match="max_src_len"):
        cache.add(tiny_model, torch.ones(1, 9, dtype=torch.long))


def test_a_pad_id_inside_a_source_does_not_cut_its_window(eos_model):
    """A literal <pad> typed by a user becomes id 0 mid-sentence; batched must still equal alone."""
    odd = [5, 6, 0, 7, 8, 2]
    alone = greedy_decode(eos_model, batch([odd]), 12)[0]
    together = greedy_decode(eos_model, batch([odd, [9, 10, 11, 12, 13, 14, 15, 2]]), 12)[0]
    assert alone.tokens == together.tokens


@torch.inference_mode()
def test_packed_prefill_equals_padded_prefill_on_every_real_token(eos_model):
    from model.decoding import packed

    src = batch(SOURCES)  # lengths 7, 3, 5 and 2: padded to 7
    keep = src != 0
    want, got = eos_model.prefill(src), eos_model.prefill_packed(*packed(src, keep, keep.sum(1), int(keep.sum())))
    assert got.shape == want.shape
    real = keep[None, None, :, None, :, None].expand_as(want)  # (2, L, B, H, S, Dh)
    assert torch.allclose(got[real], want[real], atol=1e-5)


@torch.inference_mode()
def test_the_cache_packs_sources_of_different_lengths_and_only_those(tiny_model, monkeypatch):
    calls, real = [], tiny_model.steps.prefill_packed
    counted = replace(tiny_model.steps, prefill_packed=lambda *a: calls.append(a[0].numel()) or real(*a))
    monkeypatch.setattr(tiny_model, "steps", counted)  # what KVCache.add prefills with
    cache = KVCache(tiny_model, 8, 8, 16)
    cache.remove(cache.add(tiny_model, batch(SOURCES)))
    assert calls == [17], "7 + 3 + 5 + 2 real tokens, encoded without the 11 pads"
    cache.remove(cache.add(tiny_model, batch([SOURCES[0], SOURCES[0]])))  # the same length: nothing to save
    cache.remove(cache.add(tiny_model, batch([[5, 0, 6, 2], [7, 2]])))  # a pad inside a source: not packable
    assert calls == [17]
