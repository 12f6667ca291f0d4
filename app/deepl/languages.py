"""DeepL's language codes (`EN-GB`, `ZH-HANT`) for what the models translate, and the engine for a pair."""

from __future__ import annotations

import re

from app.deepl.errors import DeepLError
from app.engine import EngineUnavailable
from app.languages import ALIASES, BIBLIOGRAPHIC, ISO_639_1, UnknownLanguage, cut, english_name, equivalents, parse
from app.libretranslate import NAMES, listed, many, targets
from app.models import Models, UnknownModel
from app.text import Engine

REGIONS = {  # the target codes DeepL lists for a language with variants, and their names
    "en": {"EN-GB": "English (British)", "EN-US": "English (American)"},
    "es": {"ES": "Spanish", "ES-419": "Spanish (Latin American)"},
    "pt": {"PT-BR": "Portuguese (Brazilian)", "PT-PT": "Portuguese (European)"},
    "zh": {"ZH": "Chinese (simplified)", "ZH-HANS": "Chinese (simplified)", "ZH-HANT": "Chinese (traditional)"},
}


VARIANTS = {"en-gb", "en-us", "es-419", "pt-br", "pt-pt", "zh-hans", "zh-hant"}  # DeepL's codes with a region or script
SCRIPTS = {"zh-hant"}  # a variant of another script than its language's usual one: never that one in its place


def base(code: str) -> str:
    """A DeepL code's language: `EN-GB` -> `en`, `ZH-HANT` -> `zh`."""
    return re.split("[-_]", code.strip().lower())[0]


def deepl_code(code: str) -> str:
    return code.upper()


def iso_code(code: str) -> str:
    """A language code as DeepL writes it, lower case: ISO 639-1 where a request named the language by its ISO 639-3
    or 639-2/B counterpart or an old code (`eng`, `ger` -> `de`, `iw` -> `he`; not `prs`, Dari, which `fa` does not
    mean), else the code itself."""
    code = base(code)
    code = ALIASES.get(code) or BIBLIOGRAPHIC.get(code) or code  # `iw` -> `he`, `ger` -> `de`
    return next((two for two, threes in ISO_639_1.items() if threes.split()[0] == code), code)


def checked(code: str, field: str) -> str:
    """A `source_lang` or `target_lang` as sent, if it is a code DeepL could have: a language's (`DE`, `deu`) or one of
    DeepL's variants (`EN-GB`, `ZH-HANT`); DeepL's 400 otherwise, `auto` too (DeepL has no such code: a source left out
    is detected)."""
    if code.strip().lower() == "auto":
        how = "leave source_lang out to detect the language" if field == "source_lang" else "name a language (DE, FR)"
        raise DeepLError(400, f"Value for '{field}' not supported: {code.strip()}; {how}")
    if code.lower() != base(code) and code.lower() not in VARIANTS:
        shown = code if len(code) <= 20 else f"{code[:20]}…"
        raise DeepLError(
            400, f"Value for '{field}' not supported: {shown}; a language's code (DE, FR) or one of DeepL's "
            f"variants ({', '.join(sorted(v.upper() for v in VARIANTS))})",
        )  # fmt: skip
    return code


def glossary_language(code: str, field: str) -> str:
    """A glossary's `source_lang` or `target_lang` as DeepL keeps it (`de` of `DE` or `deu`): a language's code, as
    DeepL's glossaries have (its clients send `ZH` for `ZH-HANT`); DeepL's 400 for anything else."""
    if checked(code, field).lower() != base(code):
        raise DeepLError(
            400, f"Value for '{field}' not supported: {cut(code)}; a glossary's languages are language codes "
            f"({base(code).upper()}), without a variant",
        )  # fmt: skip
    return iso_code(code)


def name(code: str) -> str:
    return NAMES.get(base(code)) or english_name(code)


def target_variants(models: Models, code: str) -> dict[str, str]:
    """DeepL's target codes for the language `code` (a base code) and their names, as DeepL lists them: English and
    Portuguese as their regions (not EN, PT), Spanish also as Latin American, Chinese in each script a model writes
    (ZH-HANT where one writes Traditional Chinese: not a pair model's `zh`)."""
    variants = REGIONS.get(code, {deepl_code(code): name(code)})
    if any(v.lower() in SCRIPTS for v in variants):
        written = {t.lower() for into in targets(models).values() for t in into}
        variants = {v: n for v, n in variants.items() if v.lower() not in SCRIPTS or v.lower() in written}
    return variants


def glossary_code(code: str) -> str:
    """A stored glossary's language as DeepL names a glossary's, ISO 639-1 where it has one: one made through our
    /glossaries with NLLB's `deu_Latn` is `de` (DeepL's clients showed DEU_LATN)."""
    parsed = parse(code)
    if parsed is None:
        return code.lower()
    two = sorted(c for c in equivalents(parsed[0]) if len(c) == 2)
    return two[0] if two else parsed[0]


def sources(models: Models) -> list[str]:
    """The languages (their DeepL codes' languages, lower case) the loaded models translate from."""
    return list(dict.fromkeys(base(c) for c in targets(models) if named(models, c)))


def pairs(models: Models) -> list[tuple[str, str]]:
    """(source, target) of every language pair the loaded models translate, as base codes."""
    into = targets(models)
    ok = {c for c in {*into, *(t for ts in into.values() for t in ts)} if named(models, c)}
    return list(dict.fromkeys(
        (base(s), base(t)) for s, ts in into.items() if s in ok for t in ts if t in ok and base(s) != base(t)
    ))  # fmt: skip


def named(models: Models, code: str) -> bool:
    """Whether DeepL's code for a language the models have (its base: `az` for `az-Latn`) names it alone: not where a
    many-to-many model has it in several scripts or kinds (NLLB's `azb_Arab` and `azj_Latn`), which /v2/translate
    then could not tell apart."""
    if base(code) == code.lower():
        return True
    for engine in many(models):
        try:
            engine.codes.resolve(base(code))
        except UnknownLanguage:
            if code in listed(engine).values():
                return False
    return True


def engine_for(models: Models, source: str, target: str) -> tuple[Engine, str]:
    """The engine that translates `source` into `target` (DeepL codes), and the target as it names it: a many-to-many
    model reads the variant (`pt-br`, `zh-hant`), a pair model the language. A variant DeepL does not have
    (`FR-FOOBAR`) is its 400, and so is Traditional Chinese where no model writes it (not Simplified instead)."""
    checked(source, "source_lang")
    checked(target, "target_lang")
    why = None
    for code in dict.fromkeys([target.lower()] if target.lower() in SCRIPTS else [target.lower(), base(target)]):
        try:
            return models.pick(None, base(source), code), code
        except UnknownModel as e:
            why = why or str(e)
    if "loading" in models.states().values():
        raise EngineUnavailable(f"no model loaded so far translates {source} into {target}; others are still loading")
    served = {c for pair in pairs(models) for c in pair}
    # ZH-HANT where Chinese is written, but not in its script: the variant is not served, as its language would not be
    if base(target) not in served or target.lower() in SCRIPTS and models.find(None, None, target.lower()) is None:
        raise DeepLError(400, f"Value for 'target_lang' not supported: {cut(target)} ({why})")
    raise DeepLError(400, f"no model here translates {cut(source.upper())} into {cut(target.upper())} ({why})")
