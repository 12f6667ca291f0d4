"""Streaming detokenization: the text of a growing list of target ids, a piece at a time."""

from __future__ import annotations

from typing import NamedTuple

from model.tokenizer import Tokenizer


class Settled(NamedTuple):
    """A token whose text is final: the token, the text it adds, and where that text ends in the translation."""

    token: int
    text: str
    end: int


class IncrementalText:
    """The text of a growing list of target ids, which only ever grows.

    Each non-byte piece re-decodes the whole prefix and settles its new suffix. A run of byte-fallback pieces
    (<0xC3><0xA4> = "ä") is held until a non-byte piece or the end closes it: the tokenizer decodes a run as a whole,
    so a later byte can turn an earlier complete character into replacement characters. A closed run's characters go
    with its last byte, the closing piece's own text with that piece.
    """

    def __init__(self, tokenizer: Tokenizer, byte_ids: frozenset[int]):
        self.tokenizer, self.byte_ids = tokenizer, byte_ids
        self.ids: list[int] = []
        self.held = 0  # the open byte run's length
        self.text = ""  # the settled tokens' text

    def add(self, token: int) -> list[Settled]:
        """Append a token id; return the tokens this settles, in order (none while a byte run is open)."""
        self.ids.append(token)
        if token in self.byte_ids:
            self.held += 1
            return []
        out = self._run(self.ids[:-1])
        text = self.tokenizer.decode(self.ids)
        out.append(Settled(token, text[len(self.text) :], len(text)))
        self.text = text
        return out

    def close(self) -> list[Settled]:
        """The tokens still held at the end (a byte run the translation ends with), settled."""
        return self._run(self.ids)

    def _run(self, ids: list[int]) -> list[Settled]:
        """The open run's tokens, settled by decoding `ids` (which end with the run): "" each, the last its text."""
        if not self.held:
            return []
        text = self.tokenizer.decode(ids)
        run = ids[len(ids) - self.held :]
        out = [Settled(t, "", len(self.text)) for t in run[:-1]]
        out.append(Settled(run[-1], text[len(self.text) :], len(text)))
        self.text, self.held = text, 0
        return out


def settled(tokenizer: Tokenizer, byte_ids: frozenset[int], ids: list[int]) -> list[Settled]:
    """Every token of a whole translation with the text it adds (IncrementalText's, the end closing a byte run)."""
    detok = IncrementalText(tokenizer, byte_ids)
    return [s for token in ids for s in detok.add(token)] + detok.close()
