"""What the engine returns: translations with their n-best lists and alignments, and attention weights."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from app.detokenize import settled
from app.segment import blank
from model.confidence import DIGITS, Calibration, Quality, judge
from model.hypothesis import Hypothesis
from model.token import TextTokenizer


@dataclass
class Aligned:
    """A target token and the source token it aligns to, by index and as character spans of the texts."""

    target_token: int
    source_token: int
    target_span: tuple[int, int]
    source_span: tuple[int, int]


@dataclass
class Translation:
    text: str
    finish_reason: str  # "eos" or "length"
    token_ids: list[int]  # generated ids, without </s>
    score: float  # summed log-probabilities / length ** length_penalty (</s> counted): by default their mean
    input_tokens: int  # source tokens the encoder read (0 when the text was blank)
    output_tokens: int  # decoder steps taken, </s> included
    truncated: bool
    piece: Callable[[int], str] = field(repr=False, compare=False)  # a token id's piece
    hypotheses: list[Translation] = field(default_factory=list)  # the n-best list, this one first, when asked for
    alignment: list[Aligned] | None = None
    # a text split into segments (app/text/documents.py): each one's [start, end) in the text and in the translation
    segments: list[tuple[tuple[int, int], tuple[int, int]]] | None = None
    quality: Quality | None = (
        None  # the confidence and flags (model/confidence.py); a document's: its weakest segment's
    )
    # a document's segments' qualities, in order, and those withheld under min_confidence (indices into `segments`)
    segment_qualities: list[Quality] | None = None
    withheld: list[int] = field(default_factory=list)
    # with return_word_confidence: each word of the translation, its [start, end) characters and its probability
    words: list[tuple[tuple[int, int], float]] | None = None
    detected_source: str | None = None  # the source language detected for it (app/calls.py), where it was
    # the decoder steps of what it gives, which its score is of (None: all of output_tokens; 0 when it is withheld)
    scored_steps: int | None = None
    kept: bool = False  # come back as written, no model's (no letter: app/segment.py's worded()); in every n-best

    @property
    def given_steps(self) -> int:
        """The weight of its score among others' (app/text/documents.py's mean_score)."""
        return self.output_tokens if self.scored_steps is None else self.scored_steps

    @cached_property
    def tokens(self) -> list[str]:
        """The generated pieces, looked up when asked for: most requests do not return them."""
        return [self.piece(i) for i in self.token_ids]


@dataclass
class Attention:
    encoder_tokens: list[str]
    decoder_tokens: list[str]  # <s> + the translation's pieces; the last row predicts </s>
    translation: str
    layers: list[int]
    heads: list[int]
    encoder_attention: list  # [L][H][S][S]
    decoder_attention: list  # [L][H][T][T]
    cross_attention: list  # [L][H][T][S]


def translations(
    tokenizer: TextTokenizer, texts: list[str], srcs: list[list[int]], truncated: set[int],
    hyps: dict[int, list[Hypothesis]], alignments: dict[int, list[list[int]]] | None,
    calibration: Calibration | None = None, words: bool = False, forced: int = 0, written: list[str] | None = None,
) -> list[Translation]:  # fmt: skip
    """One Translation per text from its hypotheses (best first), each with its quality (`calibration`'s
    confidence, else the raw one: the `forced` first tokens, a target prefix, are the caller's choice, not the
    model's, and their probabilities are left out); texts without hypotheses (no letter: app/segment.py's worded())
    come back as written (`written`: as each is written back, a glossary's terms in it), blank ones as ""."""
    out, piece = [], tokenizer.id_to_token
    for i, src in enumerate(srcs):
        if i not in hyps:  # not translated; an alignment and words asked for: none
            back = "" if blank(texts[i]) else texts[i] if written is None else written[i]
            t = Translation(back, "eos", [], 0.0, 0, 0, i in truncated, piece, kept=True)
            t.alignment, t.words = ([] if alignments is not None else None), ([] if words else None)
            out.append(t)
            continue
        n_best = []
        for j, h in enumerate(hyps[i]):
            text = tokenizer.decode(h.tokens)
            t = Translation(text, h.finish_reason, h.tokens, h.score, len(src), len(h.logprobs), i in truncated, piece)
            t.quality = judge(src, h.tokens, h.logprobs, texts[i], text, calibration, forced, h.terms, h.attention,
                              h.aligned)  # fmt: skip
            if words:
                t.words = word_confidences(tokenizer, h.tokens, h.logprobs, text)
            if alignments is not None:
                t.alignment = aligned(tokenizer, texts[i], text, h.tokens, alignments[i][j])
            n_best.append(t)
        best = n_best[0]
        if len(n_best) > 1:
            best.hypotheses = n_best
        out.append(best)
    return out


_VISIBLE = re.compile(r"\S+")


def word_confidences(
    tokenizer: TextTokenizer, ids: list[int], logprobs: list[float], target: str
) -> list[tuple[tuple[int, int], float]]:
    """Each word of the translation (a run of characters between spaces, as its tokens add them) with its
    [start, end) characters and its probability as generated: the product of its tokens' probabilities. A token
    that adds no text yet (part of a character's bytes) counts towards the word that shows it; where that word ends
    before the next token's own word begins (a byte's "m", then "▁wur": "m wur" at once), the two stay two words."""
    out, pending, shown = [], 0.0, ""
    for (_, delta, _), logprob in zip(settled(tokenizer, tokenizer.byte_ids, ids), logprobs):  # one more, for </s>
        start, held = len(shown), pending  # held: the tokens that showed nothing so far
        shown += delta
        pending += logprob
        runs = [(start + m.start(), min(start + m.end(), len(target))) for m in _VISIBLE.finditer(delta)]
        for k, (first, end) in enumerate(runs):  # none: nothing to show yet, or only spaces: carried to the next word
            p = pending if len(runs) == 1 else held if k == 0 else logprob if k == len(runs) - 1 else 0.0
            if not out or first == 0 or shown[first - 1].isspace():  # a space before it (its own or the last's)
                out.append([min(first, len(target)), end, p])
            else:
                out[-1][1], out[-1][2] = end, out[-1][2] + p
        pending = pending if not runs else 0.0
    return [((a, b), round(math.exp(lp), DIGITS)) for a, b, lp in out]


def aligned(tokenizer: TextTokenizer, source: str, target: str, ids: list[int], to_source: list[int]) -> list[Aligned]:
    """Index pairs with character spans: source spans from the tokenizer's offsets, target spans from the text each
    token adds to the translation (its leading space left out)."""
    src = [(t.start, t.end) for t in tokenizer.tokenize(source, "source")]
    for i in reversed(range(len(src) - 1)):  # "▁" alone (a vocabulary without "▁Ü" splits "Über" so): the word's
        if src[i][0] == src[i][1]:
            src[i] = src[i + 1]
    spans = []
    for _, delta, end in settled(tokenizer, tokenizer.byte_ids, ids):
        start = end - len(delta.lstrip())
        spans.append((min(start, len(target)), min(end, len(target))))
    return [Aligned(t, s, spans[t], src[s] if s < len(src) else (0, 0)) for t, s in enumerate(to_source)]


def as_decoded(hyps: list[list[Hypothesis]]) -> list[list[list[int]]] | None:
    """Each hypothesis's alignment as its decoding found it (Hypothesis.aligned: each step's most attended source
    token, what a teacher-forced pass over the tokens, model/search.py's `alignments`, finds again), or None where
    a hypothesis kept none: then that pass it is."""
    if all(len(h.aligned) >= len(h.tokens) for hs in hyps for h in hs):
        return [[h.aligned[: len(h.tokens)] for h in hs] for hs in hyps]
    return None
