"""app/html/: a page's units to translate, and the page rebuilt around their translations."""

import re
import sys
from collections import Counter
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.html import InlineTag, MalformedHtml, Unit, parse

BLOG = """<!DOCTYPE html>
<!-- saved from url=(0042)https://blog.example.org/2024/05/dogs.html -->
<html lang="en">
<head>
<meta charset="utf-8">
<title>Why dogs love parks &amp; people &mdash; The Dog Blog</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/css/site.css">
<!--[if lt IE 9]><script src="/js/html5shiv.js"></script><![endif]-->
<style>
  body > nav a:hover { color: #c00; }
  .lead::before { content: "\\201C"; }
</style>
<script type="text/javascript">
  var tag = "<b>" + name + "</b>";
  if (a < b && b > c) { document.write("<p>old</p>"); }
</script>
</head>
<body class="post">
<nav class="notranslate">
  <ul>
    <li><a href="/">Home</a>
    <li><a href="/archive/">Archive</a>
    <li><a href="/about/" title="About the author">About</a>
  </ul>
</nav>
<article>
  <h1>Why dogs love parks</h1>
  <p class="byline">By <a href="/authors/jane" rel="author">Jane D&eacute;j&agrave;</a> &middot; 3&nbsp;May&nbsp;2024</p>
  <p class=lead>Every morning, my dog <strong>Rex</strong> waits at the door.
  He knows the <em>park</em> is <b>only <i>five</i> minutes</b> away.</p>
  <figure>
    <img src="/img/rex.jpg" alt="Rex running on the grass" width=640 height='480'>
    <figcaption>Rex in the park, <time datetime="2024-05-03">last Friday</time>.</figcaption>
  </figure>
  <p>To check the weather, run <code>curl wttr.in/Berlin</code> in a terminal.<br>
  Then take an umbrella if it says <span translate="no">Regen</span>.</p>
  <pre>
$ curl wttr.in/Berlin
Weather report: Berlin
  </pre>
  <blockquote cite="https://example.org/quote">
    <p>The better I get to know men, the more I find myself loving dogs.
  </blockquote>
  <p>Copyright &#169; 2024 &amp; all rights reserved. Tel.&#x00A0;555<sup>1</sup></p>
</article>
<footer><p>Made with &hearts; in <abbr title="Berlin, Germany">BER</abbr>.</p></footer>
</body>
</html>
"""

TABLE = """<table class="prices">
  <caption>Opening hours &amp; prices</caption>
  <thead>
    <tr><th scope=col>Day<th scope=col>Hours<th>Price
  <tbody>
    <tr><td>Monday<td>9&ndash;17<td>&euro;5
    <tr><td>Tuesday<td><i>closed</i><td>&mdash;
    <tr class="x"><td colspan="2">Children under 6 go <b>free</b><td>0
</table>
"""

FORM = """<form action="/search" method="get">
  <label for="q">Search the site</label>
  <input type="text" id="q" name="q" placeholder='Dogs, parks, "walks"' aria-label="Search terms">
  <select name="lang">
    <option value="en" selected>English
    <option value="de">German
  </select>
  <textarea name="note" rows="3">Write <b>here</b> &amp; there</textarea>
  <button type="submit">Go <span aria-hidden="true">&rarr;</span></button>
</form>
"""

CARDS = """<div class="cards">
<a class="card" href="/dogs"><h3>Dogs</h3><p>Loyal <b>friends</b>.</p></a>
<p>An icon: <svg width="10" height="10"><circle cx="5" cy="5" r="4"/><text>svg text</text></svg> and more.
<![if !IE]><p>Not IE.</p><![endif]>
<?php echo $x; ?>
</div>\r\n<p>Windows line\r\nendings</p>\r\n"""

FRAGMENT = "Dogs &amp; cats<br/>\n<em>living</em> together &lt;3 &#x1F436; <a name=top></a>"

PAGES = {"blog": BLOG, "table": TABLE, "form": FORM, "cards": CARDS, "fragment": FRAGMENT}
TRANSLATED_ATTRIBUTES = {"alt", "title", "placeholder", "aria-label"}


