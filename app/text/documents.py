"""Texts of any shape through a sentence-level model: each text split into segments (app/segment.py), every segment
of every text a sequence of its own in the running batch, and each text's translations put back into its shape."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from app.engine.errors import InputTooLong, InvalidRequest
from app.html import HTML, HtmlDocument, MalformedHtml, Rules, parse
from app.segment import Segment, Split, assemble, cut_to_fit, segment, unwrapped
from app.text.results import Aligned, Translation
from model.confidence import FLAGS, Quality

if TYPE_CHECKING:
    from app.protect import Protect

Format = Literal["text", "html", "xml"]
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Documents:
    """The request's texts and their segments: `pieces` are what the model translates, in order."""

    texts: list[str]
    segments: list[list[Segment]]
    split: Split = "sentences"

    @property
    def pieces(self) -> list[str]:
        pieces = [text[s.start : s.end] for text, segs in zip(self.texts, self.segments) for s in segs]
        return list(map(unwrapped, pieces)) if self.split == "nonewlines" else pieces

    @property
    def kind(self) -> str:
        """What a piece is: a sentence, a line or a segment."""
        return {"sentences": "sentence", "nonewlines": "sentence", "lines": "line"}.get(self.split, "segment")

    def names(self, labels: list[str]) -> list[str]:
        """What an error calls each piece: "sentence 3 of text[1]", of the text's label (text_names()); the label itself
        when the text is one piece."""
        names = []
        for text, segs in zip(labels, self.segments, strict=True):
            names += [text] if len(segs) == 1 else [f"{self.kind} {k + 1} of {text}" for k in range(len(segs))]
        return names

    @property
    def whole(self) -> bool:
        """Every text is one segment, the text itself (a caption): translated as it is, nothing to put back."""
        return all(len(segs) <= 1 and (not segs or (segs[0].start, segs[0].end) == (0, len(text)))
                   for text, segs in zip(self.texts, self.segments))  # fmt: skip


def text_names(n: int, single: bool, at: list[int] | None = None) -> list[str]:
    """What an error calls each of n texts: "text" when the request sent one, else "text[i]" by its place in the
    request (`at`: the places of these n, where they are some of its texts)."""
    return ["text"] if single else [f"text[{i}]" for i in (range(n) if at is None else at)]


def check_chars(texts: list[str], max_chars: int) -> int:
    """The texts' characters in all; InputTooLong when over max_chars."""
    chars = sum(map(len, texts))
    if chars > max_chars:
        raise InputTooLong(
            f"the texts have {chars} characters in all; the limit is {max_chars} a request (NMT_MAX_REQUEST_CHARS): "
            "send the rest in another request"
        )
    return chars


def split_texts(
    texts: list[str], split: Split, language: str, max_chars: int, max_segments: int,
    fits: Callable[[str], bool] | None = None,
) -> Documents:  # fmt: skip
    """Each text's segments, and with `fits` each segment that does not fit cut into pieces that do (app/segment.py's
    cut_to_fit); InputTooLong when the texts have more than max_chars characters in all, or more than max_segments
    segments (what one request may have waiting or decoding)."""
    check_chars(texts, max_chars)
    segments = [segment(text, split, language) for text in texts]
    if fits is not None:
        segments = [cut_to_fit(text, segs, fits) for text, segs in zip(texts, segments, strict=True)]
    check_segments(segments, split, max_segments)
    return Documents(texts, segments, split)


def check_segments(segments: list[list[Segment]], split: Split, max_segments: int, before: int = 0) -> int:
    """The texts' segments (with `before`, counted already for the same request); InputTooLong when more than
    max_segments (what one request may have waiting or decoding)."""
    count = before + sum(map(len, segments))
    if count > max_segments:
        raise InputTooLong(
            f"the texts have {'at least ' * bool(before)}{count} "
            f"{'sentences' if split in ('sentences', 'nonewlines') else 'segments'} (split={split!r}); a "
            f"request may have at most {max_segments} at once (NMT_MAX_REQUEST_SEQUENCES): send the rest in another "
            "request"
        )
    return count


@dataclass
class Allowance:
    """One request's segments (NMT_MAX_REQUEST_SEQUENCES), counted as its parts are split: a list of texts in several
    source languages splits each language's by its own rules, all of them at once."""

    max_segments: int
    taken: int = 0

    def take(self, docs: Documents) -> Documents:
        """`docs`, its segments counted; InputTooLong when the request's pass the limit."""
        self.taken = check_segments(docs.segments, docs.split, self.max_segments, self.taken)
        return docs


