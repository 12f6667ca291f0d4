"""Helpers the tests of many-to-many models served over HTTP share (tests/app/test_multilingual.py,
tests/app/test_multilingual_mbart.py): the token budget, how many sentences a direction gets, and transformers'
own translations to compare the served ones with."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
BUDGET = 12
PER_DIRECTION = 12


def generate(hf, dirs, src: str, tgt: str, texts: list[str], **kwargs) -> tuple[list[list[int]], list[str]]:
    """transformers' tokens (without the forced code and </s>) and texts for `texts` from src into tgt."""
    tok = transformers.AutoTokenizer.from_pretrained(str(dirs[0]), src_lang=src, tgt_lang=tgt)
    code = tok.convert_tokens_to_ids(tgt)
    ids, out = [], []
    with torch.inference_mode():
        for text in texts:
            got = hf.generate(**tok(text, return_tensors="pt"), forced_bos_token_id=code, max_new_tokens=BUDGET + 1,
                              do_sample=False, early_stopping=True, **kwargs)[0].tolist()  # fmt: skip
            ids.append(got[2 : len(got) - (got[-1] == 2)])
            out.append(tok.batch_decode([ids[-1]], skip_special_tokens=True)[0].strip())
    return ids, out
