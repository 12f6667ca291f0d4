"""A request's glossary made into decoding constraints: the target terms each text must contain (model/constraints.py),
with what each replaces and the budget it needs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from app.engine.errors import InvalidRequest
from app.segment import worded
from app.terms import ends_sentence, entries, is_stop, occurrences, rendering_token, source_positions, substituted
from app.text.limits import Decoding, Limits, writable
from model.constraints import Phrase
from model.options import DecodingOptions

if TYPE_CHECKING:
    import numpy as np
    import torch

    from app.engine.core import EngineCore
    from model.token import TextTokenizer

RENDERINGS = 4096  # glossary source terms whose rendering by the model is remembered (app/terms.py)
RENDERING_TOKENS = 8  # a source term's rendering is decoded to at most this many tokens
Span = tuple[int, int]  # [start, end) characters
Kept = Callable[[int, int], bool]  # whether [a, b) of a text is kept as written: no place for a term there


def kept_at(spans: list[Span], to_piece: Callable[[Span], Span] = lambda span: span) -> Kept:
    """Whether [a, b) of a text (its piece's characters by `to_piece`, where the text is a masked piece) lies in one
    of `spans` (an HTML unit's elements kept as written: <code>, translate="no", DeepL's ignore_tags)."""

    def inside(a: int, b: int) -> bool:
        x, y = to_piece((a, b))
        return any(start <= x and y <= end for start, end in spans)

    return inside


class Terms:
    """One model's glossary constraints: the tokens that continue a word (none may follow a term), asked of the core
    once a glossary is first used, and the model's rendering of each source term, decoded once and remembered."""

    def __init__(
        self, core: EngineCore, tokenizer: TextTokenizer, limits: Limits, max_new_tokens: int,
        multilingual: bool,
    ):  # fmt: skip
        self.core, self.tokenizer, self.limits, self.max_new_tokens = core, tokenizer, limits, max_new_tokens
        self.multilingual = multilingual  # the source terms are encoded in the request's source language
        self._glued: torch.Tensor | np.ndarray | None = None  # the core's word_continuations()
        self._stops: frozenset[int] | None = None
        self._spaces: frozenset[int] | None = None
        self._vocabulary: list[str] | None = None  # _pieces()
        self._renderings: OrderedDict[tuple[str | None, str | None, str], int | None] = OrderedDict()

    async def constrained(
        self, options: DecodingOptions, budgets: list[int], texts: list[str], decoding: Decoding, names: list[str],
        fixed: bool, kept: list[Kept] | None = None,
    ) -> list[DecodingOptions]:  # fmt: skip
        """Each text's options, constrained to contain the target terms of the glossary's source terms found in it
        (app/terms.py), but where `kept` keeps the text as written; each budget (changed in place) grows by its terms'
        tokens up to NMT_MAX_NEW_TOKENS unless the request `fixed` it, and a 422 says where the budget leaves no room
        for them."""
        places = [occurrences(t, decoding.glossary, decoding.glossary_ignore_case) for t in texts]
        away = [[] for _ in texts]  # each text's occurrences kept as written
        if kept:
            away = [[p for p in found if inside(p[1], p[2])] for found, inside in zip(places, kept, strict=True)]
            places = [[p for p in found if not inside(p[1], p[2])] for found, inside in zip(places, kept, strict=True)]
        found = [entries(p) for p in places]
        glued = await self.glued() if any(found) else None
        targets = {t: tuple(self.tokenizer.encode(t, "target", False)) for f in found for _, t in f}
        for term, ids in targets.items():
            writable(self.tokenizer, term, ids, "the glossary's target term")
        instead = await self._rendered([s for f in found for s, _ in f], decoding, options.start)
        out = []
        for i, terms in enumerate(found):
            if not terms:
                out.append(options)
                continue
            mine = self._completing(options, decoding.target_prefix, [t for _, t in terms])
            need = sum(len(targets[t]) for t in dict.fromkeys(t for _, t in terms)) + len(mine.prefix)
            if not fixed:  # the default budget has room for the prefix already
                budgets[i] = min(self.max_new_tokens, budgets[i] + need - len(options.prefix))
            if need >= budgets[i]:
                how = (
                    f"; raise max_new_tokens (at most {self.max_new_tokens}) or use fewer terms"
                    if need < self.max_new_tokens
                    else f"; no translation here may have more (NMT_MAX_NEW_TOKENS is {self.max_new_tokens}): use "
                    "shorter or fewer terms"
                )
                raise InvalidRequest(
                    f"the glossary's terms found in {names[i]} need {need} tokens"
                    + (" with target_prefix's" if mine.prefix else "")
                    + f", and max_new_tokens leaves room for {budgets[i] - 1} besides </s>{how}"
                )
            tokens = self._source_tokens(texts[i], decoding)
            at, held = source_positions(texts[i], tokens, places[i]), source_positions(texts[i], tokens, away[i])
            renders = {s: frozenset() if instead[s] is None else frozenset({instead[s]}) for s, _ in terms}
            phrases = tuple(
                Phrase(targets[t], renders[s], at.get(t, frozenset()), held.get(t, frozenset())) for s, t in terms
            )
            stops = self.stops() if ends_sentence(texts[i]) else frozenset()
            out.append(replace(mine, constraints=phrases, glued=glued, stops=stops, spaces=self.spaces()))
        return out

    def _completing(self, options: DecodingOptions, prefix: str | None, terms: list[str]) -> DecodingOptions:
        """`options`, with a target prefix that ends in the first part of a term ("Ein Köt", for "Köter") made to end
        with the whole term: the term is then met in the prefix, where it was forced again after it ("Ein Köter läuft
        ... Köter"). The translation still starts with the prefix as written."""
        if not options.prefix or not prefix or prefix[-1].isspace():
            return options
        starts = [k for k in range(len(prefix)) if k == 0 or prefix[k - 1].isspace()]
        for k in starts:  # the longest part first
            for term in terms:
                if term != prefix[k:] and term.startswith(prefix[k:]):
                    ids = self.tokenizer.encode(prefix[:k] + term, "target", False)
                    return replace(options, prefix=tuple(ids))
        return options

    def _source_tokens(self, text: str, decoding: Decoding) -> list:
        """The text's source tokens with their offsets, as the encoder reads them (none where the limit cuts it)."""
        more = {"language": decoding.source} if self.multilingual else {}
        tokens = self.tokenizer.tokenize(text, "source", **more)
        return tokens if len(tokens) <= self.limits.max_input_tokens else []

    def stops(self) -> frozenset[int]:
        """The target tokens that end a sentence: pieces of closing punctuation alone ("." "▁?" "!\""), found once."""
        if self._stops is None:
            self._stops = frozenset(i for i, p in enumerate(self._pieces()) if is_stop(p))
        return self._stops

    def spaces(self) -> frozenset[int]:
        """The target tokens that are a space alone ("▁"), found once."""
        if self._spaces is None:
            self._spaces = frozenset(i for i, p in enumerate(self._pieces()) if p == "▁")
        return self._spaces

    def _pieces(self) -> list[str]:
        """The target vocabulary's tokens as strings, by id (read once: glued() and stops() both look at them)."""
        if self._vocabulary is None:
            self._vocabulary = [self.tokenizer.id_to_token(i, "target") for i in range(self.core.config.tgt_vocab_size)]
        return self._vocabulary

    async def glued(self) -> torch.Tensor | np.ndarray:
        """(V,) True for the target tokens that continue a word (the core's word_continuations), asked once."""
        if self._glued is None:
            self._glued = await self.core.word_continuations(self._pieces())
        return self._glued

    async def _rendered(self, terms: list[str], decoding: Decoding, start: tuple[int, ...]) -> dict[str, int | None]:
        """The token each source term's translation takes the place of (app/terms.py's rendering_token): the model's
        rendering of the term alone, decoded once and remembered (RENDERINGS of them)."""
        cache, out = self._renderings, {}
        for term in dict.fromkeys(terms):
            if (key := (decoding.source, decoding.target, term)) in cache:
                cache.move_to_end(key)
                out[term] = cache[key]
        todo = [t for t in dict.fromkeys(terms) if t not in out]
        if todo:
            more = {"language": decoding.source} if self.multilingual else {}
            srcs = [ids[-self.limits.max_input_tokens :] for ids in self.tokenizer.encode_batch(todo, "source", **more)]
            hyps = await self.core.generate(srcs, [RENDERING_TOKENS] * len(srcs), start)
            for term, hyp in zip(todo, hyps):
                pieces = [self.tokenizer.id_to_token(i, "target") for i in hyp.tokens]
                out[term] = cache[decoding.source, decoding.target, term] = rendering_token(term, hyp.tokens, pieces)
            while len(cache) > RENDERINGS:
                cache.popitem(last=False)
        return out


def written(texts: list[str], decoding: Decoding) -> list[str]:
    """Each text as it comes back where no model sees it (no letter in it: app/segment.py's worded()), the glossary's
    terms in it ("42" with the entry 42 -> zweiundvierzig)."""
    return [substituted(t, decoding.glossary, decoding.glossary_ignore_case) if not worded(t) else t for t in texts]
