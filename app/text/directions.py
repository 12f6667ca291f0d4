"""Which languages a model translates between, and what the languages a request names mean for it.

A pair model translates one direction, recorded in its metadata (nmt-train and nmt-import write it): a request's
languages only choose the model. A many-to-many model (NLLB-200, M2M100, mBART-50: its tokenizer a
MultilingualTokenizer) translates between all of its languages: a request names both, by the model's own codes or
by ISO 639 (app/languages.py), and each row is fed its target language's token first (`start`).
"""

from __future__ import annotations

from dataclasses import replace

from app.engine.errors import InvalidRequest
from app.languages import Languages, UnknownLanguage, fits
from app.text.limits import Decoding
from model.multilingual_tokenizer import MultilingualTokenizer
from model.token import TextTokenizer

START_TOKENS = 1  # a many-to-many model's target language, fed to the decoder first: a cache position per row
MULTILINGUAL = "multilingual"  # a many-to-many model's languages, where a pair model's would be


class Directions:
    """A model's languages: `codes` (a many-to-many model's, None for a pair model) and what requests name."""

    def __init__(self, tokenizer: TextTokenizer, metadata: dict):
        self.tokenizer, self.metadata = tokenizer, metadata
        self.codes = Languages(tokenizer.languages) if isinstance(tokenizer, MultilingualTokenizer) else None
        self.start_tokens = start_tokens(tokenizer)

    @property
    def languages(self) -> dict[str, str]:
        """The model's language pair; a many-to-many model: "multilingual" on both sides (`codes` has them)."""
        if self.codes:
            return {"source": MULTILINGUAL, "target": MULTILINGUAL}
        m = self.metadata
        return {"source": m.get("source_language", "unknown"), "target": m.get("target_language", "unknown")}

    def serves(self, source: str | None, target: str | None) -> bool:
        """Whether a request naming these languages (either may be left out) is this model's."""
        if self.codes is None:  # its codes as written, or another spelling (`FR`, `fr-FR`, `fra`); any source: auto
            langs = self.languages
            return (not source or source == "auto" or fits(langs["source"], source)) and (
                not target or fits(langs["target"], target)
            )
        return self.why_not(source, target) is None

    def why_not(self, source: str | None, target: str | None) -> str | None:
        """A many-to-many model: what is wrong with these languages for it (None: nothing)."""
        try:
            for code, what in ((source, "source"), (target, "target")):
                if code and code != "auto":
                    self.codes.resolve(code, what)
        except UnknownLanguage as e:
            return str(e)
        return None

    def resolve(self, decoding: Decoding) -> Decoding:
        """A many-to-many model: `decoding` with the model's codes for its languages, or a 422 saying what is
        wrong; a pair model: without them (they chose the model)."""
        if self.codes is None:
            return replace(decoding, source=None, target=None)
        if not decoding.target:
            raise InvalidRequest(f"this model translates between many languages: name the target; {self.codes.hint()}")
        if not decoding.source or decoding.source == "auto":
            raise InvalidRequest(
                f'name the source language ("auto" detects it where the server can); {self.codes.hint()}'
            )
        try:
            source = self.codes.resolve(decoding.source, "source")
            target = self.codes.resolve(decoding.target, "target")
        except UnknownLanguage as e:
            raise InvalidRequest(str(e)) from None
        return replace(decoding, source=source, target=target)

    def or_saved(self, source: str | None, target: str | None) -> Decoding:
        """A many-to-many model: the languages a request names, each one left out the model's saved default
        (`default_languages`), resolved to its codes or a 422 as /translate's; a pair model: none."""
        defaults = self.tokenizer.default_languages if self.codes else {}
        return self.resolve(Decoding(
            source=defaults.get("source") if source is None else source,
            target=defaults.get("target") if target is None else target,
        ))  # fmt: skip

    def start(self, decoding: Decoding) -> tuple[int, ...]:
        """What the decoder is fed before it translates: a many-to-many model's target language."""
        return (self.tokenizer.language_id(decoding.target),) if self.codes else ()

    def split_language(self, decoding: Decoding) -> str:
        """The source language's code for sentence splitting (ISO 639-1 where there is one)."""
        return self.codes.short(decoding.source) if self.codes else self.languages["source"]


def start_tokens(tokenizer: TextTokenizer) -> int:
    """The decoder positions a row's target language takes before its translation: one for a many-to-many model."""
    return START_TOKENS if isinstance(tokenizer, MultilingualTokenizer) else 0
