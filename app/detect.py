"""Language detection for the LibreTranslate-compatible API: py3langid's model, choosing among the languages served."""

from __future__ import annotations

import asyncio
import copy
import html
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import TypeVar

from py3langid.langid import MODEL_FILE, LanguageIdentifier

from app.text import INLINE_CHARS

T = TypeVar("T")
TOP = 3  # candidates an answer lists, as LibreTranslate's /detect
LEANING = 24  # characters: how much a text of a list leans on the whole list's language (each())
_HIDDEN = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")


def visible(page: str) -> str:
    """An HTML text's words, which detection reads (the markup's names and attributes are mostly English)."""
    return html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", page)))


@cache
def full_model() -> LanguageIdentifier:
    """py3langid's model (142 languages) with probabilities that sum to 1; loading it takes about a second."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


restricted: dict[tuple[str, ...], LanguageIdentifier | None] = {}
# A language a model names otherwise than py3langid: the detector's class that is it (Norwegian Bokmål is its "no";
# North Azerbaijani, in Latin script, its "az"; Filipino its Tagalog)
ALIASES = {"nb": "no", "az-Latn": "az", "fil": "tl"}
named: dict[tuple[str, ...], dict[str, str]] = {}  # per set of languages: the detector's class -> the language


def identifier(languages: tuple[str, ...]) -> LanguageIdentifier | None:
    """The model restricted to `languages` (the ones it knows, by their names or ALIASES; all of its own when none
    are given); None when it knows none of them."""
    if languages not in restricted:
        full = full_model()
        classes: dict[str, str] = {}
        for code in languages:
            for c in (code, ALIASES.get(code)):
                if c in full.nb_classes:
                    classes.setdefault(c, code)
        model = copy.copy(full) if classes else None if languages else full  # a copy shares the arrays it slices
        if classes:
            model.set_languages(list(classes))
        named[languages] = classes
        restricted[languages] = model
    return restricted[languages]


SCRIPTS = {"LATIN": "Latn", "CYRILLIC": "Cyrl", "ARABIC": "Arab", "DEVANAGARI": "Deva", "TIFINAGH": "Tfng",
           "BENGALI": "Beng", "GREEK": "Grek", "HEBREW": "Hebr", "GURMUKHI": "Guru", "GEORGIAN": "Geor"}  # fmt: skip


def script(text: str) -> str | None:
    """The script most of a text's letters are in (ISO 15924), Chinese characters told apart as Simplified (Hans) or
    Traditional (Hant) by which of the two national character sets writes more of them (GB 2312, Big5); None where
    it has no letter of a script named here."""
    counts: Counter[str] = Counter()
    for ch in text:
        if not ch.isalpha():
            continue
        name = unicodedata.name(ch, "")
        if name.startswith("CJK UNIFIED"):
            simplified, traditional = _writes(ch, "gb2312"), _writes(ch, "big5")
            if simplified != traditional:
                counts["Hans" if simplified else "Hant"] += 1
        elif (word := name.split(" ", 1)[0]) in SCRIPTS:
            counts[SCRIPTS[word]] += 1
    return counts.most_common(1)[0][0] if counts else None


def _writes(ch: str, encoding: str) -> bool:
    try:
        ch.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def written(language: str, text: str, languages: tuple[str, ...]) -> str:
    """The language as one of `languages` names it in the text's script, where they have it in several (`zh` and
    `zh-Hant`, `az` and `az-Arab`): the detector tells languages apart, not the scripts they are written in."""
    base = language.split("-")[0]
    variants = [code for code in languages if code.startswith(base + "-")]
    if not variants or (found := script(text)) is None:
        return language
    return next((code for code in variants if code.endswith("-" + found)), base if base in languages else language)


def size(text: str) -> int:
    """How much of a language a text shows: its characters but for the whitespace at its ends, a wide one (Chinese,
    Japanese, Korean: about a word each) as three; none without a letter."""
    if not any(ch.isalpha() for ch in text):  # "42", "--": no language to see
        return 0
    text = text.strip()
    return len(text) + 2 * sum(unicodedata.east_asian_width(ch) in "WF" for ch in text)


def ranked(texts: list[str], languages: tuple[str, ...]) -> list[tuple[str, float]]:
    """The likeliest languages of `texts` among `languages`, best first: each text's probabilities weighted by its
    size(), as a confidence from 0 to 100. Texts without a letter, or languages the model does not know: "en" (as
    LibreTranslate) where it is among them, else the first, at 0."""
    model, sizes = identifier(languages), [size(t) for t in texts]
    if model is None or not (weight := sum(sizes)):
        return [("en" if "en" in languages or not languages else languages[0], 0.0)]
    scores: dict[str, float] = {}
    for text, n in zip(texts, sizes, strict=True):
        for code, p in model.rank(text) if n else ():
            code = named[languages].get(code, code)
            scores[code] = scores.get(code, 0.0) + p * n / weight
    best = [(code, round(100 * p, 1)) for code, p in sorted(scores.items(), key=lambda item: -item[1])[:TOP]]
    best[0] = (written(best[0][0], " ".join(texts), languages), best[0][1])
    return best[:1] + [(code, c) for code, c in best[1:] if c > 0]


def each(texts: list[str], languages: tuple[str, ...]) -> list[str]:
    """Each text's likeliest language among `languages`: its own probabilities weighted by its size(), and the whole
    request's (ranked()'s, over all the texts) as if it were LEANING more characters of it, so that a short text
    ("Danke", "OK") leans on the texts it came with, and a text of a sentence or more decides for itself. Blank
    texts, and a detector that knows none of the languages: ranked()'s one answer."""
    model = identifier(languages)
    whole = ranked(texts, languages)
    if model is None or len(texts) == 1:
        return [whole[0][0]] * len(texts)
    prior = {code: c / 100 for code, c in whole}
    out = []
    for text in texts:
        if not (weight := size(text)):
            out.append(whole[0][0])
            continue
        scores = {named[languages].get(code, code): p * weight for code, p in model.rank(text)}
        for code, p in prior.items():
            scores[code] = scores.get(code, 0.0) + p * LEANING
        out.append(written(max(scores, key=scores.__getitem__), text, languages))
    return out


async def detect(texts: list[str], languages: tuple[str, ...]) -> list[tuple[str, float]]:
    """ranked(), off the event loop where it is long (_run)."""
    return await _run(ranked, texts, languages)


async def detect_each(texts: list[str], languages: tuple[str, ...]) -> list[str]:
    """each(), off the event loop where it is long (_run)."""
    return await _run(each, texts, languages)


async def _run(fn: Callable[[list[str], tuple[str, ...]], T], texts: list[str], languages: tuple[str, ...]) -> T:
    """fn(texts, languages) on the event loop for short texts once the model is loaded, else on a thread."""
    if languages in restricted and sum(map(len, texts)) <= INLINE_CHARS:
        return fn(texts, languages)
    return await asyncio.to_thread(fn, texts, languages)
