"""Streaming detokenization: the text only ever grows, byte-fallback runs are held until they end, and every token's
text is settled by the end, a run's characters with its last byte."""

from __future__ import annotations

import random

from app.detokenize import IncrementalText, settled


def test_incremental_text_only_grows_and_settles_byte_runs_when_they_end(tokenizer):
    byte_ids = frozenset(tokenizer.hf.token_to_id(f"<0x{i:02X}>") for i in range(256))
    words = [i for i in range(4, tokenizer.vocab_size) if i not in byte_ids]
    rng = random.Random(0)
    for _ in range(300):  # random pieces, a third of them bytes: runs that do and do not form UTF-8
        ids = [rng.choice(sorted(byte_ids) if rng.random() < 0.35 else words) for _ in range(rng.randint(1, 25))]
        inc, shown, order = IncrementalText(tokenizer, byte_ids), "", []
        for k, i in enumerate(ids, 1):
            for token, delta, end in inc.add(i):
                assert inc.text.startswith(shown + delta) and end == len(shown + delta)
                shown += delta
                order.append(token)
            assert shown == inc.text and tokenizer.decode(ids).startswith(inc.text)
            if i not in byte_ids:
                assert inc.text == tokenizer.decode(ids[:k]) and order == ids[:k]
        shown += "".join(s.text for s in inc.close())
        assert shown == tokenizer.decode(ids)  # a run the ids end with is settled too
    text = "Zwei junge weiße Männer — naïve café €42 ❤"  # pieces the tiny vocabulary spells with bytes, one last
    ids = tokenizer.encode(text, side="target", add_special_tokens=False)
    assert byte_ids & set(ids) and ids[-1] in byte_ids
    pieces = settled(tokenizer, byte_ids, ids)
    assert [p.token for p in pieces] == ids and "".join(p.text for p in pieces) == text
    assert "\ufffd" not in "".join(p.text for p in pieces) and pieces[-1].text == "❤"  # with the run's last byte