class Markup(HTMLParser):
    """A page's markup in order: tags with their untranslated attributes, comments, and script and style text."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.seq, self.raw_text, self.in_raw = [], [], None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.seq.append(("<", tag, [(k, v) for k, v in attrs if k not in TRANSLATED_ATTRIBUTES]))
        self.in_raw = tag if tag in ("script", "style") else None

    def handle_startendtag(self, tag, attrs):
        self.seq.append(("<>", tag, [(k, v) for k, v in attrs if k not in TRANSLATED_ATTRIBUTES]))

    def handle_endtag(self, tag):
        self.seq.append(("/", tag))
        self.in_raw = None

    def handle_comment(self, data):
        self.seq.append(("!--", data))

    def handle_data(self, data):
        if self.in_raw:
            self.raw_text.append(data)


def word_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"[^ \t\n\r\f]+", text)]


def upper(text: str) -> tuple[str, list]:
    """The text upper-cased, each word aligned to itself."""
    assert len(text.upper()) == len(text)
    return text.upper(), [(s, s) for s in word_spans(text)]


def reversed_words(text: str) -> tuple[str, list]:
    """The words in reverse order, single-spaced, each aligned to its source word."""
    target, alignment = "", []
    for a, b in reversed(word_spans(text)):
        target += " " if target else ""
        alignment.append(((len(target), len(target) + b - a), (a, b)))
        target += text[a:b]
    return target, alignment


def translate(page: str, fake=upper, aligned: bool = True) -> str:
    doc = parse(page)
    pairs = [fake(u.text) for u in doc.units]
    return doc.render([t for t, _ in pairs], [a for _, a in pairs] if aligned else None)


@pytest.mark.parametrize("name", PAGES)
def test_an_untranslated_page_comes_back_byte_for_byte(name):
    doc = parse(PAGES[name])
    assert doc.render([u.text for u in doc.units]) == PAGES[name]


def test_the_units_are_the_blocks_text_and_the_translatable_attributes():
    texts = [u.text for u in parse(BLOG).units]
    assert texts[:3] == [
        "Why dogs love parks & people — The Dog Blog",
        "Why dogs love parks",
        "By Jane Déjà · 3\xa0May\xa02024",
    ]
    assert "Every morning, my dog Rex waits at the door.\n  He knows the park is only five minutes away." in texts
    assert "Rex running on the grass" in texts and "Berlin, Germany" in texts
    assert (
        "To check the weather, run curl wttr.in/Berlin in a terminal.\n\n  Then take an umbrella if it says Regen."
        in texts
    )
    assert "Copyright © 2024 & all rights reserved. Tel.\xa05551" in texts
    for kept in ("Home", "Archive", "About", "About the author", "$ curl wttr.in/Berlin"):
        assert not any(kept == t or t.startswith(kept) for t in texts), kept
    assert not any("var tag" in t or "color" in t or "saved from" in t for t in texts)
    assert [u.text for u in parse(TABLE).units] == [
        "Opening hours & prices", "Day", "Hours", "Price", "Monday", "9–17", "€5", "Tuesday", "closed", "—",
        "Children under 6 go free", "0",
    ]  # fmt: skip
    assert [u.text for u in parse(FORM).units] == [
        "Search the site", 'Dogs, parks, "walks"', "Search terms", "English", "German", "Go →",
    ]  # fmt: skip


def test_the_translate_attribute_is_inherited_and_can_opt_back_in():
    page = (
        '<pre translate="yes">Hello <b>you</b></pre><pre>ls -l</pre><p translate=no>a <span translate=yes>b</span></p>'
    )
    assert [u.text for u in parse(page).units] == ["Hello you", "b"]
    page = '<div class="box notranslate" title="Box">x <img alt="y"></div><p class=notranslatable>z</p>'
    assert [u.text for u in parse(page).units] == ["z"]


def test_inline_tags_are_spans_of_the_unit_text():
    page = '<p> A <a href="/x">red <i>big</i></a> car<br>and <code>x = 1</code><img src=a.png>. <!-- c --></p>'
    (unit,) = parse(page).units
    assert unit == Unit(
        "A red big car\nand x = 1.",
        (
            InlineTag("a", 2, 9, False),
            InlineTag("i", 6, 9, False),
            InlineTag("br", 13, 14, True),
            InlineTag("code", 18, 23, True),
            InlineTag("img", 23, 23, False),
        ),
    )  # the comment after the text is not in the unit: it stays where it is


@pytest.mark.parametrize("name", PAGES)
def test_a_translation_changes_the_text_and_not_the_markup(name):
    out = translate(PAGES[name])
    assert Markup(out).seq == Markup(PAGES[name]).seq
    assert Markup(out).raw_text == Markup(PAGES[name]).raw_text
    kept = [{i for t in u.tags if t.kept for i in range(t.start, t.end)} for u in parse(PAGES[name]).units]
    expected = [
        "".join(c if i in k else c.upper() for i, c in enumerate(u.text))
        for u, k in zip(parse(PAGES[name]).units, kept)
    ]
    assert [u.text for u in parse(out).units] == expected  # code and translate="no" come back as written


def test_what_is_not_translated_comes_back_as_written():
    out = translate(BLOG)
    for kept in [
        "<!-- saved from url=(0042)https://blog.example.org/2024/05/dogs.html -->",
        '<!--[if lt IE 9]><script src="/js/html5shiv.js"></script><![endif]-->',
        BLOG[BLOG.index("<style>") : BLOG.index("</script>")],
        BLOG[BLOG.index('<nav class="notranslate">') : BLOG.index("</nav>")],
        "<code>curl wttr.in/Berlin</code>",
        '<span translate="no">Regen</span>',
        BLOG[BLOG.index("<pre>") : BLOG.index("</pre>")],
        '<a href="/authors/jane" rel="author">JANE DÉJÀ</a>',
        '<img src="/img/rex.jpg" alt="REX RUNNING ON THE GRASS" width=640 height=\'480\'>',
    ]:
        assert kept in out, kept
    assert (
        "<h1>WHY DOGS LOVE PARKS</h1>" in out
        and "<title>WHY DOGS LOVE PARKS &amp; PEOPLE — THE DOG BLOG</title>" in out
    )
    assert "IN A TERMINAL.<br>\n  THEN" in out
    out = translate(FORM)
    assert '<textarea name="note" rows="3">Write <b>here</b> &amp; there</textarea>' in out
    assert """placeholder='DOGS, PARKS, "WALKS"'""" in out


def test_text_and_attributes_are_escaped():
    doc = parse("<p title='a'>x <b>y</b></p>")
    assert (
        doc.render(['Tom\'s "<b>" & co', "1 < 2 & 3 > 2"])
        == "<p title='Tom&#x27;s \"&lt;b&gt;\" &amp; co'><b>1 &lt; 2 &amp; 3 &gt; 2</b></p>"
    )
    assert parse("<img alt=dog src=x>").render(["a dog"]) == '<img alt="a dog" src=x>'


def test_the_whitespace_around_a_block_is_kept():
    page = "<li>\n   <a href=/>Home</a> page &nbsp;\n</li>"
    (unit,) = parse(page).units
    assert unit.text == "Home page \xa0"
    assert parse(page).render(["Startseite"]) == "<li>\n   <a href=/>Startseite</a>\n</li>"


def test_inline_tags_follow_the_alignment_when_words_move():
    doc = parse('<p>a <b class="c">red</b> car</p>')
    # "ein Auto, rot": ein <- a, Auto <- car, rot <- red
    alignment = [((0, 3), (0, 1)), ((4, 8), (6, 9)), ((8, 9), (6, 9)), ((10, 13), (2, 5))]
    assert doc.render(["ein Auto, rot"], [alignment]) == '<p>ein Auto, <b class="c">rot</b></p>'


def test_reversed_words_keep_their_tags():
    page = '<p>Every <a href="/m">good <b>dog</b> runs</a> <i>far</i> today</p>'
    assert translate(page, reversed_words) == '<p>today <i>far</i> <a href="/m">runs <b>dog</b> good</a> Every</p>'


def test_a_tag_is_widened_to_whole_words():
    doc = parse("<p>the <b>dog</b>s bark</p>")
    # "die Hunde bellen": the subword "Hund" aligned to "dog", "e" to "s"
    alignment = [((0, 3), (0, 3)), ((4, 8), (4, 7)), ((8, 9), (7, 8)), ((10, 16), (9, 13))]
    assert doc.render(["die Hunde bellen"], [alignment]) == "<p>die <b>Hunde</b> bellen</p>"


def test_crossing_ranges_still_nest():
    doc = parse("<p><b>one two</b> <i>three four</i> five</p>")
    # b's words and i's words interleave in the target: "one three two four five"
    alignment = [((0, 3), (0, 3)), ((4, 9), (8, 13)), ((10, 13), (4, 7)), ((14, 18), (14, 18)), ((19, 23), (19, 23))]
    out = doc.render(["one three two four five"], [alignment])
    assert out == "<p><b>one three two</b> <i>four</i> five</p>"


def test_a_tag_without_an_aligned_token_falls_back():
    doc = parse('<p>Read <a href="/more">the rest</a> here</p>')
    only_read = [((0, 5), (0, 4))]  # "Lesen" <- "Read"; nothing aligned to "the rest"
    for alignment in (None, only_read):
        assert doc.render(["Lesen Sie hier weiter"], [alignment]) == '<p><a href="/more">Lesen Sie hier weiter</a></p>'
    two = parse("<p><b>A</b> and <i>B</i> too</p>")
    assert two.render(["X und Y auch"], [[((0, 1), (0, 1))]]) == "<p><b>X</b> <i>und Y auch</i></p>"
    assert two.render(["X und Y auch"]) == "<p><b>X und Y auch</b><i></i></p>"


def test_empty_elements_survive_and_follow_the_word_before_them():
    doc = parse('<p>a dog<img src="d.png"> and <a name="x"></a>a cat</p>')
    # "eine Katze und ein Hund" for "a dog and a cat"
    alignment = [((0, 4), (10, 11)), ((5, 10), (12, 15)), ((11, 14), (6, 9)), ((15, 18), (0, 1)), ((19, 23), (2, 5))]
    assert doc.render(["eine Katze und ein Hund"], [alignment]) == (
        '<p>eine Katze und <a name="x"></a>ein Hund<img src="d.png"></p>'
    )  # the anchor after the space, as it was: "und<a name="x"></a> ein Hund" glued it to the word before
    assert doc.render(["eine Katze und ein Hund"]) == '<p><img src="d.png">eine Katze und ein Hund<a name="x"></a></p>'
    doc = parse('<p>a dog <img src="d.png"> and a cat</p>')  # between two words: a space on each side, as there
    alignment = [((0, 3), (0, 1)), ((4, 8), (2, 5)), ((9, 12), (7, 10)), ((13, 17), (11, 12)), ((18, 23), (13, 16))]
    assert doc.render(["ein Hund und eine Katze"], [alignment]) == '<p>ein Hund <img src="d.png"> und eine Katze</p>'


def test_kept_elements_replace_their_text_in_the_translation():
    doc = parse("<p>Run <code>ls -la</code> to list files</p>")
    assert doc.render(["Führen Sie ls -la aus"]) == "<p>Führen Sie <code>ls -la</code> aus</p>"
    alignment = [((0, 6), (0, 3)), ((7, 10), (0, 3)), ((11, 13), (4, 6)), ((14, 17), (7, 10)), ((18, 21), (14, 18))]
    assert doc.render(["Führen Sie LS -LA aus"], [alignment]) == "<p>Führen Sie <code>ls -la</code> aus</p>"
    assert doc.render(["Dateien auflisten"]) == "<p><code>ls -la</code> Dateien auflisten</p>"


def test_a_kept_element_replaces_no_other_words_and_stays_off_its_siblings():
    doc = parse("<p>Run <code>make all</code> first</p>")
    # "make zuerst all": the code's words are apart, so it is put in before them and "zuerst" stays
    alignment = [((0, 4), (4, 8)), ((5, 11), (18, 23)), ((12, 15), (9, 12))]
    assert doc.render(["make zuerst all"], [alignment]) == "<p><code>make all</code> make zuerst all</p>"
    doc = parse("<p><b>call it</b> with <code>ls</code></p>")
    # "ruf ls damit auf": "ls" is inside the range of <b>, its sibling, so the code goes after it
    alignment = [((0, 3), (0, 4)), ((4, 6), (13, 15)), ((7, 12), (5, 7)), ((13, 16), (0, 4))]
    assert doc.render(["ruf ls damit auf"], [alignment]) == "<p><b>ruf ls damit auf</b> <code>ls</code></p>"


# the bundled model's translations and alignments (target span, source span), nothing aligned to a kept text or only
# with another word
SPACED = [
    (
        "<p>Two dogs <code>x</code> play in the snow.</p>",
        "Zwei Hunde spielen im Schnee.",
        [((0, 4), (0, 3)), ((5, 10), (4, 8)), ((11, 18), (11, 15)), ((19, 21), (16, 18)), ((22, 28), (23, 27)),
         ((28, 29), (27, 28))],
        "<p>Zwei Hunde <code>x</code> spielen im Schnee.</p>",
    ),
    (
        '<p>A man <span translate="no">Bob</span> is riding a bike.</p>',
        "Ein Mann fährt auf einem Fahrrad.",
        [((0, 3), (0, 1)), ((4, 8), (2, 5)), ((9, 14), (13, 19)), ((15, 18), (20, 21)), ((19, 24), (20, 21)),
         ((25, 32), (22, 26)), ((32, 33), (26, 27))],
        '<p>Ein Mann <span translate="no">Bob</span> fährt auf einem Fahrrad.</p>',
    ),
    (
        "<p>A <code>foo</code> dog.</p>",
        "Ein doose Hund.",
        [((0, 3), (0, 1)), ((4, 5), (2, 3)), ((5, 7), (3, 5)), ((7, 9), (6, 9)), ((10, 14), (6, 9)),
         ((14, 15), (9, 10))],
        "<p>Ein <code>foo</code> doose Hund.</p>",
    ),
    (  # attached to the full stop: it stays attached, and the full stop is not replaced
        "<p>Two dogs play in the <code>x</code>.</p>",
        "Zwei Hunde spielen im „MS.",
        [((0, 4), (0, 3)), ((5, 10), (4, 8)), ((11, 18), (9, 13)), ((19, 21), (14, 16)), ((22, 23), (21, 22)),
         ((23, 24), (21, 22)), ((24, 25), (21, 22)), ((25, 26), (21, 22))],
        "<p>Zwei Hunde spielen im <code>x</code>.</p>",
    ),
    (  # attached to a comma: put in before one, it stays attached; before a word, it is not glued to it
        "<p>Run <code>make</code>, then wait.</p>",
        "Führe aus, dann warte.",
        [((0, 5), (0, 3)), ((6, 9), (0, 3)), ((9, 10), (8, 9)), ((11, 15), (10, 14)), ((16, 21), (15, 19)),
         ((21, 22), (19, 20))],
        "<p>Führe aus <code>make</code>, dann warte.</p>",
    ),
    (
        "<p>Run <code>make</code>, then wait.</p>",
        "Führe es aus, dann warte.",
        [((0, 5), (0, 3)), ((6, 8), (4, 8)), ((6, 8), (0, 3)), ((9, 12), (0, 3)), ((12, 13), (8, 9)),
         ((14, 18), (10, 14)), ((19, 24), (15, 19)), ((24, 25), (19, 20))],
        "<p>Führe <code>make</code> es aus, dann warte.</p>",
    ),
    (  # after a word in another element, against an opening quote, and two together
        "<p><b>Two dogs</b> <kbd>x</kbd> <kbd>y</kbd> play.</p>",
        "Zwei Hunde „spielen“.",
        [((0, 4), (0, 3)), ((5, 10), (4, 8)), ((11, 12), (13, 17)), ((12, 19), (13, 17)), ((20, 21), (17, 18))],
        "<p><b>Zwei Hunde</b> <kbd>x</kbd> <kbd>y</kbd> „spielen“.</p>",
    ),
]  # fmt: skip


@pytest.mark.parametrize("page,translation,alignment,out", SPACED)
def test_a_kept_element_keeps_the_spacing_of_its_source_at_a_word_boundary(page, translation, alignment, out):
    assert parse(page).render([translation], [alignment]) == out


def test_a_kept_element_at_an_end_keeps_the_spacing_of_its_source():
    doc = parse("<p>Two dogs <code>x</code> play in the snow.</p>")
    assert doc.render(["Zwei Hunde spielen im Schnee."]) == "<p><code>x</code> Zwei Hunde spielen im Schnee.</p>"
    doc = parse("<p>Two dogs play in the <var>x</var></p>")
    assert doc.render(["Zwei Hunde spielen im Schnee."]) == "<p>Zwei Hunde spielen im Schnee. <var>x</var></p>"
    doc = parse("<p><code>x</code>: two dogs play.</p>")
    assert doc.render(["Zwei Hunde spielen."]) == "<p><code>x</code> Zwei Hunde spielen.</p>"
    doc = parse("<p><code>f</code>(x) runs</p>")
    assert doc.render(["(x) läuft"]) == "<p><code>f</code>(x) läuft</p>"


def test_an_empty_element_aligned_inside_a_sibling_goes_after_it():
    doc = parse("<p>a <b>big red</b> car<img src=x> here</p>")
    # "ein großes Auto rotes hier": <b> spans "großes Auto rotes", the image follows "Auto"
    alignment = [((0, 3), (0, 1)), ((4, 10), (2, 5)), ((11, 15), (10, 13)), ((16, 21), (6, 9)), ((22, 26), (14, 18))]
    out = doc.render(["ein großes Auto rotes hier"], [alignment])
    assert out == "<p>ein <b>großes Auto rotes</b><img src=x> hier</p>"


def test_a_line_break_goes_where_the_translation_breaks_the_line():
    page = "<p>Dogs bark<br>\ncats purr<br/>birds sing</p>"
    doc = parse(page)
    assert doc.units[0].text == "Dogs bark\n\ncats purr\nbirds sing"
    out = doc.render(["Hunde bellen\n\nKatzen schnurren\nVögel singen"])
    assert out == "<p>Hunde bellen<br>\nKatzen schnurren<br/>Vögel singen</p>"


def test_a_translation_that_equals_its_text_keeps_entities_as_written():
    page = "<p>Caf&eacute; &amp; <b>cr&egrave;me</b></p><p>other</p>"
    doc = parse(page)
    assert doc.render(["Café & crème", "anders"]) == "<p>Caf&eacute; &amp; <b>cr&egrave;me</b></p><p>anders</p>"


def test_the_number_of_translations_must_match():
    with pytest.raises(ValueError, match="2 units, 1 translations"):
        parse("<p>a</p><p>b</p>").render(["x"])


@pytest.mark.parametrize(
    "page,message",
    [
        (
            "<p><b><i>x</b></i></p>",
            r"</b> at 1:11 closes <b> \(opened at 1:4\) while <i> \(opened at 1:7\) is still open",
        ),
        ("<div>\n  <p>text</span>\n</div>", r"</span> at 2:10 closes nothing: no <span> is open"),
        ("<p>Hello <b>world</p>", r"</p> at 1:18 closes <p> .* while <b> \(opened at 1:10\)"),
        ("<ul><li>one\n<li><em>two</ul>", r"</ul> at 2:12 closes <ul> .* while <em> \(opened at 2:5\)"),
        ("<div><p>open", r"<div> opened at 1:1 is never closed"),
        ("text <b>bold", r"<b> opened at 1:6 is never closed"),
        ('<p class="x', r"unterminated start tag at 1:1: '<p class=\"x'"),
        ("<p>a</p>\n<img src=x", r"unterminated start tag at 2:1"),
        ("<p>a <!-- note </p>", r"unterminated comment at 1:6"),
        ("<p>a</p", r"unterminated end tag at 1:5: '</p'"),
        ("<script>var a = 1;", r"<script> opened at 1:1 is never closed"),
        ("<br></br>", r"</br> at 1:5 closes nothing"),
    ],
)
def test_malformed_html_says_what_and_where(page, message):
    with pytest.raises(MalformedHtml, match=message):
        parse(page)


@pytest.mark.parametrize(
    "page",
    [
        "<ul><li>one<li>two</ul>",
        "<dl><dt>term<dd>definition<dt>other<dd>more</dl>",
        "<p>one<p>two<div>three</div>",
        "<table><thead><tr><th>a<th>b<tbody><tr><td>1<td>2<tr><td>3<td>4</table>",
        "<select><option>a<optgroup label=g><option>b</select>",
        "<html><head><title>t</title><body><p>text</html>",
        "<p>a<br>b<br/>c <img src=x><input name=q></p><hr>",
        "a < b and c > d",
        "<svg><path d='M0 0'/></svg><p>x</p>",
    ],
)
def test_what_html_allows_is_accepted_and_comes_back(page):
    doc = parse(page)
    assert doc.render([u.text for u in doc.units]) == page


def test_inline_tags_nested_deeper_than_the_recursion_limit_come_back_around_their_words():
    depth = 5 * sys.getrecursionlimit()  # 5,000 by default
    page = "<p>A " + "<b>" * depth + "dog" + "</b>" * depth + "</p>"
    doc = parse(page)
    assert doc.units == [Unit("A dog", (InlineTag("b", 2, 5, False),) * depth)]
    assert doc.render(["A dog"]) == page
    ein_hund = [((0, 3), (0, 1)), ((4, 8), (2, 5))]
    assert doc.render(["Ein Hund"], [ein_hund]) == "<p>Ein " + "<b>" * depth + "Hund" + "</b>" * depth + "</p>"
    assert doc.render(["Ein Hund"]) == "<p>" + "<b>" * depth + "Ein Hund" + "</b>" * depth + "</p>"
    around = "<p>" + "<b>" * depth + "dog" + "</b>" * depth + "</p>"  # tags around the whole text
    assert parse(around).units == [Unit("dog")]
    assert parse(around).render(["Hund"]) == around.replace("dog", "Hund")


def test_deeply_nested_inline_tags_with_text_at_each_level_keep_their_text_in_place():
    depth = 5000
    page = "<p>" + "".join(f"<span>w{i} " for i in range(depth)) + "end" + "</span>" * depth + "</p>"
    (unit,) = parse(page).units
    assert unit.text == " ".join(f"w{i}" for i in range(depth)) + " end"
    assert len(unit.tags) == depth - 1  # the outermost is around the whole text
    assert unit.tags[:2] == (InlineTag("span", 3, len(unit.text), False), InlineTag("span", 6, len(unit.text), False))
    out = translate(page)
    assert out == "<p>" + "".join(f"<span>W{i} " for i in range(depth)) + "END" + "</span>" * depth + "</p>"


def test_deeply_nested_blocks_are_read_and_put_back():
    depth = 5000
    page = "<div>" * depth + "<p>A <b>dog</b></p>" + "</div>" * depth
    assert [u.text for u in parse(page).units] == ["A dog"]
    assert translate(page) == "<div>" * depth + "<p>A <b>DOG</b></p>" + "</div>" * depth
    page = "".join(f"<div>text {i} " for i in range(depth)) + "</div>" * depth  # a unit at each level
    assert [u.text for u in parse(page).units] == [f"text {i}" for i in range(depth)]
    assert translate(page) == "".join(f"<div>TEXT {i} " for i in range(depth)) + "</div>" * depth
    page = "<a href=x>" * 2000 + "<h3>Dogs</h3>" + "</a>" * 2000  # links holding a block: each a block itself
    assert translate(page) == "<a href=x>" * 2000 + "<h3>DOGS</h3>" + "</a>" * 2000


def test_every_line_break_of_a_long_run_comes_back():
    page = "<p>" + "a<br>" * 4000 + "</p>"
    doc = parse(page)
    assert doc.units[0].text == "\n".join(["a"] * 4000)
    assert doc.render(["\n".join(["b"] * 4000)]) == "<p>" + "b<br>" * 4000 + "</p>"
    joined = " ".join(["b"] * 2000) + "\n" + "\n".join(["b"] * 2000)  # fewer line breaks than <br>s
    for alignment in (None, [((0, 1), (0, 1))] * 3):
        out = doc.render([joined], [alignment])
        assert out.count("<br>") == 4000 and out.replace("<br>", "").count("b") == 4000
        assert Markup(out).seq == Markup(page).seq


def test_many_kept_elements_go_back_to_their_own_text():
    page = "<p>" + "".join(f"run <code>ls {i}</code> " for i in range(1000)) + "</p>"
    (unit,) = parse(page).units
    assert translate(page) == "<p>" + "".join(f"RUN <code>ls {i}</code> " for i in range(1000)) + "</p>"
    assert parse(page).render([unit.text.replace("run", "lauf")]) == page.replace("run", "lauf")


def test_an_unterminated_tag_is_an_error_however_much_follows_it():
    with pytest.raises(MalformedHtml, match=r"unterminated start tag at 1:6: '<b <a <a <a <a <a <a <a"):
        parse("<p>a <b " + "<a " * 5000)
    with pytest.raises(MalformedHtml, match=r"unterminated end tag at 1:4: '</</</"):
        parse("<p>" + "</" * 5000)
    with pytest.raises(MalformedHtml, match=r"unterminated comment at 1:4: '<!--<!--<!--"):
        parse("<p>" + "<!--" * 5000)


def test_a_declaration_the_parser_cannot_read_is_malformed_html():
    with pytest.raises(MalformedHtml, match=r"markup the parser could not read at 1:9: expected name token"):
        parse("<p>a <![</ b</p>")


WORDS = st.sampled_from(["dogs", "run", "&amp;", "caf&eacute;", "far", "3&nbsp;km", "&lt;fast&gt;", "x<5", "1.5"])
INLINE = [
    ("<b>", "</b>"),
    ("<I>", "</I>"),
    ('<a href="/x?a=1&amp;b=2" title="Go">', "</a>"),
    ("<span class='s'>", "</span >"),
]
LEAVES = ["<br>", "<img src=a.png alt='A dog'>", "<!-- note -->", "<code>x = 1</code>", "<wbr/>"]
BLOCKS = [("<div>", "</div>"), ("<blockquote class=q>", "</blockquote>"), ('<div translate="no">', "</div>")]
BLOCKS += [('<a href="/card">', "</a>"), ("<pre translate=yes>", "</pre>")]  # a link holding blocks; pre opted in
PARAGRAPHS = [("<p>", "</p>"), ("<h2 id=t>", "</h2>"), ("<li>", ""), ("<td>", "")]


def wrapped(tags, children):
    return st.tuples(st.sampled_from(tags), children).map(lambda t: t[0][0] + t[1] + t[0][1])


def joined(items, sep=" "):
    return st.lists(items, min_size=1, max_size=5).map(sep.join)


def inlines(leaves):
    return st.recursive(WORDS | st.sampled_from(leaves), lambda kids: wrapped(INLINE, joined(kids, "")), max_leaves=8)


# words separated by spaces: every inline tag starts and ends at a word boundary
PHRASES = st.recursive(WORDS, lambda kids: wrapped(INLINE, joined(kids)), max_leaves=8)
INLINES = inlines(LEAVES)


def flow(inline):
    def block(content):
        par = wrapped(PARAGRAPHS, joined(inline, "")).map(
            lambda p: (
                f"<ul>{p}</ul>" if p.startswith("<li>") else f"<table><tr>{p}</table>" if p.startswith("<td>") else p
            )
        )
        return wrapped(BLOCKS, joined(content | par, "\n"))

    return st.recursive(inline | wrapped(PARAGRAPHS[:2], inline), block, max_leaves=6)


PAGE = flow(joined(INLINES, " "))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(PAGE)
def test_any_well_formed_page_comes_back_byte_for_byte(page):
    doc = parse(page)
    assert doc.render([u.text for u in doc.units]) == page


@SETTINGS
@given(PAGE, st.data())
def test_any_translation_gives_balanced_html_with_every_tag(page, data):
    doc = parse(page)
    translations, alignments = [], []
    for u in doc.units:
        t = data.draw(st.text(st.sampled_from("ab Z<&\"'\n."), min_size=1, max_size=20).map(lambda t: f"w{t}w"))
        translations.append(t)
        span = st.tuples(st.integers(0, len(t)), st.integers(0, len(t))).map(sorted).map(tuple)
        src = st.tuples(st.integers(0, len(u.text)), st.integers(0, len(u.text))).map(sorted).map(tuple)
        alignments.append(data.draw(st.none() | st.lists(st.tuples(span, src), max_size=8)))
    out = doc.render(translations, alignments)
    parse(out)  # balanced: raises MalformedHtml otherwise
    assert Counter(map(str, Markup(out).seq)) == Counter(map(str, Markup(page).seq))


@SETTINGS
@given(flow(joined(inlines([leaf for leaf in LEAVES if "code" not in leaf]), " ")), st.data())
def test_words_moved_with_their_alignment_all_come_back_in_balanced_html(page, data):
    doc = parse(page)
    pairs = []
    for u in doc.units:  # the words in any order, each aligned to itself
        spans = word_spans(u.text)
        order = data.draw(st.permutations(spans))
        starts = [sum(b - a + 1 for a, b in order[:i]) for i in range(len(order))]
        target = " ".join(u.text[a:b] for a, b in order)
        pairs.append((target, [((x, x + b - a), (a, b)) for x, (a, b) in zip(starts, order)]))
    out = doc.render([t for t, _ in pairs], [a for _, a in pairs])
    assert Counter(map(str, Markup(out).seq)) == Counter(map(str, Markup(page).seq))
    back = Counter(w for u in parse(out).units for w in u.text.replace("\n", "").split())  # less the <br>s' "\n"
    assert back == Counter(w for t, _ in pairs for w in t.split())


@SETTINGS
@given(flow(joined(st.recursive(WORDS, lambda kids: wrapped(INLINE, joined(kids, "")), max_leaves=8), " ")), st.data())
def test_no_translated_text_is_lost(page, data):
    doc = parse(page)
    translations = [
        data.draw(st.text(st.sampled_from("ab Z<&\"'."), max_size=20).map(lambda t: f"w{t}w")) for _ in doc.units
    ]
    assert Counter(u.text for u in parse(doc.render(translations)).units) == Counter(translations)


@SETTINGS
@given(joined(PHRASES))
def test_tags_wrap_the_same_words_when_the_alignment_moves_them(phrase):
    page = f"<p>{phrase}</p>"
    unit = parse(page).units[0]  # the paragraph's (then a link's title)
    assume(reversed_words(unit.text)[0] != unit.text)  # a translation equal to the text comes back as written
    out = translate(page, reversed_words)
    assert inner_texts(out) == Counter(
        (tag, " ".join(reversed(text.split(" ")))) for tag, text in inner_texts(page).elements()
    )


def inner_texts(page: str) -> Counter:
    """Each start tag as written with the decoded text inside its element."""

    class Inner(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.open, self.done = [], Counter()

        def handle_starttag(self, tag, attrs):
            self.open.append([self.get_starttag_text(), ""])

        def handle_endtag(self, tag):
            self.done[tuple(self.open.pop())] += 1

        def handle_data(self, data):
            for o in self.open:
                o[1] += data

    p = Inner()
    p.feed(page.removeprefix("<p>").removesuffix("</p>"))
    p.close()
    return p.done


def test_a_span_alone_in_an_element_takes_the_whitespace_beside_it_and_goes_where_the_span_alone_would():
    """Found by black-box testing: `Visit <b>{name}</b> now.` read "Visit  now." (each text run was masked on its
    own: the whitespace on both sides of the element stayed), the model wrote its own words for the second space, and
    the element, placed as an empty one by them, went after the sentence's full stop (or onto the next line)."""
    from app.protect.spans import protection

    protect = protection(True, None, None)
    units = [u.text for u in parse(
        "<p>Visit <b>{name}</b> now.</p><p>A dog <i><b>{x}</b></i>.</p><p>Visit <b>{name}</b>now.</p>"
        "<p>Hello <b>world</b> {name}. Two dogs play.</p>", protect).units]  # fmt: skip
    assert units == ["Visit now.", "A dog.", "Visit now.", "Hello world. Two dogs play."]  # the full stop stays
    doc = parse("<p>Visit <b>{name}</b> now.<br>A boy jumps.</p>", protect)
    # "Vison Nebow.\nEin Junge springt." for "Visit now.\nA boy jumps."
    alignment = [((0, 5), (0, 5)), ((6, 11), (6, 9)), ((11, 12), (9, 10)), ((12, 13), (10, 11)), ((13, 16), (11, 12)),
                 ((17, 22), (13, 16)), ((23, 30), (17, 22)), ((30, 31), (22, 23))]  # fmt: skip
    out = doc.render(["Vison Nebow.\nEin Junge springt."], [alignment])
    assert out == "<p>Vison <b>{name}</b> Nebow.<br>Ein Junge springt.</p>"  # after "Vison", spaced as in the source
    assert parse("<p>Visit <b>{name}</b> now.</p>", protect).render(["Visit now."]) == "<p>Visit <b>{name}</b> now.</p>"


