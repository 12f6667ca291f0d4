"""/translate's response: each translation with what was asked of it (tokens, scores, alignment, n-best, segments,
confidence, flags, signals, words, withheld sentences), and the usage."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Flag = Literal["repetition", "length", "copy", "coverage", "hallucination"]
CONFIDENCE = (
    "how far to trust the translation, 0 to 1: with a calibrated model (`calibrated`) the probability that its chrF "
    "against a human reference clears the calibration's threshold; a document's is its least confident sentence's; "
    "null for a blank text"
)
FLAGS = "what looks wrong, from a fixed vocabulary (docs/confidence.md); a document's: any sentence's"


class AlignedOut(BaseModel):
    target_token: int = Field(description="index of the target token (in `token_ids`)")
    source_token: int = Field(
        description="index of the source token it aligns to, counting the tokens of the text's pieces (sentences, "
        "each with its </s>) one after another: /tokenize's numbering for one sentence without outer whitespace"
    )
    target_span: tuple[int, int] = Field(description="[start, end) characters of the token in the translation")
    source_span: tuple[int, int] = Field(description="[start, end) characters of the source token in the text")


class SegmentOut(BaseModel):
    source_span: tuple[int, int] = Field(description="[start, end) characters of the piece in the text")
    target_span: tuple[int, int] = Field(description="[start, end) characters of its translation in the translation")
    confidence: float | None = Field(None, description="this piece's confidence")
    flags: list[Flag] = Field(default_factory=list, description="this piece's flags")
    withheld: bool = Field(False, description="left out of the translation: its confidence is below min_confidence")


class Signals(BaseModel):
    mean_logprob: float = Field(description="the mean log-probability of the generated tokens, `</s>` included")
    min_logprob: float = Field(description="the lowest of them")
    length: float = Field(description="how far the length ratio lies from the model's typical one, in spreads")
    repetition: float = Field(description="the share of tokens repeating the n-gram before them, less the source's")
    copied: float = Field(description="the share of the translation's words found in the source")
    attention: float | None = Field(
        None, description="how far the cross-attention lay from spread evenly over the source, averaged over the steps "
        "(0 = even; null where the decoding kept none)",
    )  # fmt: skip
    coverage: float | None = Field(
        None, description="the share of the source's tokens no token of the translation aligns to (null: not kept)"
    )
    tokens: float = Field(0.0, description="the log of the translation's token count")
    sum_logprob: float = Field(0.0, description="the sum of the generated tokens' log-probabilities")
    loop: int = Field(
        0, description="the most copies in a row of one word n-gram (n <= 4) where the source has no such run (else 1)"
    )
    token_loop: int = Field(0, description="the same in the translation's tokens")


class WithheldOut(BaseModel):
    segment: int = Field(description="which sentence of the text (from 0, as `segments` counts them)")
    source_span: tuple[int, int] | None = Field(description="[start, end) characters of it in the text (plain text)")
    confidence: float
    flags: list[Flag]


class WordOut(BaseModel):
    text: str
    span: tuple[int, int] = Field(description="[start, end) characters of the word in the translation")
    confidence: float = Field(description="the product of its tokens' probabilities")


class HypothesisOut(BaseModel):
    text: str
    score: float
    finish_reason: Literal["eos", "length"]
    confidence: float | None = Field(None, description=CONFIDENCE)
    flags: list[Flag] = Field(default_factory=list, description=FLAGS)
    words: list[WordOut] | None = Field(None, description="with return_word_confidence")
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    alignment: list[AlignedOut] | None = None


DETECTED = (
    'where the source was detected (a many-to-many model, `source` left out or `"auto"`): the language it was '
    "translated from, as `GET /models` names it"
)


class TranslationOut(BaseModel):
    text: str
    detected_source: str | None = Field(None, description=DETECTED)
    finish_reason: Literal["eos", "length"]
    truncated: bool = Field(description="the input was cut to MAX_INPUT_TOKENS (only with truncate)")
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    score: float | None = None
    alignment: list[AlignedOut] | None = Field(None, description="with return_alignment: one entry per target token")
    hypotheses: list[HypothesisOut] | None = Field(
        None, description="with num_hypotheses > 1: the n-best list, best first (the first is this translation)"
    )
    segments: list[SegmentOut] | None = Field(None, description="with return_segments: the pieces, in order")
    confidence: float | None = Field(None, description=CONFIDENCE)
    flags: list[Flag] = Field(default_factory=list, description=FLAGS)
    signals: Signals | None = Field(
        None, description="with return_signals (a document's: its least confident sentence's)"
    )
    words: list[WordOut] | None = Field(
        None, description="with return_word_confidence: each word of the translation, its span and probability"
    )
    withheld: list[WithheldOut] | None = Field(
        None, description="the sentences left out under min_confidence, with their confidence and flags; absent if none"
    )


class Usage(BaseModel):
    input_tokens: int = Field(description="source tokens the encoder read, `</s>` included")
    output_tokens: int = Field(description="tokens generated, `</s>` included")


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]
    usage: Usage
    model: str
    calibrated: bool = Field(
        description="the model's confidence is calibrated (nmt-calibrate); false: it is the raw geometric mean of the "
        "tokens' probabilities (`/info`'s `confidence` says what it means)"
    )
