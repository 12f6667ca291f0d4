"""Language codes of a many-to-many model: what a request may call a language, and the model's code it means.

A request may name a language by the model's own code (`deu_Latn`, `de`, `__de__` as M2M100 writes its tokens), by
ISO 639-1, 639-2 or 639-3 (`de`, `ger`, `deu`), or by a BCP 47-like tag with a script or a region (`zh-Hant`,
`sr_Cyrl`, `pt-BR`).
Every spelling goes through one table of ISO 639-1 codes and their 639-3 equivalents, macrolanguages with the
individual languages that NLLB-200 uses for them (`ar`: `ara` and `arb`, `fa`: `fas`, `pes` and `prs`).
A region counts where it names a script (`zh-TW`, `pa-PK`: Shahmukhi, not Gurmukhi) or a language of its own (`fa-AF`:
Dari, `az-IR`: South Azerbaijani); otherwise it is ignored (`pt-BR`). A model's code that names no script (M2M100's
`zh`, mBART-50's `ru_RU`) is in its language's usual script (CLDR's likely subtags), so that `zh-TW` is not
given Simplified Chinese in its place. Where a name fits several of the model's codes,
the one CLDR's likely subtags mean by it is taken (`az`: North Azerbaijani, `ks`: Kashmiri in Arabic script, `zh`:
Simplified); a name that fits none, or several with no such default, is refused with the codes the model does have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, cached_property

# ISO 639-1 -> its ISO 639-3 codes (terminology codes; a macrolanguage first, then the individual languages that
# NLLB-200's codes use for it)
ISO_639_1 = {
    "af": "afr", "ak": "aka", "am": "amh", "ar": "ara arb", "as": "asm", "ay": "aym ayr", "az": "aze azj azb",
    "ba": "bak", "be": "bel", "bg": "bul", "bm": "bam", "bn": "ben", "bo": "bod", "br": "bre", "bs": "bos",
    "ca": "cat", "cs": "ces", "cy": "cym", "da": "dan", "de": "deu", "dz": "dzo", "ee": "ewe", "el": "ell",
    "en": "eng", "eo": "epo", "es": "spa", "et": "est ekk", "eu": "eus", "fa": "fas pes prs", "ff": "ful fuv",
    "fi": "fin", "fj": "fij", "fo": "fao", "fr": "fra", "fy": "fry", "ga": "gle", "gd": "gla", "gl": "glg",
    "gn": "grn gug", "gu": "guj", "ha": "hau", "he": "heb", "hi": "hin", "hr": "hrv", "ht": "hat", "hu": "hun",
    "hy": "hye", "id": "ind", "ig": "ibo", "is": "isl", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat",
    "kg": "kon", "ki": "kik", "kk": "kaz", "km": "khm", "kn": "kan", "ko": "kor", "kr": "kau knc", "ks": "kas",
    "ku": "kur kmr", "ky": "kir", "lb": "ltz", "lg": "lug", "li": "lim", "ln": "lin", "lo": "lao", "lt": "lit",
    "lv": "lav lvs", "mg": "mlg plt", "mi": "mri", "mk": "mkd", "ml": "mal", "mn": "mon khk", "mr": "mar",
    "ms": "msa zsm", "mt": "mlt", "my": "mya", "nb": "nob", "ne": "nep npi", "nl": "nld", "nn": "nno",
    "no": "nor nob", "ny": "nya", "oc": "oci", "om": "orm gaz", "or": "ori ory", "pa": "pan", "pl": "pol",
    "ps": "pus pbt", "pt": "por", "qu": "que quy", "rn": "run", "ro": "ron", "ru": "rus", "rw": "kin", "sa": "san",
    "sc": "srd", "sd": "snd", "sg": "sag", "si": "sin", "sk": "slk", "sl": "slv", "sm": "smo", "sn": "sna",
    "so": "som", "sq": "sqi als", "sr": "srp", "ss": "ssw", "st": "sot", "su": "sun", "sv": "swe", "sw": "swa swh",
    "ta": "tam", "te": "tel", "tg": "tgk", "th": "tha", "ti": "tir", "tk": "tuk", "tl": "tgl", "tn": "tsn",
    "tr": "tur", "ts": "tso", "tt": "tat", "tw": "twi", "ug": "uig", "uk": "ukr", "ur": "urd", "uz": "uzb uzn",
    "vi": "vie", "wo": "wol", "xh": "xho", "yi": "yid ydd", "yo": "yor", "zh": "zho", "zu": "zul",
}  # fmt: skip
# M2M100's Northern Sotho; old ISO 639-1 codes; Filipino, which mBART-50's tl_XX and Google's `tl` mean
ALIASES = {"ns": "nso", "iw": "he", "in": "id", "ji": "yi", "jw": "jv", "fil": "tl"}
# ISO 639-2/B's bibliographic codes, each where it differs from the terminology code (639-2/T, 639-3's) that
# ISO_639_1 has: `fre` is `fra`, `ger` is `deu` (langcodes reads them so too; the list is closed)
BIBLIOGRAPHIC = {
    "alb": "sq", "arm": "hy", "baq": "eu", "bur": "my", "chi": "zh", "cze": "cs", "dut": "nl", "fre": "fr",
    "geo": "ka", "ger": "de", "gre": "el", "ice": "is", "mac": "mk", "mao": "mi", "may": "ms", "per": "fa",
    "rum": "ro", "slo": "sk", "tib": "bo", "wel": "cy",
}  # fmt: skip
# Where a language has several scripts in a model, the one meant without saying (CLDR's likely subtags)
DEFAULT_SCRIPT = {"zho": "Hans", "kas": "Arab", "knc": "Latn", "ace": "Latn", "bjn": "Latn", "min": "Latn", "taq": "Latn"}  # fmt: skip
# Where an ISO 639-1 code covers several individual languages of a model, the one meant without a region
DEFAULT_LANGUAGE = {"az": "azj", "fa": "pes"}
# A region that means a script or a language of its own (or both): zh-TW is Traditional, fa-AF is Dari, az-IR is
# South Azerbaijani in Arabic script
REGIONAL = {
    ("zh", "TW"): (None, "Hant"), ("zh", "HK"): (None, "Hant"), ("zh", "MO"): (None, "Hant"),
    ("zh", "CN"): (None, "Hans"), ("zh", "SG"): (None, "Hans"), ("pa", "PK"): (None, "Arab"),
    ("az", "IR"): ("azb", "Arab"), ("fa", "AF"): ("prs", None),
}  # fmt: skip
TAG = re.compile(r"^_*([A-Za-z]{2,3})(?:[-_]([A-Za-z]{4}))?(?:[-_]([A-Za-z]{2}|\d{3}))?_*$")


class UnknownLanguage(ValueError):
    """A request names a language the model does not have, or names it ambiguously."""


def short(text: str) -> str:
    """A name a request sent, as an error shows it: quoted, cut() (a megabyte of it came back once a model)."""
    return repr(cut(text))


def cut(text: str) -> str:
    """The text, or its first 37 characters and "..." when it has more than 40."""
    return text if len(text) <= 40 else text[:37] + "..."


@cache
def english_name(code: str) -> str:
    """A language code's English name, as CLDR and the IANA registry give it (`de`: German, `zh-Hant`: Chinese
    (Traditional), `ace_Arab`: Acehnese (Arabic), `hne`: Chhattisgarhi); the code itself where they have none."""
    import langcodes  # its names (~30 MB) load when a list of languages is first asked for, not with the server

    base, *rest = re.split("[-_]", code.strip())
    try:
        name = langcodes.Language.get("-".join([ALIASES.get(base.lower(), base), *rest])).display_name()  # M2M's `ns`
    except ValueError:
        return code
    return code if name.startswith("Unknown language") else name


def same(a: str, b: str) -> bool:
    """Whether two codes name one language, ignoring case, region and ISO spelling (`EN`, `en-GB`, `eng`)."""
    first = [re.split("[-_]", c.strip().lower())[0] for c in (a, b)]
    return bool(equivalents(first[0]) & equivalents(first[1]))


def fits(model: str, requested: str) -> bool:
    """Whether a code a request names is a pair model's language (`model`, its metadata's code) as it writes it: the
    same language, in no other script (`zh-TW` is not a `zh` model's, which is Simplified)."""
    return same(model, requested) and other_script(model, requested) is None


def other_script(model: str, requested: str) -> str | None:
    """The script a requested code names (itself or by its region: `zh-TW`) where a model's code (`zh`, Simplified
    by CLDR; `sr-Latn`) is written in another; None where they agree or either says nothing of it."""
    wanted, have = parse(requested), parse(model)
    if wanted is None or wanted[1] is None or have is None:
        return None
    script = have[1] or likely_script(have[0])
    return wanted[1] if script is not None and script != wanted[1] else None


def equivalents(language: str) -> frozenset[str]:
    """Every ISO spelling of a language subtag: `de` -> {de, deu}; `ger` -> {de, deu}; `arb` -> {arb, ar, ara}."""
    language = ALIASES.get(language.lower()) or BIBLIOGRAPHIC.get(language.lower(), language.lower())
    if len(language) == 2:
        return frozenset({language, *ISO_639_1.get(language, "").split()})
    same = {language}
    for two, threes in ISO_639_1.items():
        if language in threes.split():
            same |= {two, *threes.split()}
    return frozenset(same)


def parse(code: str) -> tuple[str, str | None] | None:
    """(language, script) of a model code or tag (`deu_Latn`, `__de__`, `zh-Hant`, `pt-BR`), else None; a region
    that means a script or a language of its own (REGIONAL) gives that script or language (`fa-AF`: `prs`)."""
    m = TAG.match(code.strip())
    if not m:
        return None
    language, script, region = m.group(1).lower(), m.group(2) and m.group(2).title(), m.group(3)
    two = sorted(c for c in equivalents(language) if len(c) == 2)
    meant, implied = next((REGIONAL[t, region.upper()] for t in two if region and (t, region.upper()) in REGIONAL),
                          (None, None))  # fmt: skip
    return meant or language, script or implied


@cache
def likely_script(language: str) -> str | None:
    """The script a language is written in where a code does not say (CLDR's likely subtags: `sr` Cyrillic, `zh`
    Simplified, `pa` Gurmukhi), None where CLDR does not know the language."""
    import langcodes  # its likely subtags: small, read where a many-to-many model's codes are

    try:
        return langcodes.Language.get(language).maximize().script
    except ValueError:
        return None


class Languages:
    """A many-to-many model's language codes (as its tokenizer spells them), and what else names each."""

    def __init__(self, codes: Iterable[str]):
        self.codes = sorted(codes)
        self._parsed = {c: parse(c) for c in self.codes}
        for c, p in self._parsed.items():  # a code without its script (M2M100's `zh`): the language's usual one
            if p is not None and p[1] is None:
                self._parsed[c] = (p[0], likely_script(p[0]))
        self._same = {c: equivalents(p[0]) if p else frozenset() for c, p in self._parsed.items()}

    def resolve(self, name: str, what: str = "language") -> str:
        """The model's code for `name`; UnknownLanguage (a 422) says what the model has when none or several fit."""
        if name in self._parsed:
            return name
        parsed = parse(name)
        if parsed is None:
            raise UnknownLanguage(f"{what} {short(name)} is not a language code; {self.hint()}")
        language, script = parsed
        same = equivalents(language)
        fits = [
            c for c, p in self._parsed.items() if same & self._same[c] and (script is None or p[1] in (None, script))
        ]
        if len(fits) > 1:
            fits = self._usual(fits, language, script)
        if len(fits) == 1:
            return fits[0]
        if fits:
            raise UnknownLanguage(
                f"{what} {short(name)} is ambiguous here: it may be {', '.join(fits)}; send one of them"
            )
        if script is not None and (other := [c for c in self._parsed if same & self._same[c]]):
            raise UnknownLanguage(
                f"this model does not write {what} {short(name)} in the {script} script; it has {', '.join(other)}"
            )
        raise UnknownLanguage(f"this model does not translate {what} {short(name)}; {self.hint()}")

    def _usual(self, fits: list[str], language: str, script: str | None) -> list[str]:
        """Of several codes a name fits, the one it means where there is one: the language itself where the model has
        it (`prs`), a macrolanguage's usual one (`az`: `azj`), in its usual script unless the name gave one (`ks`)."""
        two = sorted(c for c in equivalents(language) if len(c) == 2)
        for meant in (language, *(DEFAULT_LANGUAGE[t] for t in two if t in DEFAULT_LANGUAGE)):
            if narrowed := [c for c in fits if self._parsed[c][0] == meant]:
                fits = narrowed
                break
        if script is None and len(fits) > 1:
            fits = [c for c in fits if self._parsed[c][1] == DEFAULT_SCRIPT.get(self._parsed[c][0])] or fits
        return fits

    def hint(self) -> str:
        shown = ", ".join(self.codes[:20]) + (", ..." if len(self.codes) > 20 else "")
        return f"it has {len(self.codes)} languages: {shown} (GET /models lists them all)"

    @cached_property
    def names(self) -> dict[str, str]:
        """Each code's short name (`short`)."""
        return {c: self.short(c) for c in self.codes}

    def short(self, code: str) -> str:
        """The shortest common name that resolves to `code`: ISO 639-1 where it has one (`de`, `zh`), with the
        script where the language has several here (`zh-Hant`), else the model's own code."""
        parsed = self._parsed.get(code)
        if parsed is None:
            return code
        language, script = parsed
        two = sorted(c for c in equivalents(language) if len(c) == 2 and c not in ALIASES)
        candidates = [*two, *(f"{t}-{script}" for t in two if script), language]
        for name in candidates:
            try:
                if self.resolve(name) == code:
                    return name
            except UnknownLanguage:
                continue
        return code
