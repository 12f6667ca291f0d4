"""CTranslate2 greedy decoding and beam search on our token ids, without importing torch.

Kept apart from ct2_convert.py so that a benchmark process running CT2 never loads PyTorch: two OpenMP
runtimes in one process spin against each other on a small CPU and slow CT2 down several-fold.
"""

from __future__ import annotations

import json
from pathlib import Path

import ctranslate2

from model.tokenizer import Tokenizer


class GreedyTranslator:
    """A CTranslate2 Translator that reads and returns our token ids, decoding greedily as greedy_decode does."""

    search: dict = {"beam_size": 1}  # greedy; CT2's default is a beam of 2

    def __init__(self, model_dir: str | Path, tokenizer: Tokenizer, **translator_args):
        self.translator = ctranslate2.Translator(str(model_dir), **translator_args)
        self.id_to_token = [tokenizer.id_to_token(i, "source") for i in range(tokenizer.src_vocab_size)]
        self.token_to_id = {tokenizer.id_to_token(i): i for i in range(tokenizer.tgt_vocab_size)}
        # CT2's converter names the rows past a tokenizer's last id (NLLB's) itself: its vocabulary's order is the ids
        for name in ("shared_vocabulary.json", "target_vocabulary.json"):
            if (Path(model_dir) / name).is_file():
                vocabulary = json.loads((Path(model_dir) / name).read_text(encoding="utf-8"))
                self.token_to_id = {t: i for i, t in reversed(list(enumerate(vocabulary)))} | self.token_to_id

    def __call__(self, sources: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Source ids (each ending in </s>) -> generated ids without </s>; one batch, one budget."""
        results = self.translator.translate_batch(
            [[self.id_to_token[i] for i in ids] for ids in sources],
            **self.search,
            max_decoding_length=max_new_tokens,  # counts generated tokens, </s> included, as ours does
            min_decoding_length=0,  # ours may emit </s> first; CT2's default of 1 forbids it
            max_input_length=0,  # no truncation
        )
        return [[self.token_to_id[t] for t in r.hypotheses[0]] for r in results]


class BeamTranslator(GreedyTranslator):
    """The same on CT2's beam search: the best of `beam_size` beams, each finished hypothesis scored by its summed
    log-probabilities / length ** length_penalty with </s> counted in the length, as model/search.py scores it (CT2's
    translator keeps </s> in a hypothesis while scoring it, include_eos_in_hypotheses, and drops it from the
    result); with length_penalty 0 it stops once the top beam has finished, as BeamSearch does."""

    def __init__(self, model_dir: str | Path, tokenizer: Tokenizer, beam_size: int, length_penalty: float = 1.0,
                 **translator_args):  # fmt: skip
        super().__init__(model_dir, tokenizer, **translator_args)
        self.search = {"beam_size": beam_size, "length_penalty": length_penalty, "num_hypotheses": 1}
