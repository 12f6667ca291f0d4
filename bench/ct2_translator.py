"""CTranslate2 greedy decoding on our token ids, without importing torch.

Kept apart from ct2_convert.py so that a benchmark process running CT2 never loads PyTorch: two OpenMP
runtimes in one process spin against each other on a small CPU and slow CT2 down several-fold.
"""

from __future__ import annotations

from pathlib import Path

import ctranslate2

from model.tokenizer import Tokenizer


class GreedyTranslator:
    """A CTranslate2 Translator that reads and returns our token ids, decoding greedily as greedy_decode does."""

    def __init__(self, model_dir: str | Path, tokenizer: Tokenizer, **translator_args):
        self.translator = ctranslate2.Translator(str(model_dir), **translator_args)
        self.id_to_token = [tokenizer.id_to_token(i, "source") for i in range(tokenizer.src_vocab_size)]
        self.token_to_id = {tokenizer.id_to_token(i): i for i in range(tokenizer.tgt_vocab_size)}

    def __call__(self, sources: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Source ids (each ending in </s>) -> generated ids without </s>; one batch, one budget."""
        results = self.translator.translate_batch(
            [[self.id_to_token[i] for i in ids] for ids in sources],
            beam_size=1,  # greedy; CT2's default is 2
            max_decoding_length=max_new_tokens,  # counts generated tokens, </s> included, as ours does
            min_decoding_length=0,  # ours may emit </s> first; CT2's default of 1 forbids it
            max_input_length=0,  # no truncation
        )
        return [[self.token_to_id[t] for t in r.hypotheses[0]] for r in results]
