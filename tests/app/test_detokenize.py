"""Streaming detokenization: the text only ever grows, and byte-fallback runs are held until they end."""

from __future__ import annotations

import random

from app.detokenize import IncrementalText


def test_incremental_text_only_grows_and_holds_byte_runs_until_they_end(tokenizer):
    byte_ids = frozenset(tokenizer.hf.token_to_id(f"<0x{i:02X}>") for i in range(256))
    words = [i for i in range(4, tokenizer.vocab_size) if i not in byte_ids]
    rng = random.Random(0)
    for _ in range(300):  # random pieces, a third of them bytes: runs that do and do not form UTF-8
        ids = [rng.choice(sorted(byte_ids) if rng.random() < 0.35 else words) for _ in range(rng.randint(1, 25))]
        inc, shown = IncrementalText(tokenizer, byte_ids), ""
        for k, i in enumerate(ids, 1):
            delta = inc.add(i)
            assert inc.text == shown + delta and tokenizer.decode(ids).startswith(inc.text)
            shown = inc.text
            if i not in byte_ids:
                assert inc.text == tokenizer.decode(ids[:k])
    text = "Zwei junge weiße Männer — naïve café €42"  # pieces the tiny vocabulary spells with bytes
    ids = tokenizer.encode(text, side="target", add_special_tokens=False)
    assert byte_ids & set(ids)
    inc = IncrementalText(tokenizer, byte_ids)
    deltas = [inc.add(i) for i in ids]
    assert "".join(deltas) == inc.text == text and "\ufffd" not in "".join(deltas)
