"""A translation streamed token by token (`Engine.translate_stream`'s events): the text's segments decode
together and send their tokens one segment after another; a segment with protected spans sends its tokens once its
spans are placed; the last event carries the whole translation, its confidence and what was withheld. The events
are typed values (`Token`, then `Finished`); app/sse.py writes them as app/schemas/stream.py's server-sent events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.detokenize import IncrementalText
from app.segment import Segment, blank, worded
from app.text.documents import mean_score
from app.text.glossary import written
from app.text.limits import Decoding
from app.text.offload import inline_or_on_thread
from app.text.results import aligned, as_decoded
from model.confidence import Quality, judge
from model.hypothesis import Hypothesis
from model.options import GREEDY as SEARCH_GREEDY

if TYPE_CHECKING:
    from app.protect import Masked, Restored
    from app.text.engine import Engine


@dataclass(frozen=True)
class Token:
    """One generated token: its place in the stream, its id, the text it adds and the text so far."""

    index: int
    id: int
    text: str
    text_so_far: str


@dataclass(frozen=True)
class Finished:
    """The last event: the whole translation (withheld sentences left out), how it ended, the tokens read and
    written, and each segment's quality (None: protected spans alone) with the indices of those withheld."""

    text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int
    truncated: bool
    calibrated: bool
    score: float | None = None
    qualities: tuple[Quality | None, ...] = ()
    withheld: tuple[int, ...] = ()
    spans: tuple[tuple[int, int], ...] = ()  # each segment's [start, end) characters in the text


