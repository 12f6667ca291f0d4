"""Protected spans (app/protect/): found leftmost-longest, masked out of what the model reads, and put back by the
alignment, each exactly once and as written."""

from __future__ import annotations

import pytest

from app.engine.errors import InputTooLong, InvalidRequest
from app.protect.masking import mask
from app.protect.spans import KINDS, Protect, protection
from app.schemas import TranslateRequest
from app.text.protected import protect_documents


def spans_of(p: Protect, text: str) -> list[str]:
    return [text[a:b] for a, b in p.spans(text)]


def links(masked: str, target: str, pairs: list[tuple[str, str]]) -> list:
    """An alignment from (target word, source word) pairs: each word's first occurrence."""
    return [
        ((target.index(t), target.index(t) + len(t)), (masked.index(s), masked.index(s) + len(s))) for t, s in pairs
    ]


def restored(text: str, target: str, pairs: list[tuple[str, str]], p: Protect | None = None) -> str:
    m = mask(text, (p or protection(True, None, None)).spans(text))
    return m.restore(target, links(m.text, target, pairs)).text


# ---- finding ---------------------------------------------------------------------------------------------------------


def test_each_built_in_kind_finds_its_spans():
    p = protection(True, None, None)
    assert spans_of(p, "Hi {name}, {{ user.name }} has {0} of {} and %s, %d, %5.2f, %1$s, %(count)d, ${total}.") == [
        "{name}", "{{ user.name }}", "{0}", "{}", "%s", "%d", "%5.2f", "%1$s", "%(count)d", "${total}"]  # fmt: skip
    assert spans_of(p, 'Click <g id="2">here</g> or <x id="1"/> and <bx id=\'3\'/>, not a <b and c> d.') == [
        '<g id="2">', "</g>", '<x id="1"/>', "<bx id='3'/>"]  # fmt: skip
    assert spans_of(p, "See https://example.com/a?b=1&c=(2). Or (www.example.org), ftp://x.y/z!") == [
        "https://example.com/a?b=1&c=(2", "www.example.org", "ftp://x.y/z"]  # fmt: skip
    assert spans_of(p, "Write to anna.smith+news@example.co.uk, or to bob@x.de.") == [
        "anna.smith+news@example.co.uk", "bob@x.de"]  # fmt: skip
    assert spans_of(p, "Run `ls -l`, ``a `b` c`` or ```\nx = 1\n``` now.") == [
        "`ls -l`",
        "``a `b` c``",
        "```\nx = 1\n```",
    ]
    assert spans_of(p, "100% sure, 50%off, 5 % d, a % s") == []  # percentages are not printf conversions


def test_spans_are_leftmost_then_longest_and_never_overlap_across_kinds_terms_and_patterns():
    p = protection(["placeholders", "urls"], ["New York", "York"], [r"York City", r"New York City Hall"])
    assert spans_of(p, "In New York City Hall and York City.") == ["New York City Hall", "York City"]
    assert spans_of(p, "Go to New York City now.") == ["New York"]  # leftmost: the term starts first
    assert spans_of(p, "http://x.org/{id} and {{x}}") == ["http://x.org/", "{id}", "{{x}}"]  # "{" ends a URL
    assert p.spans("a {{x}} b") == [(2, 7)]  # not {x} inside it


def test_terms_are_literal_whole_words_and_case_sensitive():
    p = protection(None, ["Go", "C++", "a.b", "{x}"], None)
    assert spans_of(p, "Go, C++ and a.b, not Google, go, GoGo, axb or a.bc; but id{x}") == ["Go", "C++", "a.b", "{x}"]
    p = protection(None, ["dog", " cat "], None)  # a hyphen or an apostrophe between letters is inside a word
    assert spans_of(p, "The dog's toy, a dog-dog, hot-dog, l'dog; but dog- and 'dog' and a cat.") == [
        "dog", "dog", "cat"]  # fmt: skip


def test_each_kind_is_one_of_the_schemas_kinds():
    field = TranslateRequest.model_fields["protect"].annotation
    assert set(KINDS) == set(field.__args__[1].__args__[0].__args__)


