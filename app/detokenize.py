"""Streaming detokenization: the text of a growing list of target ids, a piece at a time."""

from __future__ import annotations

from model.tokenizer import Tokenizer


class IncrementalText:
    """The text of a growing list of target ids, which only ever grows.

    Each non-byte piece re-decodes the whole prefix and reports the new suffix. A run of byte-fallback pieces
    (<0xC3><0xA4> = "ä") is held back until a non-byte piece ends it: the tokenizer decodes a run as a whole,
    so a later byte can turn an earlier complete character into replacement characters.
    """

    def __init__(self, tokenizer: Tokenizer, byte_ids: frozenset[int]):
        self.tokenizer, self.byte_ids = tokenizer, byte_ids
        self.ids: list[int] = []
        self.text = ""

    def add(self, token: int) -> str:
        """Append a token id; return the text it makes final ("" while a byte run is open)."""
        self.ids.append(token)
        if token in self.byte_ids:
            return ""
        text = self.tokenizer.decode(self.ids)
        delta, self.text = text[len(self.text) :], text
        return delta
