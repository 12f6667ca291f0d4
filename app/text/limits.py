"""What a request may ask for: each check raises InvalidRequest (422) or InputTooLong (413) saying what is allowed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from app.engine.errors import InputTooLong, InvalidRequest
from app.languages import short
from app.segment import worded
from model.options import DecodingOptions
from model.token import TextTokenizer

MAX_BEAM = 8  # beam_size and num_hypotheses: at most this many
Fits = Callable[[str], bool]  # whether a text is within the model's input tokens


@dataclass(frozen=True)
class Decoding:
    """What a /translate request asks of the decoder, before the engine checks it against the model and limits."""

    beam_size: int = 1
    num_hypotheses: int = 1
    length_penalty: float = 1.0
    target_prefix: str | None = None
    sampling_topk: int = 1
    sampling_temperature: float = 1.0
    seed: int | None = None
    return_alignment: bool = False
    return_word_confidence: bool = False  # each word's probability (app/text/results.py): no change to decoding
    # (source term, target term) pairs: where a source term occurs in a text (whole words, longest first) its target
    # term is forced into the translation (app/terms.py, model/search.py's constrained search)
    glossary: tuple[tuple[str, str], ...] = ()
    glossary_ignore_case: bool = False  # source terms match in any case
    # a many-to-many model's languages, as the request names them (the engine resolves them to the model's codes)
    source: str | None = None
    target: str | None = None

    @property
    def greedy(self) -> bool:
        return replace(self, source=None, target=None, return_word_confidence=False) == GREEDY


GREEDY = Decoding()


def writable(tokenizer: TextTokenizer, text: str, ids: list[int] | tuple[int, ...], what: str) -> None:
    """A 422 when text the decoder is to write (`ids`: its target ids) has characters its vocabulary has no piece for
    (<unk>: a SentencePiece model without byte fallback, as NLLB's, M2M100's, mBART's): forced in, they were lost."""
    if tokenizer.unk_id not in ids:
        return
    bad = "".join(dict.fromkeys(c for c in text if tokenizer.unk_id in tokenizer.encode(c, "target", False)))
    raise InvalidRequest(
        f"{what} {short(text)} has characters this model cannot write ({bad[:20]!r}): its vocabulary has no piece for "
        "them; leave them out or write them otherwise"
    )


@dataclass(frozen=True)
class Limits:
    max_input_tokens: int
    max_new_tokens: int
    max_batch_texts: int
    max_rows: int  # decoder rows (NMT_MAX_BATCH_SIZE): the most one text's beam or samples may take
    vocab_size: int  # the target vocabulary's

    def texts(self, items: Any, what: str) -> list:
        """One item or a list of 1..max_batch_texts, as a list."""
        items = [items] if isinstance(items, str) else list(items)
        if not items:
            raise InvalidRequest(f"{what} is an empty list; send between 1 and {self.max_batch_texts} items")
        if len(items) > self.max_batch_texts:
            raise InvalidRequest(f"{what} has {len(items)} items; the limit is {self.max_batch_texts} per request")
        return items

    def budget(self, max_new_tokens: int | None) -> None:
        if max_new_tokens is not None and not 1 <= max_new_tokens <= self.max_new_tokens:
            raise InvalidRequest(f"max_new_tokens must be between 1 and {self.max_new_tokens}, got {max_new_tokens}")

    @staticmethod
    def indices(what: str, picked: list[int] | None, n: int) -> list[int]:
        """Layer or head indices: all of 0..n-1 when not given."""
        if picked is None:
            return list(range(n))
        if not picked:
            raise InvalidRequest(f"{what} is an empty list; leave it out for all, or pick from 0..{n - 1}")
        bad = [i for i in picked if not 0 <= i < n]
        if bad:
            raise InvalidRequest(f"{what} {bad} out of range; this model has {what} 0..{n - 1}")
        return picked

    def sources(
        self, tokenizer: TextTokenizer, texts: list[str], truncate: bool, single: bool,
        names: list[str] | None = None, language: str | None = None, skip_unworded: bool = False,
        truncatable: bool = True,
    ) -> tuple[list[list[int]], set[int]]:  # fmt: skip
        """Source ids of each text; over max_input_tokens a 413, or with `truncate` cut to the limit. `names`: what
        the error calls each text (default "text", or "text[i]" when not `single`); `language`: a many-to-many
        model's source language code; `skip_unworded`: texts without a letter (app/segment.py's worded(), which
        are not translated) get no ids, however long; `truncatable`: whether the request may ask for `truncate`."""
        more = {} if language is None else {"language": language}
        todo = [i for i, t in enumerate(texts) if not skip_unworded or worded(t)]
        srcs: list[list[int]] = [[] for _ in texts]
        for i, ids in zip(todo, tokenizer.encode_batch([texts[i] for i in todo], side="source", **more), strict=True):
            srcs[i] = ids
        truncated, limit = set(), self.max_input_tokens
        for i, ids in enumerate(srcs):
            if len(ids) > limit:
                if not truncate:
                    name = names[i] if names else "text" if single else f"text[{i}]"
                    raise InputTooLong(
                        f"{name} has {len(ids)} tokens; the limit is {limit}. Shorten or split it"
                        + (', or send "truncate": true to cut it to the limit' if truncatable else "")
                    )
                keep = getattr(tokenizer, "trailing_specials", 1)  # </s>, and a language code after it
                srcs[i] = ids[: limit - keep] + ids[-keep:]
                truncated.add(i)
        return srcs, truncated

    def fits(self, tokenizer: TextTokenizer, language: str | None = None) -> Fits:
        """Whether a text's source ids are within max_input_tokens (a many-to-many model's: with `language`'s code)."""
        more = {} if language is None else {"language": language}
        limit = self.max_input_tokens
        # a character is at most a few tokens (its bytes, with byte fallback): a short text needs no tokenizing
        return lambda text: len(text) <= limit // 8 or len(tokenizer.encode_batch([text], "source", **more)[0]) <= limit

    def decoding(self, d: Decoding, stream: bool = False) -> DecodingOptions:
        """The model-level options for a request's decoding fields (the prefix is added once it is tokenized)."""
        sampling = d.sampling_topk != 1
        if not 1 <= d.beam_size <= min(MAX_BEAM, self.max_rows):
            raise InvalidRequest(
                f"beam_size must be between 1 and {min(MAX_BEAM, self.max_rows)}, got {d.beam_size}"
                + (" (a beam takes that many of NMT_MAX_BATCH_SIZE's rows)" if self.max_rows < MAX_BEAM else "")
            )
        most = min(MAX_BEAM, self.max_rows) if sampling else d.beam_size
        if not 1 <= d.num_hypotheses <= most:
            how = "independent samples" if sampling else "hypotheses: at most beam_size, or sample with sampling_topk"
            raise InvalidRequest(f"num_hypotheses must be between 1 and {most} ({how}), got {d.num_hypotheses}")
        if sampling and d.beam_size > 1:
            raise InvalidRequest("sampling_topk other than 1 needs beam_size 1: sampling and beam search do not mix")
        if not 0 <= d.sampling_topk <= self.vocab_size:
            raise InvalidRequest(
                f"sampling_topk must be between 0 (the whole vocabulary) and {self.vocab_size}, got {d.sampling_topk}"
            )
        if stream:
            why = [
                ("beam_size", d.beam_size > 1, "a beam search knows its best hypothesis only at its end"),
                ("num_hypotheses", d.num_hypotheses > 1, "a stream carries one translation"),
                ("return_alignment", d.return_alignment, "a stream's events carry tokens and text, not alignments"),
                ("return_word_confidence", d.return_word_confidence, "a stream's events carry no word confidence"),
            ]  # fmt: skip
            if asked := [f"{name} ({reason})" for name, wrong, reason in why if wrong]:
                raise InvalidRequest(
                    "stream needs beam_size 1, num_hypotheses 1 and no return_alignment or return_word_confidence, "
                    f"and got {'; '.join(asked)}. Leave out stream, or those"
                )
        seed = 0 if not sampling else random.randrange(2**63) if d.seed is None else d.seed  # only sampling draws
        return DecodingOptions(
            beam_size=d.beam_size, num_hypotheses=d.num_hypotheses, length_penalty=d.length_penalty,
            sampling_topk=d.sampling_topk, sampling_temperature=d.sampling_temperature, seed=seed,
        )  # fmt: skip

    def prefix(self, options: DecodingOptions, ids: list[int], budget: int | None) -> DecodingOptions:
        """`options` with the target prefix's ids, which must leave room in the budget for one more token."""
        room = (budget or self.max_new_tokens) - 1
        if len(ids) > room:
            raise InvalidRequest(
                f"target_prefix has {len(ids)} tokens; it must leave room for at least one more within max_new_tokens "
                f"({budget or self.max_new_tokens}), so at most {room}"
            )
        return replace(options, prefix=tuple(ids))