def test_a_span_in_a_withheld_sentence_is_left_out_with_it_and_one_between_sentences_stays():
    from app.protect.spans import protection

    protect = protection(True, None, None)
    doc = parse("<p>Hello <b>world {a}</b> {name}. Two dogs. {b} A cat.</p>", protect)
    assert doc.units[0].text == "Hello world. Two dogs. A cat."
    # the first sentence withheld (an empty target span), "Zwei Hunde. Eine Katze." for the rest
    alignment = [((0, 0), (0, 12)), ((0, 4), (13, 16)), ((5, 10), (17, 21)), ((10, 11), (21, 22)),
                 ((12, 16), (23, 24)), ((17, 22), (25, 28)), ((22, 23), (28, 29))]  # fmt: skip
    out = doc.render(["Zwei Hunde. Eine Katze."], [alignment])
    assert "{a}" not in out and "{name}" not in out and out.count("{b}") == 1, out
    assert out == "<p><b></b>Zwei Hunde. {b} Eine Katze.</p>", out


def test_an_element_holding_only_a_span_as_a_sentence_of_its_own_takes_its_closing_punctuation():
    """`runs. <b>{x}</b>. A` read "runs. . A" and `runs.<b>{x}</b>. A` "runs.. A": the model kept a stray full stop
    or dropped one. The element takes the punctuation after it, as plain text's group does, and puts it back after
    its end tag wherever it goes; a span after a word does not ("A dog <b>{x}</b>." reads "A dog.")."""
    from app.protect.spans import protection

    protect = protection(True, None, None)
    pages = ["<p>The dog runs. <b>{x}</b>. A man sits.</p>", "<p>The dog runs.<b>{x}</b>! A man sits.</p>",
             "<p>A man sits. <i><b>{x}</b></i>.</p>", "<p>A dog <b>{x}</b>. A man sits.</p>"]  # fmt: skip
    docs = [parse(p, protect) for p in pages]
    assert [d.units[0].text for d in docs] == ["The dog runs. A man sits."] * 2 + ["A man sits.", "A dog. A man sits."]
    assert [d.render([d.units[0].text]) for d in docs] == pages  # its own text: the page as written
    # "Der Hund rennt. Ein Mann sitzt." for "The dog runs. A man sits.": (target span, source span) pairs
    alignment = [((0, 3), (0, 3)), ((4, 8), (4, 7)), ((9, 14), (8, 12)), ((14, 15), (12, 13)), ((16, 19), (14, 15)),
                 ((20, 24), (16, 19)), ((25, 30), (20, 24)), ((30, 31), (24, 25))]  # fmt: skip
    out = [d.render(["Der Hund rennt. Ein Mann sitzt."], [alignment]) for d in docs[:2]]
    assert out == ["<p>Der Hund rennt. <b>{x}</b>. Ein Mann sitzt.</p>", "<p>Der Hund rennt.<b>{x}</b>! Ein Mann sitzt.</p>"]  # fmt: skip
    # placed before the translation's own full stop (its source's unaligned), it does not write a second one
    out = docs[0].render(["Der Hund rennt. Ein Mann sitzt."], [[a for a in alignment if a[1] != (12, 13)]])
    assert out == "<p>Der Hund rennt <b>{x}</b>. Ein Mann sitzt.</p>", out
    # not where the splitter reads on, nor across a line break or &nbsp;: the full stop stays the text's (taken, it
    # joined two sentences, and the element wrote it inside one)
    kept = ["<p>A man is named: <b>{name}</b>. A dog runs.</p>", "<p>A man sees Mr. <b>{x}</b>. A man sits.</p>",
            "<p>The dog runs.\n<b>{x}</b>.\nA man sits.</p>", "<p>The dog runs.&nbsp;<b>{x}</b>. A man sits.</p>",
            "<p>The <i>dog runs</i> <b>{x}</b>. A man sits.</p>"]  # fmt: skip
    assert [parse(p, protect).units[0].text.count(".") for p in kept] == [p.count(".") for p in kept]
