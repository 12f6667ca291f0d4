"""app/languages.py: what a request may call a language, for each family's codes (NLLB-200's `deu_Latn`, M2M100's
`de`, mBART-50's `de_DE`), and the refusals that list what the model has."""

from __future__ import annotations

import pytest

from app.languages import BIBLIOGRAPHIC, ISO_639_1, Languages, UnknownLanguage, english_name
from model.multilingual_tokenizer import M2M100_LANGUAGES, MBART50_LANGUAGES

NLLB = [
    "arb_Arab", "ary_Arab", "azb_Arab", "azj_Latn", "deu_Latn", "eng_Latn", "fra_Latn", "heb_Hebr", "kas_Arab",
    "kas_Deva", "pan_Guru", "pes_Arab", "por_Latn", "prs_Arab", "srp_Cyrl", "tgl_Latn", "yue_Hant", "zho_Hans",
    "zho_Hant", "zsm_Latn",
]  # fmt: skip
FAMILIES = {
    "nllb": Languages(NLLB),
    "m2m100": Languages(M2M100_LANGUAGES["m2m100"]),
    "mbart50": Languages(MBART50_LANGUAGES),
}
CASES = [  # name: what each family's model takes it for (None: a 422)
    ("de", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),
    ("deu", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),
    ("de-AT", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),
    ("de_DE", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),
    ("__de__", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),
    ("EN", {"nllb": "eng_Latn", "m2m100": "en", "mbart50": "en_XX"}),
    ("ger", {"nllb": "deu_Latn", "m2m100": "de", "mbart50": "de_DE"}),  # ISO 639-2/B's, as `deu` is 639-2/T's
    ("FRE", {"nllb": "fra_Latn", "m2m100": "fr", "mbart50": "fr_XX"}),
    ("chi", {"nllb": "zho_Hans", "m2m100": "zh", "mbart50": "zh_CN"}),
    ("per", {"nllb": "pes_Arab", "m2m100": "fa", "mbart50": "fa_IR"}),
    ("pt-BR", {"nllb": "por_Latn", "m2m100": "pt", "mbart50": "pt_XX"}),
    ("iw", {"nllb": "heb_Hebr", "m2m100": "he", "mbart50": "he_IL"}),
    ("ar", {"nllb": "arb_Arab", "m2m100": "ar", "mbart50": "ar_AR"}),
    ("zh", {"nllb": "zho_Hans", "m2m100": "zh", "mbart50": "zh_CN"}),
    ("zh-CN", {"nllb": "zho_Hans", "m2m100": "zh", "mbart50": "zh_CN"}),
    ("zh-Hans", {"nllb": "zho_Hans", "m2m100": "zh", "mbart50": "zh_CN"}),
    ("zh-TW", {"nllb": "zho_Hant", "m2m100": None, "mbart50": None}),  # theirs is Simplified (CLDR's `zh`)
    ("zh-Hant", {"nllb": "zho_Hant", "m2m100": None, "mbart50": None}),
    ("fil", {"nllb": "tgl_Latn", "m2m100": "tl", "mbart50": "tl_XX"}),
    ("ms", {"nllb": "zsm_Latn", "m2m100": "ms", "mbart50": None}),
    ("sr", {"nllb": "srp_Cyrl", "m2m100": "sr", "mbart50": None}),
    # where several of a model's languages fit: the one CLDR's likely subtags mean, or the region's own
    ("az", {"nllb": "azj_Latn", "m2m100": "az", "mbart50": "az_AZ"}),  # North Azerbaijani, not South
    ("az-IR", {"nllb": "azb_Arab", "m2m100": None, "mbart50": None}),  # South Azerbaijani: Arabic script
    ("az-Arab", {"nllb": "azb_Arab", "m2m100": None, "mbart50": None}),  # their `az` is in Latin script
    ("fa", {"nllb": "pes_Arab", "m2m100": "fa", "mbart50": "fa_IR"}),  # Iranian Persian
    ("fa-AF", {"nllb": "prs_Arab", "m2m100": "fa", "mbart50": "fa_IR"}),  # Dari
    ("prs", {"nllb": "prs_Arab", "m2m100": "fa", "mbart50": "fa_IR"}),
    ("ks", {"nllb": "kas_Arab", "m2m100": None, "mbart50": None}),  # Kashmiri is written in Arabic script
    ("ks-Deva", {"nllb": "kas_Deva", "m2m100": None, "mbart50": None}),
    ("pa", {"nllb": "pan_Guru", "m2m100": "pa", "mbart50": None}),
    ("pa-PK", {"nllb": None, "m2m100": None, "mbart50": None}),  # Shahmukhi, which none of them writes
    ("xx", {"nllb": None, "m2m100": None, "mbart50": None}),
]


@pytest.mark.parametrize("name, expected", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_name_resolves_to_the_families_code_or_is_refused_with_what_the_model_has(family, name, expected):
    languages = FAMILIES[family]
    if expected[family] is None:
        refusal = r"does not translate language .* it has \d+ languages|does not write language .* in the \w{4} script"
        with pytest.raises(UnknownLanguage, match=refusal):
            languages.resolve(name)
    else:
        assert languages.resolve(name) == expected[family]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_code_has_a_short_name_that_resolves_back_to_it(family):
    languages = FAMILIES[family]
    for code, name in languages.names.items():
        assert languages.resolve(name) == code
        assert len(name) <= len(code)
    assert FAMILIES["mbart50"].names["de_DE"] == "de" and FAMILIES["nllb"].names["zho_Hant"] == "zh-Hant"


def test_a_name_that_fits_several_codes_is_ambiguous():
    with pytest.raises(UnknownLanguage, match="ambiguous here: it may be srp_Cyrl, srp_Latn"):
        Languages(["srp_Cyrl", "srp_Latn"]).resolve("sr")
    assert Languages(["arb_Arab", "ary_Arab"]).resolve("ar") == "arb_Arab"  # Moroccan Arabic is not `ar`
    with pytest.raises(UnknownLanguage, match="is not a language code"):
        FAMILIES["nllb"].resolve("de; DROP TABLE")


def test_every_code_of_each_family_has_an_english_name():
    """As LibreTranslate's and DeepL's lists give them; M2M100's `ns` (Northern Sotho) was named by its code."""
    for family, languages in FAMILIES.items():
        for code, name in languages.names.items():
            assert english_name(name) not in (name, code), (family, code, name)
    assert english_name("ns") == "Northern Sotho" and english_name("zh-Hant") == "Chinese (Traditional)"
    assert english_name("xx") == "xx" and english_name("not a code") == "not a code"


def test_the_bibliographic_codes_are_langcodes_own():
    """ISO 639-2/B's codes where they differ from 639-2/T's, each the language langcodes reads it as: none missing."""
    import langcodes

    differ = {}
    for two in ISO_639_1:
        language = langcodes.Language.get(two)
        if language.to_alpha3(variant="B") != language.to_alpha3():
            differ[language.to_alpha3(variant="B")] = two
    assert BIBLIOGRAPHIC == differ
    assert all(langcodes.Language.get(b).language == two for b, two in BIBLIOGRAPHIC.items())
