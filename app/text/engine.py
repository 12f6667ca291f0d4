"""The engine: model, tokenizer, device and limits behind async methods; the batcher runs the model."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.engine.errors import InvalidRequest, RequestTimeout
from app.engine.metrics import EngineMetrics, Metrics
from app.html import HTML, XML, Rules
from app.segment import Split, worded
from app.text.directions import Directions, start_tokens
from app.text.documents import (
    Allowance,
    Documents,
    Format,
    check_chars,
    pages_back,
    parse_pages,
    put_back,
    split_texts,
    text_names,
    withhold,
)
from app.text.glossary import Kept, Span, Terms, kept_at, written
from app.text.limits import GREEDY, Decoding, Fits, Limits, writable
from app.text.offload import each_group, inline_or_on_thread
from app.text.protected import protect_documents, restored
from app.text.results import Translation, as_decoded, translations
from app.text.streaming import Finished, Token, stream_events
from model.confidence import DEFAULT_THRESHOLDS, RAW_MEANING, Calibration
from model.options import DecodingOptions, max_new_tokens_for
from model.token import TextTokenizer

if TYPE_CHECKING:  # annotations only: the core and the model import torch, which a front-end never does
    from app.engine.compiling import Mode
    from app.engine.core import EngineCore
    from app.engine.memory import Sizing
    from app.engine.remote import RemoteCore
    from app.languages import Languages
    from app.protect import Masked, Protect
    from model.transformer import Transformer, TransformerConfig

log = logging.getLogger("nmt_serve.engine")
WARM_UP_TEXT = "A man is riding a bike."
DEFAULT_QUEUE = 256  # NMT_MAX_QUEUE unset: this, or the decoder rows where more fit


class Engine:
    """Validates requests against the limits, tokenizes off the event loop, and hands the model's work, in token ids,
    to its core: an `EngineCore` in this process (`Engine.local`), or one in the engine process behind the same
    methods."""

    def __init__(
        self, core: EngineCore | RemoteCore, tokenizer: TextTokenizer, *, name: str = "model",
        metadata: dict | None = None, max_input_tokens: int = 256, max_new_tokens: int = 256,
        max_batch_texts: int = 64, request_timeout_s: float = 60.0, max_request_chars: int = 20_000,
        max_request_sequences: int | None = None, calibration: Calibration | None = None, min_confidence: float = 0.0,
        metrics: EngineMetrics | None = None,
    ):  # fmt: skip
        c = core.config
        # a many-to-many model's rows are fed their target language before they decode (DecodingOptions.start)
        self.directions = Directions(tokenizer, metadata or {})
        _check_positions(c, max_input_tokens, max_new_tokens, self.directions.start_tokens)
        max_queue = core.queue_size  # the engine's whole queue (with front-ends too: a request's limit is of it)
        if max_queue < max_batch_texts:
            raise ValueError(
                f"max_queue={max_queue} is below max_batch_texts={max_batch_texts}: a request with that many texts "
                "could never be admitted"
            )
        if max_request_sequences is None:  # a share of the queue, so that one request leaves room for others
            max_request_sequences = max(max_queue // 2, max_batch_texts)
        if not max_batch_texts <= max_request_sequences <= max_queue:
            raise ValueError(
                f"max_request_sequences={max_request_sequences} must be at least max_batch_texts={max_batch_texts} "
                f"(a request may send that many texts) and at most max_queue={max_queue}"
            )
        self.core, self.config = core, c
        self.tokenizer, self.name, self.metadata = tokenizer, name, self.directions.metadata
        self.calibration = calibration  # the confidence's calibration (model/confidence.py); None: the raw one
        self.min_confidence = min_confidence  # a request's default: sentences below it are withheld
        self.limits = Limits(max_input_tokens, max_new_tokens, max_batch_texts, core.rows, c.tgt_vocab_size)
        self.max_new_tokens, self.max_request_chars = max_new_tokens, max_request_chars
        self.max_request_sequences = max_request_sequences
        self.request_timeout_s = request_timeout_s
        self.metrics = metrics or core.metrics  # the confidence histogram and withheld counts
        self.byte_ids = tokenizer.byte_ids
        self._warming = False  # start's warm-up translation: no request deadline
        self.terms = Terms(core, tokenizer, self.limits, max_new_tokens, multilingual=self.codes is not None)
        self.ready = False

    @classmethod
    def local(
        cls, model: Transformer, tokenizer: TextTokenizer, *, name: str = "model",
        max_input_tokens: int = 256, max_new_tokens: int = 256, max_batch_size: int = 32, prefill_tokens: int = 2048,
        max_queue: int = 256, metrics: Metrics | None = None, compile: Mode = "off", threads: int = 0,
        waiting_served_ratio: float = 0.3, max_waiting_steps: int = 4, screen_logits: bool = False,
        compile_cache_dir: Path | None = None, compile_mode: str = "max-autotune", sizing: Sizing | None = None,
        gpu_memory_fraction: float | None = None, quantize: str = "none", compile_jobs: int = 1, **limits: Any,
    ) -> Engine:  # fmt: skip
        """An engine whose core runs `model` in this process (its worker thread); `limits` are the Engine's own
        (max_batch_texts, request_timeout_s and the rest)."""
        from app.engine.core import EngineCore

        start = start_tokens(tokenizer)
        _check_positions(model.config, max_input_tokens, max_new_tokens, start)  # before the cache is sized by them
        core = EngineCore(
            model, metrics=(metrics or Metrics()).engine(name), max_batch_size=max_batch_size,
            max_len=max_new_tokens + start, max_src_len=max_input_tokens, prefill_tokens=prefill_tokens,
            max_queue=max_queue, threads=threads, waiting_served_ratio=waiting_served_ratio,
            max_waiting_steps=max_waiting_steps, compile=compile, compile_cache_dir=compile_cache_dir,
            compile_mode=compile_mode, quantize=quantize, screen_logits=screen_logits, sizing=sizing,
            gpu_memory_fraction=gpu_memory_fraction, compile_jobs=compile_jobs,
        )  # fmt: skip
        return cls(core, tokenizer, name=name, max_input_tokens=max_input_tokens, max_new_tokens=max_new_tokens,
                   **limits)  # fmt: skip

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the worker, compile first if NMT_COMPILE=blocking, translate one sentence through the whole path,
        then report ready (and, with NMT_COMPILE=background, start compiling beside serving)."""
        self.core.start()
        await self.core.before_ready()
        warm_up = self.directions.or_saved(None, None)  # a many-to-many model: its saved pair
        # Not a request: it takes what it takes (a large model on a small or busy CPU is slow to start; a start-up probe
        # bounds the start), where NMT_REQUEST_TIMEOUT_S would fail the start
        self._warming = True
        try:
            await self.translate(WARM_UP_TEXT, max_new_tokens=min(8, self.max_new_tokens), decoding=warm_up)
        finally:
            self._warming = False
        self.ready = True
        self.core.after_ready()

    @property
    def compiled(self) -> bool:
        """Whether the compiled graphs serve (see app/engine/compiling.py)."""
        return self.core.compiled

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new work, fail whatever is still queued or decoding, and join the worker (blocking)."""
        self.ready = False
        self.core.stop(timeout)

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called: the engine takes no more work."""
        return self.core.stopped

    @property
    def unavailable(self) -> str | None:
        """Why the model cannot translate now though it loaded (a front-end's engine process is not answering)."""
        return self.core.unavailable

    @property
    def codes(self) -> Languages | None:
        """A many-to-many model's languages; None for a pair model."""
        return self.directions.codes

    @property
    def languages(self) -> dict[str, str]:
        """The model's language pair, or "multilingual" on both sides (`codes` has its languages)."""
        return self.directions.languages

    def confidence_info(self) -> dict[str, Any]:
        """What this model's `confidence` means: calibrated (and on what), or the raw token probability."""
        k = self.calibration
        if k is None:
            return {"calibrated": False, "meaning": RAW_MEANING, "thresholds": DEFAULT_THRESHOLDS}
        return {"calibrated": True, "meaning": k.meaning, "chrf_threshold": k.chrf_threshold,
                "thresholds": k.thresholds, "fitted_on": k.fitted_on}  # fmt: skip

    def info(self) -> dict[str, Any]:
        return {
            "model": self.name, **self.core.info(), "languages": self.languages, "metadata": self.metadata,
            "confidence": self.confidence_info(),
            "limits": {
                "max_input_tokens": self.limits.max_input_tokens, "max_new_tokens": self.max_new_tokens,
                "max_batch_texts": self.limits.max_batch_texts, "max_batch_size": self.core.rows,
                "max_queue": self.core.queue_size, "max_request_sequences": self.max_request_sequences,
            },
            "memory": self.core.memory(),
        }  # fmt: skip

    # ---- requests (called from the event loop) ----------------------------------------------------

    async def translate(
        self, text: str | list[str], max_new_tokens: int | None = None, truncate: bool = False,
        decoding: Decoding = GREEDY, split: Split = "sentences", format: Format = "text",
        min_confidence: float | None = None, protect: Protect | None = None, cut_long: bool = False,
        sources: list[str] | None = None, tags: Rules | None = None,
    ) -> list[Translation]:  # fmt: skip
        """Translations in input order, greedy unless `decoding` asks otherwise. Each text is split into segments
        (`split`: sentences, lines or none) that decode together in the batch and are put back between the text's own
        whitespace (app/text/documents.py). Blank texts translate to "" without a model call. `format="html"`
        translates the pages' text (app/html/) and gives back their markup. Segments whose confidence is below
        `min_confidence` (default: the engine's) are withheld: left out of the text, listed in `withheld`. `protect`'s
        spans are kept out of the model's sight and put back as written (app/protect/). A segment over the model's
        max_input_tokens is a 413, or with `truncate` cut to the limit, or with `cut_long` cut into segments that fit
        (as DeepL translates a sentence of any length: the file and compatible APIs). `tags`: the XML rules of the
        request (app/html/reader.py's xml_rules: DeepL's non_splitting_tags). `sources`: a many-to-many
        model's texts each in its own source language (detected text by text), in place of `decoding.source`: each
        language's texts translate together, all of them at once, within the one request's limits."""
        texts = self.limits.texts(text, "text")
        if sources is not None and len(sources) != len(texts):
            raise ValueError(f"{len(sources)} source languages for {len(texts)} texts")
        allowance = Allowance(self.max_request_sequences)
        if sources is None or len(set(sources)) == 1:
            how = replace(decoding, source=sources[0]) if sources else decoding
            names = text_names(len(texts), isinstance(text, str))
            return await self._translate_in(
                texts, names, how, allowance, max_new_tokens, truncate, split, format, min_confidence, protect,
                cut_long, tags,
            )  # fmt: skip
        check_chars(texts, self.max_request_chars)  # the request's, which each language's part is within

        def part(language: str, places: list[int]) -> Awaitable[list[Translation]]:
            return self._translate_in(
                [texts[i] for i in places], text_names(len(places), False, places),
                replace(decoding, source=language), allowance, max_new_tokens, truncate, split, format,
                min_confidence, protect, cut_long, tags,
            )  # fmt: skip

        return await each_group(sources, part)

    async def _translate_in(
        self, texts: list[str], names: list[str], decoding: Decoding, allowance: Allowance,
        max_new_tokens: int | None, truncate: bool, split: Split, format: Format, min_confidence: float | None,
        protect: Protect | None, cut_long: bool, tags: Rules | None = None,
    ) -> list[Translation]:  # fmt: skip
        """translate()'s texts of one source language (`names`: what its errors call each)."""
        decoding = self.directions.resolve(decoding)
        floor = self.min_confidence if min_confidence is None else min_confidence
        fits = self.limits.fits(self.tokenizer, decoding.source) if cut_long else None
        truncate = truncate or cut_long  # what no cut makes fit (a single character): cut to the limit
        if format in ("html", "xml"):
            rules = HTML if format == "html" else tags or XML
            out = await self._translate_pages(
                texts, max_new_tokens, truncate, decoding, split, floor, allowance, protect, fits, rules
            )
        else:
            out = await self._translate_texts(
                texts, names, max_new_tokens, truncate, decoding, split, floor, allowance, protect, fits
            )
        for t in out:
            self.metrics.judged(t.segment_qualities or [t.quality], len(t.withheld))
        return out

    async def _translate_texts(
        self, texts: list[str], labels: list[str], max_new_tokens: int | None, truncate: bool, decoding: Decoding,
        split: Split, min_confidence: float, allowance: Allowance, protect: Protect | None = None,
        fits: Fits | None = None, kept: list[list[Span]] | None = None,
    ) -> list[Translation]:  # fmt: skip
        """`labels`: what an error calls each text; `kept`: each text's spans that come back as written (an HTML
        unit's kept elements), where the glossary's source terms are not looked for."""
        if protect is not None:
            docs, masks = await self._split_protected(texts, split, decoding, protect, allowance, fits)
        elif (docs := await self._split(texts, split, decoding, allowance, fits)).whole:  # a caption: as it is
            inside = kept and [kept_at(spans) for spans in kept]
            return withhold(
                await self._translate(texts, False, max_new_tokens, truncate, decoding, labels, inside), min_confidence
            )
        self._one_sentence_prefix(docs, decoding)
        names = docs.names(labels)
        if kept:  # each piece's own, in its characters
            kept = [
                [(max(a, g.start) - g.start, min(b, g.end) - g.start) for a, b in kept[i] if a < g.end and g.start < b]
                for i, segs in enumerate(docs.segments) for g in segs
            ]  # fmt: skip
        if protect is None:
            inside = kept and [kept_at(spans) for spans in kept]
            parts = await self._translate(docs.pieces, False, max_new_tokens, truncate, decoding, names, inside)
        else:
            parts = await self._translate_masked(masks, max_new_tokens, truncate, decoding, names, kept)
        return await inline_or_on_thread(sum(map(len, texts)), put_back, docs, withhold(parts, min_confidence))

    async def _translate_masked(
        self, masks: list[Masked], max_new_tokens: int | None, truncate: bool, decoding: Decoding, names: list[str],
        kept: list[list[Span]] | None = None,
    ) -> list[Translation]:  # fmt: skip
        """Pieces with protected spans: the model translates each without them (aligned, where it had any), and each
        translation gets them back; a piece of nothing but spans and punctuation comes back as written."""
        how = replace(decoding, return_alignment=decoding.return_alignment or any(m.groups for m in masks))
        inside = kept and [kept_at(spans, m.source_span) for m, spans in zip(masks, kept, strict=True)]
        parts = await self._translate([m.reads for m in masks], False, max_new_tokens, truncate, how, names, inside)
        size = sum(len(m.source) for m in masks)
        return await inline_or_on_thread(
            size, restored, masks, parts, decoding.return_alignment, decoding.return_word_confidence
        )

    async def _translate_pages(
        self, texts: list[str], max_new_tokens: int | None, truncate: bool, decoding: Decoding, split: Split,
        min_confidence: float, allowance: Allowance, protect: Protect | None = None, fits: Fits | None = None,
        rules: Rules = HTML,
    ) -> list[Translation]:  # fmt: skip
        """HTML (or XML) pages: the text of each page's units translated as documents (with the alignment that puts the
        inline tags back), and each page rendered with the translations. Protected spans in the text between tags
        are kept aside as elements (app/html/flow.py), those in attributes masked as plain text's."""
        for what in ("target_prefix", "return_alignment", "return_word_confidence"):
            if getattr(decoding, what):
                raise InvalidRequest(f'{what} works on plain text only; send it with "format": "text"')
        size = check_chars(texts, self.max_request_chars)  # the markup counts too
        pages = await inline_or_on_thread(size, parse_pages, texts, protect, rules)
        units = [u.text for page in pages for u in page.units]
        tags = any(u.tags for page in pages for u in page.units)
        if not units:  # markup only
            return [Translation(t, "eos", [], 0.0, 0, 0, False, str) for t in texts]
        kept = [[(t.start, t.end) for t in u.tags if t.kept and t.start < t.end] for page in pages for u in page.units]
        parts = await self._translate_texts(
            units, text_names(len(units), False), max_new_tokens, truncate, replace(decoding, return_alignment=tags),
            split, min_confidence, allowance, protect, fits, kept if decoding.glossary and any(kept) else None,
        )  # fmt: skip
        return await inline_or_on_thread(size, pages_back, texts, pages, parts)

    async def _split(
        self, texts: list[str], split: Split, decoding: Decoding, allowance: Allowance, fits: Fits | None = None
    ) -> Documents:
        """The texts split into segments, counted in the request's `allowance` (app/text/documents.py)."""
        return allowance.take(await inline_or_on_thread(
            sum(map(len, texts)), split_texts, texts, split, self.directions.split_language(decoding),
            self.max_request_chars, sys.maxsize, fits,
        ))  # fmt: skip

    async def _split_protected(
        self, texts: list[str], split: Split, decoding: Decoding, protect: Protect, allowance: Allowance,
        fits: Fits | None = None,
    ) -> tuple[Documents, list[Masked]]:  # fmt: skip
        """The texts split as `_split` does, their protected spans out of the splitter's sight, and each piece masked
        (app/text/protected.py)."""
        docs, masks = await inline_or_on_thread(
            sum(map(len, texts)), protect_documents, texts, split, self.directions.split_language(decoding),
            self.max_request_chars, sys.maxsize, protect, fits,
        )  # fmt: skip
        return allowance.take(docs), masks

    @staticmethod
    def _one_sentence_prefix(docs: Documents, decoding: Decoding) -> None:
        if decoding.target_prefix and any(len(segs) > 1 for segs in docs.segments):
            raise InvalidRequest(
                f"target_prefix forces the start of one {docs.kind}, and a text has several: "
                'send it with "split": "none", or its first sentence alone'
            )

    async def _translate(
        self, texts: list[str], single: bool, max_new_tokens: int | None, truncate: bool, decoding: Decoding,
        names: list[str] | None = None, kept: list[Kept] | None = None,
    ) -> list[Translation]:  # fmt: skip
        """Each text as one sequence (`kept`: whether a span of each is kept as written, no place for a term)."""
        self.limits.budget(max_new_tokens)
        options = None if decoding.greedy else self.limits.decoding(decoding)
        live = [i for i, t in enumerate(texts) if worded(t)]  # the others come back as written (blank ones as "")
        self.core.check_capacity(len(live))  # a 429 before any tokenizing when the queue is full
        size = sum(map(len, texts))
        tokenizer, alignments, start, forced = self.tokenizer, None, self.directions.start(decoding), 0
        async with self.deadline():
            srcs, truncated = await inline_or_on_thread(
                size, self.limits.sources, tokenizer, texts, truncate, single, names, decoding.source, True
            )
            if options is None:  # the plain greedy path
                budgets = [max_new_tokens or max_new_tokens_for(len(srcs[i]), self.max_new_tokens) for i in live]
                hyps = [[h] for h in await self.core.generate([srcs[i] for i in live], budgets, start)]
            else:
                options, budgets = await self._options(options, decoding, max_new_tokens, [srcs[i] for i in live])
                options, forced = replace(options, start=start), len(options.prefix)
                if decoding.glossary:
                    labels = [names[i] if names else "text" if single else f"text[{i}]" for i in live]
                    options = await self.terms.constrained(
                        options, budgets, [texts[i] for i in live], decoding, labels, max_new_tokens is not None,
                        kept and [kept[i] for i in live],
                    )  # fmt: skip
                hyps = await self.core.search([srcs[i] for i in live], budgets, options)
            if decoding.return_alignment and live:
                alignments = as_decoded(hyps) or await self.core.align(
                    [srcs[i] for i in live], [[h.tokens for h in hs] for hs in hyps], start
                )
        return await inline_or_on_thread(
            size, translations, tokenizer, texts, srcs, truncated, dict(zip(live, hyps)),
            dict(zip(live, alignments or ())) if decoding.return_alignment else None, self.calibration,
            decoding.return_word_confidence, forced, written(texts, decoding) if decoding.glossary else None,
        )  # fmt: skip

    async def _options(
        self, options: DecodingOptions, decoding: Decoding, max_new_tokens: int | None, srcs: list[list[int]]
    ) -> tuple[DecodingOptions, list[int]]:
        """The options with the target prefix's ids, and each source's budget (by default, room for the prefix
        and what the source's length calls for)."""
        prefix = []
        if decoding.target_prefix:
            # a space at its end is not a token of its own ("Ein " + " Hund" is two spaces): the next word begins anew
            written = decoding.target_prefix.rstrip()
            prefix = await asyncio.to_thread(self.tokenizer.encode, written, "target", False)
            writable(self.tokenizer, written, prefix, "target_prefix")
            options = self.limits.prefix(options, prefix, max_new_tokens)
            if written != decoding.target_prefix and prefix:
                options = replace(options, word_after_prefix=True, glued=await self.terms.glued())
        if max_new_tokens:
            return options, [max_new_tokens] * len(srcs)
        default = [
            min(self.max_new_tokens, max_new_tokens_for(len(s), self.max_new_tokens) + len(prefix)) for s in srcs
        ]
        return options, default

    async def translate_stream(
        self, text: str, max_new_tokens: int | None = None, truncate: bool = False, decoding: Decoding = GREEDY,
        split: Split = "sentences", min_confidence: float | None = None, protect: Protect | None = None,
    ) -> AsyncIterator[Token | Finished]:  # fmt: skip
        """Validate, tokenize and queue `text` (raising here what `translate` would), then return its events: a
        Token per generated token, and a last one (Finished) with the whole translation. A text of several segments
        decodes them together and sends their tokens one segment after another, the whitespace between two segments
        in the `text` of the next one's first token. With `protect`, a segment that had spans sends its tokens once
        it has ended and its spans are placed, each span in the text of the token it follows; the last segment's
        last token carries the rest of the text, so the tokens' texts add up to the last event's; a text the model is
        given nothing of (blank, no letter, spans alone) has the last event alone. Closing the iterator drops the
        sequences."""
        decoding = self.directions.resolve(decoding)
        if decoding.return_word_confidence:
            raise InvalidRequest("return_word_confidence needs the whole translation: leave out stream to have it")
        allowance = Allowance(self.max_request_sequences)
        if protect is None:
            docs, masks = await self._split([text], split, decoding, allowance), None
        else:
            docs, masks = await self._split_protected([text], split, decoding, protect, allowance)
        pieces, segments = ([text], None) if docs.whole and masks is None else (docs.pieces, docs.segments[0])
        if segments is not None:
            self._one_sentence_prefix(docs, decoding)
        floor = self.min_confidence if min_confidence is None else min_confidence
        events = stream_events(
            self, text, pieces if masks is None else [m.reads for m in masks], segments, max_new_tokens, truncate,
            decoding, docs.names(["text"]), floor, masks,
        )  # fmt: skip
        await anext(events)  # started, so its `finally` runs however the iterator ends
        return events

    # ---- helpers on the caller's side ------------------------------------------------------------

    @asynccontextmanager
    async def deadline(self, when: float | None = None):
        """Raise RequestTimeout when NMT_REQUEST_TIMEOUT_S (or the loop time `when`) passes; the awaited work is
        cancelled, which drops its sequences from the batch."""
        if self._warming and when is None:  # the warm-up (start)
            yield
            return
        when = asyncio.get_running_loop().time() + self.request_timeout_s if when is None else when
        try:
            async with asyncio.timeout_at(when):
                yield
        except TimeoutError:
            raise RequestTimeout(
                f"the request was not answered within {self.request_timeout_s:g} s (NMT_REQUEST_TIMEOUT_S) and was "
                "dropped; the server is overloaded or the text too long. Retry later, or send fewer or shorter texts"
            ) from None


def _check_positions(c: TransformerConfig, max_input_tokens: int, max_new_tokens: int, start: int) -> None:
    if max_input_tokens > c.max_positions or max_new_tokens + start >= c.max_positions:
        raise ValueError(
            f"max_input_tokens={max_input_tokens} and max_new_tokens={max_new_tokens} must stay below the "
            f"model's max_positions={c.max_positions}" + (" (less the target language's token)" * bool(start))
        )
