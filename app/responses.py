"""The answer to a `/translate` request that was not streamed, from the engine's translations; judged() gives the
confidence and flags fields, which the stream's last event has too."""

from __future__ import annotations

from typing import Any

from app import schemas as s
from app.segment import blank
from app.text import Engine, Translation
from model.confidence import Quality


def translation_response(body: s.TranslateRequest, out: list[Translation], engine: Engine) -> s.TranslateResponse:
    """The answer to a `/translate` request that was not streamed (also used by app/fastpath.py)."""
    tokens = body.return_tokens
    texts = [body.text] if isinstance(body.text, str) else body.text

    def spans_of(source: str, t: Translation) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        if t.segments is None:  # translated whole
            return [] if blank(source) else [((0, len(source)), (0, len(t.text)))]
        return t.segments

    def segments(source: str, t: Translation) -> list[s.SegmentOut] | None:
        if not body.return_segments:
            return None
        qualities = t.segment_qualities or [t.quality]
        return [
            s.SegmentOut(source_span=a, target_span=b, withheld=i in t.withheld, **judged(q))
            for i, ((a, b), q) in enumerate(zip(spans_of(source, t), qualities))
        ]  # fmt: skip

    def withheld(source: str, t: Translation) -> list[s.WithheldOut] | None:
        if not t.withheld:
            return None
        qualities = t.segment_qualities or [t.quality]
        spans = spans_of(source, t) if body.format == "text" else []
        return [
            s.WithheldOut(segment=i, source_span=spans[i][0] if i < len(spans) else None, **judged(qualities[i]))
            for i in t.withheld
        ]  # fmt: skip

    def words(t: Translation) -> list[s.WordOut] | None:
        if t.words is None:
            return None
        return [s.WordOut(text=t.text[a:b], span=(a, b), confidence=c) for (a, b), c in t.words]

    def signals(t: Translation) -> s.Signals | None:
        return s.Signals(**t.quality.signals.as_dict()) if body.return_signals and t.quality is not None else None

    def alignment(t: Translation) -> list[s.AlignedOut] | None:
        return None if t.alignment is None else [s.AlignedOut(**a.__dict__) for a in t.alignment]

    def hypotheses(t: Translation) -> list[s.HypothesisOut] | None:
        if not t.hypotheses:
            return None
        return [
            s.HypothesisOut(
                text=h.text, score=round(h.score, 4), finish_reason=h.finish_reason,
                tokens=h.tokens if tokens else None, token_ids=h.token_ids if tokens else None,
                alignment=alignment(h), **judged(h.quality), words=words(h),
            )
            for h in t.hypotheses
        ]  # fmt: skip

    return s.TranslateResponse(
        translations=[
            s.TranslationOut(
                text=t.text,
                detected_source=t.detected_source,
                finish_reason=t.finish_reason,
                truncated=t.truncated,
                tokens=t.tokens if tokens else None,
                token_ids=t.token_ids if tokens else None,
                score=round(t.score, 4) if body.return_scores else None,
                alignment=alignment(t),
                hypotheses=hypotheses(t),
                segments=segments(source, t),
                **judged(t.quality),
                signals=signals(t),
                words=words(t),
                withheld=withheld(source, t),
            )
            for source, t in zip(texts, out, strict=True)
        ],
        usage=s.Usage(input_tokens=sum(t.input_tokens for t in out), output_tokens=sum(t.output_tokens for t in out)),
        model=engine.name,
        calibrated=engine.calibration is not None,
    )


def judged(quality: Quality | None) -> dict[str, Any]:
    """The confidence and flags fields of a translation, sentence or hypothesis."""
    return {} if quality is None else {"confidence": quality.confidence, "flags": quality.flags}