def withhold(parts: list[Translation], min_confidence: float) -> list[Translation]:
    """Each translation whose confidence is below `min_confidence` loses its text, tokens, alignment and
    alternatives and says it was withheld; its quality stays, to say why. Each other loses the alternatives below
    it. In place; returns `parts`."""
    if min_confidence <= 0:
        return parts
    for p in parts:
        if p.hypotheses:  # its alternatives below the floor go too (the first is itself)
            p.hypotheses = [p.hypotheses[0]] + [
                h for h in p.hypotheses[1:] if h.quality is None or h.quality.confidence >= min_confidence
            ]
        if p.quality is not None and p.quality.confidence < min_confidence:
            p.text, p.token_ids, p.hypotheses, p.withheld = "", [], [], [0]
            p.score, p.scored_steps = 0.0, 0  # the score of what it gives: nothing
            p.alignment = None if p.alignment is None else []  # asked for: the document's other pieces keep theirs
            p.words = None if p.words is None else []
            p.__dict__.pop("tokens", None)  # the cached pieces of the tokens it no longer has
    return parts


def weakest(qualities: list[Quality | None]) -> Quality | None:
    """A document's quality: its least confident segment's confidence and signals, every segment's flags."""
    known = [q for q in qualities if q is not None]
    if not known:
        return None
    low = min(known, key=lambda q: q.confidence)
    raised = {f for q in known for f in q.flags}
    return replace(low, flags=[f for f in FLAGS if f in raised])


def alternatives(parts: list[Translation]) -> int:
    """How many hypotheses the n-best lists of a text's parts make together: as many as the shortest list of a part
    the model gave (a part withheld under min_confidence, or kept as written, has none and stands as itself in
    each)."""
    return min((len(p.hypotheses) for p in parts if p.hypotheses or not (p.withheld or p.kept)), default=0)


def ith(part: Translation, i: int) -> Translation:
    return part.hypotheses[i] if part.hypotheses else part


def put_back(docs: Documents, parts: list[Translation]) -> list[Translation]:
    """One Translation per text from its segments' translations (in `docs.pieces` order)."""
    out, at = [], 0
    for text, segs in zip(docs.texts, docs.segments):
        out.append(combined(text, segs, parts[at : at + len(segs)]))
        at += len(segs)
    return out


def mean_score(scored: list[tuple[float, int]]) -> float:
    """Scores (each of so many tokens) weighted by their tokens: the score of the text they make; 0.0 for none."""
    steps = sum(n for _, n in scored)
    return sum(score * n for score, n in scored) / steps if steps else 0.0


def combined(text: str, segments: list[Segment], parts: list[Translation]) -> Translation:
    """The text's translation: its segments' translations between its own whitespace. Token ids, counts and the
    alignment run through the segments in order (alignment indices count the segments' tokens one after another,
    its spans are the text's and the translation's); the score is the segments' scores weighted by their tokens
    (their mean log-probability, with the default length penalty), those withheld left out; the n-best list puts together the segments'
    i-th hypotheses."""
    if not parts:  # a blank text translates to "", as Engine.translate's texts do
        return Translation("", "eos", [], 0.0, 0, 0, False, str, segments=[])
    joined, spans = assemble(text, segments, [p.text for p in parts])
    steps = sum(p.output_tokens for p in parts)
    alignment = None
    if all(p.alignment is not None for p in parts):
        alignment, targets, sources = [], 0, 0
        for p, s, (t_start, _) in zip(parts, segments, spans, strict=True):
            alignment += [
                Aligned(a.target_token + targets, a.source_token + sources,
                        (a.target_span[0] + t_start, a.target_span[1] + t_start),
                        (a.source_span[0] + s.start, a.source_span[1] + s.start))
                for a in p.alignment
            ]  # fmt: skip
            targets, sources = targets + len(p.token_ids), sources + p.input_tokens
    words = None
    if all(p.words is not None for p in parts):  # shifted to where each segment's translation stands
        words = [((a + t, b + t), c) for p, (t, _) in zip(parts, spans, strict=True) for (a, b), c in p.words]
    out = Translation(
        text=joined, finish_reason="length" if any(p.finish_reason == "length" for p in parts) else "eos",
        token_ids=[i for p in parts for i in p.token_ids],
        score=mean_score([(p.score, p.given_steps) for p in parts]),  # of what is given
        input_tokens=sum(p.input_tokens for p in parts), output_tokens=steps,
        scored_steps=sum(p.given_steps for p in parts),
        truncated=any(p.truncated for p in parts), piece=parts[0].piece, alignment=alignment,
        segments=[((s.start, s.end), span) for s, span in zip(segments, spans, strict=True)],
        quality=weakest([p.quality for p in parts]), segment_qualities=[p.quality for p in parts],
        withheld=[i for i, p in enumerate(parts) if p.withheld], words=words,
    )  # fmt: skip
    n_best = alternatives(parts)
    if n_best > 1:  # the first is this one (each part's best heads its own list)
        others = [combined(text, segments, [ith(p, i) for p in parts]) for i in range(1, n_best)]
        out.hypotheses = [replace(out), *others]
    return out