@pytest.mark.parametrize(
    ("kinds", "terms", "patterns", "error", "words"),
    [
        (None, None, ["(a"], InvalidRequest, ["protect_patterns[0]", "not a regular expression RE2 accepts"]),
        (None, None, ["x", "(?<=a)b"], InvalidRequest, ["protect_patterns[1]", "lookaround"]),
        (None, None, [r"(a)\1"], InvalidRequest, ["backreferences"]),
        (None, None, ["a*"], InvalidRequest, ["matches the empty string"]),
        (None, None, [r"\b"], InvalidRequest, ["matches the empty string"]),
        (None, None, ["(?m)^"], InvalidRequest, ["matches the empty string"]),
        (None, None, ["x|"], InvalidRequest, ["matches the empty string"]),
        (None, None, [r"[\pL\pN]{1,50}"], InputTooLong, ["67153 instructions", "the limit is 5000"]),
        (None, None, ["x" * 501], InputTooLong, ["501 characters; the limit is 500"]),
        (None, None, ["a"] * 17, InvalidRequest, ["17 items; the limit is 16"]),
        (None, None, [" "], InvalidRequest, ["protect_patterns[0] is blank"]),
        (None, ["x" * 201], None, InputTooLong, ["protect_terms[0] has 201 characters; the limit is 200"]),
        (None, ["x"] * 257, None, InvalidRequest, ["protect_terms has 257 items; the limit is 256"]),
        (None, ["a", "\t"], None, InvalidRequest, ["protect_terms[1] is blank"]),
        (["emails", "phones"], None, None, InvalidRequest, ["['phones']", "the kinds are"]),
    ],
)  # fmt: skip
def test_limits_say_what_was_wrong_and_what_is_allowed(kinds, terms, patterns, error, words):
    with pytest.raises(error) as e:
        protection(kinds, terms, patterns)
    for w in words:
        assert w in str(e.value)


def test_nothing_to_protect_is_none_and_a_hostile_pattern_runs_in_linear_time():
    assert protection(False, [], None) is None and protection([], None, []) is None
    p = protection(None, None, [r"(a+)+$", r"(x+x+)+y"])  # exponential for a backtracking engine
    assert p.spans("a" * 20_000 + "!") == [] and p.spans("x" * 20_000) == []


# ---- masking ---------------------------------------------------------------------------------------------------------


def test_masking_takes_out_each_group_with_its_whitespace_and_keeps_words_apart():
    p = protection(True, None, None)
    cases = {
        "Hello {name}, welcome": "Hello, welcome",
        "Send {n} files": "Send files",
        "{a} {b} Hello": "Hello",
        "Hello {a}  {b}": "Hello",
        "file{0}name": "file name",
        "({x}) hi": "() hi",
        "Price {c}100": "Price 100",
        "{x}": "",  # nothing left to translate: as written
        "{x}, {y}.": "",
        "one\n{x}\ntwo": "one\ntwo",  # a line break stays one
        "a {x}-{y}/{z} b": "a b",  # punctuation glued to both spans joins them: the model never reads it alone
    }
    for text, masked in cases.items():
        m = mask(text, p.spans(text))
        assert m.reads == masked, text
        assert len(m.groups) == len(text.split("{")) - 1 - ("{a} {b}" in text or "{a}  {b}" in text) - 2 * ("-" in text)


def test_texts_are_split_with_their_spans_out_of_the_splitters_sight():
    p = protection(True, ["Yahoo! Inc"], None)
    texts = ["I use Yahoo! Inc tools {x}. A dog runs. {y} Two cats.", "Run:\n```\nls -l\n```\nA dog runs.", " {z}. "]
    docs, masks = protect_documents(texts, "lines", "en", 20_000, 100, p)
    assert docs.pieces == ["I use Yahoo! Inc tools {x}. A dog runs. {y} Two cats.", "Run:", "A dog runs.", "{z}."]
    docs, masks = protect_documents(texts, "sentences", "en", 20_000, 100, p)
    assert docs.pieces == ["I use Yahoo! Inc tools {x}.", "A dog runs.", "Two cats.", "Run:", "A dog runs.", "{z}."]
    assert [m.reads for m in masks] == ["I use tools.", "A dog runs.", "Two cats.", "Run:", "A dog runs.", ""]
    with pytest.raises(InputTooLong, match="at most 2 at once"):
        protect_documents(texts, "sentences", "en", 20_000, 2, p)
    texts = ["A man holds a {x}. The dog runs. {y}", "A dog runs. {x}. Two cats.", "A dog.\n`x`\n{y} {z}"]
    docs, masks = protect_documents(texts, "sentences", "en", 20_000, 6, p)  # "a {x}." ends a sentence: not "a."
    assert docs.pieces == ["A man holds a {x}.", "The dog runs.", "A dog runs.", "{x}.", "Two cats.", "A dog."]
    assert [m.reads for m in masks] == ["A man holds a.", "The dog runs.", "A dog runs.", "", "Two cats.", "A dog."]


# ---- restoring -------------------------------------------------------------------------------------------------------