async def stream_events(
    engine: Engine, text: str, pieces: list[str], segments: list[Segment] | None, max_new_tokens: int | None,
    truncate: bool, decoding: Decoding, names: list[str], min_confidence: float, masks: list[Masked] | None = None,
):  # fmt: skip
    engine.limits.budget(max_new_tokens)
    options = SEARCH_GREEDY if decoding.greedy else engine.limits.decoding(decoding, stream=True)
    engine.core.check_capacity(len(pieces))
    deadline = asyncio.get_running_loop().time() + engine.request_timeout_s
    async with engine.deadline(deadline):
        srcs, truncated = await inline_or_on_thread(
            len(text), engine.limits.sources, engine.tokenizer, pieces, truncate, True, segments and names,
            decoding.source, True,
        )  # fmt: skip
        options, budgets = await engine._options(options, decoding, max_new_tokens, srcs)
        options = replace(options, start=engine.directions.start(decoding))
        per_piece = [options] * len(srcs)
        if decoding.glossary:
            labels = names if segments else ["text"]
            per_piece = await engine.terms.constrained(
                options, budgets, pieces, decoding, labels, max_new_tokens is not None
            )  # fmt: skip
    if not any(map(worded, pieces)):  # a blank text, no letter, or protected spans alone: no model call
        yield None
        back = text if masks is not None or not decoding.glossary else written([text], decoding)[0]
        yield Finished("" if blank(text) else back, "eos", 0, 0, False, engine.calibration is not None, 0.0)
        return
    request = object()  # the segments take their turns to be admitted as one request
    streams = [engine.core.stream(src, budget, o, request) if worded(piece) else None  # as written
               for src, budget, o, piece in zip(srcs, budgets, per_piece, pieces)]  # fmt: skip
    gaps = [(0, 0)] if segments is None else [  # the text before each segment, then after the last
        (a.end if a else 0, b.start if b else len(text)) for a, b in zip([None, *segments], [*segments, None])
    ]  # fmt: skip
    last = max(i for i, tokens in enumerate(streams) if tokens is not None)

    def as_written(k: int) -> str:  # a piece no model sees (no letter, or protected spans alone), as it comes back
        kept = pieces[k] if masks is None else masks[k].source
        return written([kept], decoding)[0] if masks is None and decoding.glossary else kept

    try:
        async with engine.deadline(deadline):  # a refusal (a full queue) is still the answer's status, not an event
            for tokens in streams:
                if tokens is not None:
                    await tokens.accepted()
        yield None
        shown, pending, index, hyps, done = "", "", 0, [], []  # sent in events; text not sent yet
        model_texts = []  # what the model wrote, which its confidence judges
        for k, ((start, end), tokens) in enumerate(zip(gaps, streams)):
            pending += text[start:end]
            if tokens is None:  # no letter (or protected spans alone): as written, sent with the next token
                kept = as_written(k)
                pending += kept
                hyps.append(None)
                done.append((text[start:end], kept))
                model_texts.append("")
                continue
            detok = IncrementalText(engine.tokenizer, engine.byte_ids)
            spans = masks is not None and bool(masks[k].groups)  # its tokens wait until the spans are placed
            tail = ""  # what follows the last translated segment, as written: it goes with the last token
            if segments is not None and k == last:
                tail = "".join(text[a:b] + as_written(j) for j, (a, b) in enumerate(gaps[:-1]) if j > last)
                tail += text[gaps[-1][0] :]
            waiting = []  # (token, its text, where it ends in the translation) not sent yet
            while True:
                async with engine.deadline(deadline):
                    token = await anext(tokens, None)
                if token is None:
                    break
                waiting += detok.add(token)  # a byte run's tokens wait for the run to close
                while not spans and len(waiting) > bool(tail):  # with a tail, each sent when the next comes
                    sent, delta, _ = waiting.pop(0)
                    delta = pending + delta
                    shown, pending = shown + delta, ""
                    yield Token(index, sent, delta, shown)
                    index += 1
            waiting += detok.close()  # a byte run the translation ends with
            hyps.append(await tokens.result())
            model_texts.append(engine.tokenizer.decode(hyps[-1].tokens))
            translated, deltas = model_texts[-1], [delta for _, delta, _ in waiting]
            if spans:
                async with engine.deadline(deadline):
                    back = await restore_stream(engine, masks[k], srcs[k], hyps[-1], detok.text, options.start)
                deltas, translated = back.deltas(detok.text, [end for _, _, end in waiting]), back.text
            if deltas:
                deltas[-1] += tail
            for (token, _, _), delta in zip(waiting, deltas, strict=True):
                delta = pending + delta
                shown, pending = shown + delta, ""
                yield Token(index, token, delta, shown)
                index += 1
            done.append((text[start:end], translated))
        real = [h for h in hyps if h is not None]
        steps = sum(len(h.logprobs) for h in real)
        forced = len(options.prefix)  # a target prefix: the caller's tokens, not the model's choice
        qualities = [
            None if h is None else judge(src, h.tokens, h.logprobs, piece, translated, engine.calibration, forced,
                                         h.terms, h.attention, h.aligned)
            for src, h, piece, translated in zip(srcs, hyps, pieces, model_texts, strict=True)
        ]  # fmt: skip
        withheld = [i for i, q in enumerate(qualities) if q is not None and q.confidence < min_confidence]
        engine.metrics.judged(qualities, len(withheld))
        yield Finished(
            text="".join(gap + ("" if i in withheld else translated) for i, (gap, translated) in enumerate(done))
            + (text[gaps[-1][0] :] if segments else ""),
            finish_reason="length" if any(h.finish_reason == "length" for h in real) else "eos",
            input_tokens=sum(len(s) for s, h in zip(srcs, hyps) if h), output_tokens=steps, truncated=bool(truncated),
            calibrated=engine.calibration is not None,
            score=score([h for i, h in enumerate(hyps) if h is not None and i not in withheld]),
            qualities=tuple(qualities), withheld=tuple(withheld),
            spans=((0, len(text)),) if segments is None else tuple((g.start, g.end) for g in segments),
        )  # fmt: skip
    finally:
        for tokens in streams:
            if tokens is not None:
                tokens.close()


def score(given: list[Hypothesis]) -> float:
    """The score of what a stream gives (its withheld sentences left out): one hypothesis's own, else their scores
    weighted by their tokens, as a text's translation's (app/text/documents.py's `combined`)."""
    if len(given) == 1:
        return given[0].score
    return mean_score([(h.score, len(h.logprobs)) for h in given])


async def restore_stream(
    engine: Engine, m: Masked, src: list[int], hyp: Hypothesis, target: str, start: tuple[int, ...]
) -> Restored:
    """A streamed piece's translation `target` with its spans put back, by its alignment, once it has ended."""
    pairs = []
    if m.groups and m.reads and hyp.tokens:
        to_source = (as_decoded([[hyp]]) or await engine.core.align([src], [[hyp.tokens]], start))[0][0]
        tokens = aligned(engine.tokenizer, m.reads, target, hyp.tokens, to_source)
        pairs = [(a.target_span, a.source_span) for a in tokens]
    return m.restore(target, pairs)
