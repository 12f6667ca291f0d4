"""A glossary's terms in a text, and the constraints that force their translations (model/constraints.py).

Matching: a source term matches whole words only (not inside a longer word), the longest term first where terms
overlap, optionally in any case, its words apart by any whitespace ("red bike" matches "red  bike", a line break or
a no-break space between them); a term found several times is one constraint. The target term is forced as the
tokens it has on its own, which begin a word.

Each constraint also names the token it takes the place of: the model's own rendering of the source term, decoded
alone, less the words it adds in front (an article: "dog" -> "Ein Hund" gives "Hund"'s first token). Where the
search would pick that token, the term begins instead. It names the source tokens the term's occurrences cover too
(`source_positions`), where a step that translates one begins it; and a text that ends a sentence (`ends_sentence`)
has the target tokens that end one (`is_stop`) wait for the terms, so that none follows the sentence's end.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

Glossary = tuple[tuple[str, str], ...]  # (source term, target term) pairs, in the glossary's order
Found = list[tuple[tuple[str, str], int, int]]  # (source term, target term), start, end: occurrences()
STOPS = ".!?…。！？؟।"  # what ends a sentence
CLOSERS = "\"'»«“”‘’)]}」』"  # what may follow its end


@lru_cache(maxsize=64)
def _matcher(sources: tuple[str, ...], ignore_case: bool) -> re.Pattern:
    """One alternation of the source terms, longest first, each bounded by non-word characters."""
    ordered = sorted(set(sources), key=len, reverse=True)
    body = "|".join(r"\s+".join(_word(w, ignore_case) for w in t.split()) for t in ordered)
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE if ignore_case else 0)


def _word(word: str, ignore_case: bool) -> str:
    """A term's word as a pattern; in any case, ß and ss are one (casefold's "Straße" = "STRASSE" = "strasse")."""
    pattern = re.escape(word)
    return re.sub("ss|ß|ẞ", "(?:ss|ß)", pattern, flags=re.IGNORECASE) if ignore_case else pattern


def find(text: str, glossary: Glossary, ignore_case: bool = False) -> list[tuple[str, str]]:
    """The (source term, target term) entries whose source term occurs in `text`, in the order they occur, each once.
    Text and terms compare in Unicode's composed form (NFC), as the model reads them: "cafe" + U+0301 is "café"."""
    return entries(occurrences(text, glossary, ignore_case))


def entries(found: Found) -> list[tuple[str, str]]:
    """The entries of occurrences(), each once, in the order they first occur."""
    return list(dict.fromkeys(entry for entry, _, _ in found))


def occurrences(text: str, glossary: Glossary, ignore_case: bool = False) -> Found:
    """Each place a source term occurs in `text`: its (source term, target term) entry, and where it is (character
    offsets into the text's composed form, NFC, which is the text itself but for a text not composed)."""
    entries = [(s, t) for s, t in glossary if s.strip() and t.strip()]
    if not entries or not text.strip():
        return []

    def fold(term: str) -> str:  # what a term and a match of it have in common: its words, in any case if asked
        words = " ".join(_composed(term).split())
        return words.casefold() if ignore_case else words

    by_source: dict[str, tuple[str, str]] = {}
    for s, t in entries:
        by_source.setdefault(fold(s), (s, t))
    terms = tuple(_composed(s) for s, _ in entries)
    return [(by_source[fold(m.group())], m.start(), m.end()) for m in _matcher(terms, ignore_case)
            .finditer(_composed(text)) if fold(m.group()) in by_source]  # fmt: skip


def substituted(text: str, glossary: Glossary, ignore_case: bool = False) -> str:
    """The text with each source term's occurrence replaced by its target term: a text no model sees (no letter in
    it: "42" with the entry 42 -> zweiundvierzig) still gets its terms."""
    found = occurrences(text, glossary, ignore_case)
    if not found:
        return text
    composed, out, at = _composed(text), [], 0
    for (_, target), start, end in found:
        out += [composed[at:start], target]
        at = end
    return "".join(out) + composed[at:]


def source_positions(text: str, tokens: list, found: Found) -> dict[str, frozenset[int]]:
    """Each target term's source positions: those of the tokens (model/token.py's, the encoder input's, with their
    character offsets into `text`) its source term's occurrences overlap. None for a text not composed (NFC), whose
    matches' offsets are not the tokens'."""
    if _composed(text) != text:
        return {}
    out: dict[str, set[int]] = {}
    for (_, target), start, end in found:
        out.setdefault(target, set()).update(
            i for i, tok in enumerate(tokens) if not tok.special and tok.start < end and start < tok.end
        )
    return {t: frozenset(at) for t, at in out.items()}


def is_stop(piece: str) -> bool:
    """Whether a target token is closing punctuation alone (a word's "▁" in front and closing quotes after allowed)."""
    text = piece.removeprefix("▁").rstrip(CLOSERS)
    return bool(text) and all(ch in STOPS for ch in text)


def ends_sentence(text: str) -> bool:
    """Whether the text ends with closing punctuation (.!?… and their kin; closing quotes and brackets after it)."""
    return text.rstrip().rstrip(CLOSERS)[-1:] in tuple(STOPS)


def _composed(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def rendering_token(source_term: str, rendering: list[int], pieces: list[str]) -> int | None:
    """The token a term takes the place of: the first token of the first word of the model's rendering of the source
    term that is not one it adds in front (while the rendering has more words than the term, its first ones are).
    `pieces`: the rendering's tokens as strings ("▁" begins a word)."""
    starts = [i for i, p in enumerate(pieces) if (i == 0 or p.startswith("▁")) and any(ch.isalnum() for ch in p)]
    if not starts:
        return None
    extra = max(0, len(starts) - len(source_term.split()))
    return rendering[starts[min(extra, len(starts) - 1)]]