def parse_pages(texts: list[str], protect: Protect | None = None, rules: Rules = HTML) -> list[HtmlDocument]:
    """Each text read as HTML (or, with XML's rules, XML), `protect`'s spans in its text kept aside; InvalidRequest
    (422) saying where one is not well-formed."""
    xml = rules is not HTML
    pages, kind, field = [], "XML" if xml else "HTML", 'tag_handling "xml"' if xml else 'format "html"'
    for i, text in enumerate(texts):
        try:
            pages.append(parse(text, protect, rules))
        except MalformedHtml as e:
            where = "text" if len(texts) == 1 else f"text[{i}]"
            raise InvalidRequest(f"{where} is not well-formed {kind} ({field}): {e}") from None
    return pages


def pages_back(texts: list[str], pages: list[HtmlDocument], parts: list[Translation]) -> list[Translation]:
    """One Translation per page: the page rendered with its units' translations (and their alignments, for the
    inline tags); tokens and counts run through the units in order, the score is weighted by their tokens, the
    n-best list renders the units' i-th hypotheses."""
    out, at = [], 0
    for text, page in zip(texts, pages, strict=True):
        units = parts[at : at + len(page.units)]
        at += len(page.units)
        out.append(page_translation(text, page, units))
    return out


def placing(unit: Translation, source: str) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """A unit's alignment as app/html/place.py takes it, (target span, source span) pairs of its tokens; each word of
    a segment kept as written (no letter in it: "<b>1.</b> A dog runs") paired with itself; and for each of its
    segments withheld under min_confidence the pair of an empty target span where its translation would have been
    and its source: the tags in it come back empty there."""
    if unit.alignment is None:
        return None
    pairs = [(a.target_span, a.source_span) for a in unit.alignment if a.target_span[0] < a.target_span[1]]
    spans = unit.segments or [((0, len(source)), (0, len(unit.text)))]  # a unit translated whole
    qualities = unit.segment_qualities or [unit.quality]
    for k, ((a, b), (t, _)) in enumerate(spans):
        if qualities[k] is None and k not in unit.withheld:  # the model never saw it: it is as written
            pairs += [((t + w.start(), t + w.end()), (a + w.start(), a + w.end())) for w in _WORD.finditer(source[a:b])]
    return pairs + [((spans[k][1][0],) * 2, spans[k][0]) for k in unit.withheld]


def page_translation(text: str, page: HtmlDocument, units: list[Translation]) -> Translation:
    if not units:
        return Translation(text, "eos", [], 0.0, 0, 0, False, str)
    alignments = [placing(u, unit.text) for u, unit in zip(units, page.units, strict=True)]
    steps = sum(u.output_tokens for u in units)
    out = Translation(
        text=page.render([u.text for u in units], alignments),
        finish_reason="length" if any(u.finish_reason == "length" for u in units) else "eos",
        token_ids=[i for u in units for i in u.token_ids],
        score=mean_score([(u.score, u.given_steps) for u in units]),  # of what is given
        input_tokens=sum(u.input_tokens for u in units), output_tokens=steps,
        scored_steps=sum(u.given_steps for u in units),
        truncated=any(u.truncated for u in units), piece=units[0].piece,
        quality=weakest([u.quality for u in units]),
    )  # fmt: skip
    # the units' sentences, one after another: a unit translated whole counts as one
    at = 0
    out.segment_qualities = []
    for u in units:
        qualities = u.segment_qualities if u.segment_qualities is not None else [u.quality]
        out.segment_qualities += qualities
        out.withheld += [at + i for i in u.withheld]
        at += len(qualities)
    n_best = alternatives(units)
    if n_best > 1:
        others = [page_translation(text, page, [ith(u, i) for u in units]) for i in range(1, n_best)]
        out.hypotheses = [replace(out), *others]
    return out
