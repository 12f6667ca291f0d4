"""Which glossary terms a text holds (whole words, longest first, optionally in any case), and the token a term
takes the place of."""

from __future__ import annotations

import re

from app.terms import ends_sentence, find, is_stop, occurrences, rendering_token, source_positions
from model.token import Token

GLOSSARY = (("dog", "Rüde"), ("hot dog", "Hotdog"), ("cat", "Katze"), ("New York", "New York City"), ("C++", "C++"))


def test_terms_match_whole_words_in_the_order_they_occur():
    assert find("The cat chases a dog.", GLOSSARY) == [("cat", "Katze"), ("dog", "Rüde")]
    assert find("Dogs and catalogues, a dogma.", GLOSSARY) == []  # not inside longer words
    assert find("A dog, another dog and a third dog.", GLOSSARY) == [("dog", "Rüde")]  # once each


def test_the_longest_term_wins_where_terms_overlap():
    assert find("He eats a hot dog.", GLOSSARY) == [("hot dog", "Hotdog")]
    assert find("A hot dog and a dog.", GLOSSARY) == [("hot dog", "Hotdog"), ("dog", "Rüde")]


def test_multi_word_terms_and_punctuation_in_terms():
    assert find("She flew to New York today.", GLOSSARY) == [("New York", "New York City")]
    assert find("She codes in C++ daily.", GLOSSARY) == [("C++", "C++")]
    # its words apart by any whitespace, as text wraps: two spaces, a line break, a no-break space (HTML's &nbsp;)
    for text in ("She flew to New  York.", "She flew to New\nYork.", "She flew to New\u00a0York."):
        assert find(text, GLOSSARY) == [("New York", "New York City")], text
    assert find("She flew to New York.", (("New   York", "NYC"),)) == [("New   York", "NYC")]


def test_case_is_kept_unless_the_request_ignores_it():
    assert find("A Dog and a CAT.", GLOSSARY) == []
    assert find("A Dog and a CAT.", GLOSSARY, ignore_case=True) == [("dog", "Rüde"), ("cat", "Katze")]
    assert find("in new york", GLOSSARY, ignore_case=True) == [("New York", "New York City")]
    # case folding's ß: "Straße" in capitals is "STRASSE" (or "STRAẞE"), and the other way round
    for text in ("Die STRASSE ist nass.", "Die Strasse ist nass.", "Die STRAẞE ist nass.", "die straße ist nass"):
        assert find(text, (("Straße", "street"),), ignore_case=True) == [("Straße", "street")], text
        assert find(text, (("STRASSE", "street"),), ignore_case=True) == [("STRASSE", "street")], text
    assert find("Die STRASSE ist nass.", (("Straße", "street"),)) == []


def test_a_decomposed_term_or_text_matches_its_composed_form_as_the_model_reads_both():
    glossary = [("café", "Kaffeehaus"), ("nai\u0308ve", "naiv")]
    for text in ("A cafe\u0301 and a naïve dog.", "A café and a nai\u0308ve dog."):
        assert find(text, glossary) == glossary, text
        assert find(text.upper(), glossary, ignore_case=True) == glossary, text


def test_blank_terms_and_texts_match_nothing():
    assert find("a dog", (("", "x"), ("  ", "y"), ("dog", " "))) == []
    assert find("   ", GLOSSARY) == []
    assert find("a (dog) [cat]", (("(dog)", "x"),)) == [("(dog)", "x")]  # regex characters are literal


def test_the_rendering_token_skips_the_words_the_model_adds_in_front():
    ids = [10, 11, 12, 13]
    assert rendering_token("dog", ids[:2], ["▁Ein", "▁Hund"]) == 11  # "Ein Hund": the article goes
    assert rendering_token("dog", ids[:3], ["▁Hund", "e", "."]) == 10  # one word, its first piece
    assert rendering_token("red hat", ids[:2], ["▁roter", "▁Hut"]) == 10  # as many words as the term
    assert rendering_token("dog", ids[:1], ["."]) is None  # no word at all
    assert rendering_token("dog", [], []) is None


def test_each_occurrence_of_a_term_names_the_source_tokens_it_overlaps():
    text = "A hot dog, a dog and a cat."
    found = occurrences(text, GLOSSARY)
    assert [(entry, text[a:b]) for entry, a, b in found] == [
        (("hot dog", "Hotdog"), "hot dog"), (("dog", "Rüde"), "dog"), (("cat", "Katze"), "cat"),
    ]  # fmt: skip
    words = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", text)]
    tokens = [Token(0, "<2de>", 0, 0, True)] + [Token(9, text[a:b], a, b, False) for a, b in words]
    tokens.append(Token(1, "</s>", len(text), len(text), True))
    # token 0 is a language code: positions count it, as the encoder's input has it
    assert source_positions(text, tokens, found) == {
        "Hotdog": frozenset({2, 3}), "Rüde": frozenset({6}), "Katze": frozenset({9}),
    }  # fmt: skip
    decomposed = "A cafe\u0301 dog."  # offsets into the composed text are not the tokens': no positions
    assert source_positions(decomposed, tokens, occurrences(decomposed, GLOSSARY)) == {}


def test_what_ends_a_sentence_and_the_tokens_that_do():
    assert all(map(ends_sentence, ["A dog.", "Ein Hund!  ", 'He said "no."', "Warum?)", "犬。", "Un chien…"]))
    assert not any(map(ends_sentence, ["A dog", "", "   ", "3.5 m", "a dog,", "(a dog)"]))
    assert all(map(is_stop, [".", "▁.", "!", "?", "▁?", '."', "…", "。"]))
    assert not any(map(is_stop, ["▁", "", ",", "s.", "▁Hund", ")", "..a"]))
