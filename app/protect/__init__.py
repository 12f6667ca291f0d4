"""Protected spans: placeholders, inline tags, URLs, e-mail addresses, code and the caller's own terms and patterns,
kept verbatim through translation.

The guarantee is by construction: the model never reads a protected span, so it can neither change nor drop nor
repeat one. Each piece of text (a sentence) is masked, its spans taken out, and the model translates what is left;
then each span is put back into the translation, as written, exactly once, where the words around it went:

- Spans are found leftmost first, the longest where several start at one place, never overlapping, whatever their
  kind. Spans with only whitespace between them, or punctuation glued to both (`{a}-{b}`), are one group, put back
  as written (whitespace and punctuation included).
- Masking: a group goes out with the whitespace around it, and one space is left where words would otherwise meet
  ("Hello {name}, welcome" reads "Hello, welcome"; "Send {n} files" reads "Send files").
- Restoring, by the alignment of the translation to what the model read (per target token, the source token it
  aligns to): a group follows the translation of the word before it (to be exact, of the last source token before
  it that some target token aligns to), widened to the whole target word. A group glued to the next word and not to
  the one before (`{currency}100`), or that ends in an opening tag (`<g id="1">`), goes in front of the translation
  of the word after it instead; a closing tag never goes before its opening one. A group with no word before it
  stays at the start (after the translation's opening punctuation, where the source had some before it), one with
  no word after it stays at the end (before the closing punctuation); with no alignment at all, it goes where its
  share of the way through the text puts it. Spaces: one before it where the source had whitespace before it, one
  after it where the source had whitespace after it, never two in a row, none before closing punctuation or after
  opening punctuation (a quote faces by what follows it), and never two words glued that the source kept apart.
- A whole text is split into sentences with each group read as an ordinary word (app/text/protected.py): a group
  between two sentences stays there as written; the splitter never sees a span, and a full stop after one ends a
  sentence as after a word ("holds a {x}. The" is not "holds a. The", an initial).
- A piece that is nothing but spans, whitespace and punctuation is not translated: it comes back as written.

User patterns run on RE2 (linear time in the text whatever the pattern; no lookaround, no backreferences), each
within limits of count, length and program size; a pattern that matches the empty string is refused. The built-in
kinds run on RE2 too; literal terms match as whole words (not inside a longer word: a hyphen or an apostrophe
between letters is inside one), case-sensitively, without the whitespace at their ends.

- `spans.py`      Protect: what a request protects (the built-in KINDS, terms, patterns), checked and compiled
                  (protection), and the spans it finds in a text
- `masking.py`    a piece without its groups of spans, for the model (mask, Masked), or cut out of an HTML text run
                  (cuts), or a text with a word in their place, for the sentence splitter (stand_in, StoodIn)
- `restoring.py`  where each group goes in the translation (Anchors), and the translation with them put back (Restored)
"""

from app.protect.masking import Cut, Masked, StoodIn, cuts, inside, mask, stand_in
from app.protect.restoring import Anchors, Pair, Restored, Span
from app.protect.spans import KINDS, Protect, protection

__all__ = [
    "KINDS", "Anchors", "Cut", "Masked", "Pair", "Protect", "Restored", "Span", "StoodIn", "cuts", "inside", "mask",
    "protection", "stand_in",
]  # fmt: skip