def test_a_span_follows_the_translation_of_the_word_before_it():
    assert restored("Hello {name}, welcome", "Hallo, willkommen", [("Hallo", "Hello"), ("willkommen", "welcome")]) == (
        "Hallo {name}, willkommen")  # fmt: skip
    reordered = [("Jetzt", "now"), ("Dateien", "files"), ("senden", "Send")]
    assert restored("Send {n} files now", "Jetzt Dateien senden", reordered) == "Jetzt Dateien senden {n}"
    assert restored("a word{x} more", "ein Wort mehr", [("Wort", "word"), ("ein", "a")]) == "ein Wort{x} mehr"
    compound = [("braun", "brown"), ("weißer", "white"), ("Hund", "dog")]  # a hyphen or apostrophe is inside a word
    assert restored("a brown {x} and white dog", "ein braun-weißer Hund", compound) == "ein braun-weißer {x} Hund"
    assert restored("the {x} water", "l'eau", [("l", "the"), ("eau", "water")]) == "l'eau {x}"


def test_an_opening_tag_goes_in_front_of_the_next_word_and_a_closing_tag_never_before_it():
    pairs = [("Jetzt", "now"), ("hier", "here"), ("klicken", "Click")]
    assert restored('Click <g id="1">here</g> now', "Jetzt hier klicken", pairs) == 'Jetzt <g id="1">hier</g> klicken'
    crossed = restored("x <g>a b</g> y", "Y B A X", [("B", "b"), ("A", "a"), ("X", "x"), ("Y", "y")])
    assert crossed.count("<g>") == crossed.count("</g>") == 1 and crossed.index("<g>") < crossed.index("</g>")
    assert restored("Price {c}100 today", "Heute 100 Preis", [("100", "100"), ("Preis", "Price")]) == (
        "Heute {c}100 Preis")  # fmt: skip


def test_spans_at_either_end_stay_there_around_the_punctuation():
    words = [("Hallo", "Hello"), ("Welt", "world")]
    assert restored("{x} Hello world.", "Hallo Welt.", words) == "{x} Hallo Welt."
    assert restored("Hello world {x}.", "Hallo Welt!", words) == "Hallo Welt {x}!"
    assert restored("Hello world. {x}", "Hallo Welt.", words) == "Hallo Welt. {x}"
    assert restored("¿{x} Hello world?", "¿Hallo Welt?", words) == "¿{x} Hallo Welt?"
    assert restored("{a} {b}: Hello {c} world", "Welt: Hallo", words) == "{a} {b} Welt: Hallo {c}"
    assert restored("{x}, {y}.", "", []) == "{x}, {y}."  # nothing to translate: as written


def test_spaces_around_a_span_are_single_and_never_before_closing_punctuation():
    p, words = protection(True, None, None), [("A", "a"), ("B", "b")]
    assert restored("a {x} b", "A B", words, p) == "A {x} B"
    assert restored("a {x}, b", "A, B", words, p) == "A {x}, B"
    assert restored("a {x} , b", "A, B", words, p) == "A {x}, B"
    assert restored("a{x} b", "A B", words, p) == "A{x} B"
    assert restored("a {x}{y} b", "A B", words, p) == "A {x}{y} B"
    quoted = [("Tasse", "cup"), ("heute", "today"), ("eine", "a")]  # a quote faces by what follows it
    assert restored("a cup {x} today", "eine „Tasse“ heute", quoted, p) == "eine „Tasse {x}“ heute"
    assert restored("a {x} cup today", "eine „Tasse“ heute", quoted, p) == "eine {x} „Tasse“ heute"


def test_with_no_alignment_a_span_goes_its_share_of_the_way_through_at_a_word_boundary():
    m = mask("one two {x} three four", protection(True, None, None).spans("one two {x} three four"))
    assert m.restore("eins zwei drei vier", []).text == "eins zwei {x} drei vier"


def test_the_pieces_of_a_streamed_translation_add_up_to_the_restored_one():
    text = "{a} Hello {b} world {c}"
    m = mask(text, protection(True, None, None).spans(text))
    target = "Hallo Welt"
    back = m.restore(target, links(m.text, target, [("Hallo", "Hello"), ("Welt", "world")]))
    assert back.text == "{a} Hallo {b} Welt {c}"
    assert back.deltas(target, [3, 5, 10]) == ["{a} Hal", "lo {b}", " Welt {c}"]
    assert "".join(back.deltas(target, [10])) == back.text


def test_a_token_that_writes_nothing_keeps_an_empty_span_where_a_span_goes_back_in():
    """Found by the structure fuzzer: an empty target span at the place of an insertion came back inverted ([7, 3])."""
    from app.protect.restoring import Restored

    r = Restored("dog dog", ((3, " dog"),))
    assert r.span((3, 3)) == (7, 7) and r.span((0, 3)) == (0, 3) and r.span((3, 7)) == (7, 11)
    assert all(a <= b for a, b in map(r.span, [(0, 0), (3, 3), (7, 7), (2, 3), (3, 4)]))
