"""Protected spans through the engine (app/protect/): texts split with their spans out of the splitter's sight, each
piece masked for the model, and each translation restored, its alignment and word spans moved to match."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from app import protect as spans
from app.segment import Split, segment, unwrapped
from app.text.documents import Documents, check_chars, check_segments, split_texts
from app.text.results import Aligned, Translation

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.protect import Masked, Protect


def protect_documents(
    texts: list[str], split: Split, language: str, max_chars: int, max_segments: int, protect: Protect,
    fits: Callable[[str], bool] | None = None,
) -> tuple[Documents, list[Masked]]:  # fmt: skip
    """The texts split into segments as split_texts splits them, with their protected spans out of the splitter's
    sight (a URL's "?" ends no sentence): each text is split with each group of spans replaced by an ordinary word
    (so that "holds a {x}. The dog" is two sentences, as "holds a box. The dog" is), and its segments mapped back to
    it. A group between two segments stays there as written, one inside a segment is in its piece; a text (or a
    sentence) of spans and punctuation alone is one piece, as written. Each piece masked, in `pieces` order."""
    check_chars(texts, max_chars)
    found = [protect.spans(text) for text in texts]
    whole = [spans.mask(text, f) for text, f in zip(texts, found, strict=True)]
    stood = [spans.stand_in(text, f) for text, f in zip(texts, found, strict=True)]
    split_up = split_texts([s.text for s in stood], split, language, max_chars, sys.maxsize, fits)
    segments = [
        segment(w.source, "none") if w.groups and not w.reads else s.segments(segs)
        for w, s, segs in zip(whole, stood, split_up.segments, strict=True)
    ]
    check_segments(segments, split, max_segments)  # as split_texts counts, without the stand-ins alone
    read = unwrapped if split == "nonewlines" else str  # DeepL's nonewlines: a line break in a sentence is a space
    masks = [
        spans.mask(read(text[s.start : s.end]), spans.inside(f, s))
        for text, segs, f in zip(texts, segments, found, strict=True)
        for s in segs
    ]
    return Documents(texts, segments, split), masks


def restored(masks: list[Masked], parts: list[Translation], alignment: bool, words: bool) -> list[Translation]:
    """Each piece's translation (and each of its n-best) with its spans put back. Its alignment, asked for or not,
    is kept only if `alignment` was asked for (its spans then: the piece's and the restored translation's); a piece
    of spans alone has an empty alignment and list of words, where they were asked for. In place."""
    for m, part in zip(masks, parts, strict=True):
        for t in part.hypotheses or [part]:
            restore(m, t, alignment, words)
    return parts


def restore(m: Masked, t: Translation, alignment: bool, words: bool) -> None:
    r = m.restore(t.text, [(a.target_span, a.source_span) for a in t.alignment or ()])
    if not alignment:
        t.alignment = None
    else:
        t.alignment = [
            Aligned(a.target_token, a.source_token, r.span(a.target_span), m.source_span(a.source_span))
            for a in t.alignment or ()
        ]  # fmt: skip
    if words:
        t.words = [(r.word(span), c) for span, c in t.words or ()]
    t.text = r.text
