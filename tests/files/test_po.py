"""Gettext catalogues: untranslated msgids translated into fuzzy msgstrs, placeholders and plural forms kept whole."""

from __future__ import annotations

import re
import shutil
import subprocess

import polib
import pytest

from app.files import FORMATS, FileLimits
from app.files.po import reader
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, quickly, refused_quickly

pytestmark = pytest.mark.anyio
MSGFMT = shutil.which("msgfmt")
PLACEHOLDER = re.compile(r"%\([a-z]+\)s|%[ds]|\{[a-z]+\}")

CATALOGUE = r"""# German translation of Park.
msgid ""
msgstr ""
"Project-Id-Version: park 1.0\n"
"Report-Msgid-Bugs-To: \n"
"POT-Creation-Date: 2024-05-01 12:00+0000\n"
"PO-Revision-Date: 2024-05-02 12:00+0000\n"
"Last-Translator: Ann <ann@example.org>\n"
"Language-Team: German <de@example.org>\n"
"Language: de\n"
"MIME-Version: 1.0\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Content-Transfer-Encoding: 8bit\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#. The user's name.
#: park.py:10
#, python-format
msgid "%(name)s is walking a dog in the park."
msgstr ""

#: park.py:12
#, c-format
msgid "A man is holding a ball."
msgid_plural "%d men are holding a ball."
msgstr[0] ""
msgstr[1] ""

#: park.py:14
#, python-brace-format
msgid "A woman is sitting on a bench with {count} children.\n"
msgstr ""

#: park.py:16
#, c-format
msgid "A boy in a red shirt is jumping on a %s."
msgstr ""

msgctxt "menu"
msgid "A dog is running in the snow."
msgstr ""

msgctxt "title"
msgid "Two men are sitting on a bench."
msgstr "Zwei Männer sitzen auf einer Bank."

#, fuzzy
msgid "A girl is climbing a wall."
msgstr "Ein Mädchen klettert."

#~ msgid "An old man is reading a newspaper."
#~ msgstr "Ein alter Mann liest Zeitung."
"""
TEMPLATE = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=CHARSET\\n"\n"Language: \\n"\n\nmsgid "A dog."\nmsgstr ""\n'
LATIN1 = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=ISO-8859-1\\n"\n\nmsgid "Caf\xe9"\nmsgstr ""\n'
RUSSIAN = (
    CATALOGUE.replace(
        "nplurals=2; plural=(n != 1);",
        "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);",
    )
    + '\n#, c-format\nmsgid "%d dog"\nmsgid_plural "%d dogs"\nmsgstr[0] ""\nmsgstr[1] ""\nmsgstr[2] ""\n'
)


async def marked(units):
    return [f"DE {u.text}" for u in units]


def msgfmt_errors(data: bytes, folder) -> str:
    """What `msgfmt --check` finds wrong with a catalogue ("" where msgfmt is not installed), fuzzy entries included:
    --use-fuzzy checks their format strings against the msgid's too."""
    if not MSGFMT:
        return ""
    (folder / "out.po").write_bytes(data)
    run = subprocess.run([MSGFMT, "--check", "--use-fuzzy", "-o", "/dev/null", str(folder / "out.po")],
                         check=False, capture_output=True, text=True, timeout=30)  # fmt: skip
    return "" if run.returncode == 0 else run.stderr


def entries(data: bytes) -> dict[str, polib.POEntry]:
    return {(e.msgctxt or "") + e.msgid: e for e in polib.pofile(data.decode()) if not e.obsolete}


@pytest.mark.parametrize("text", [CATALOGUE, CATALOGUE.replace("\n", "\r\n"), TEMPLATE, "", "\n"])
async def test_identity_gives_the_file_back(text):
    assert await translated("po", text.encode(), identity) == text.encode()


async def test_a_changed_file_keeps_its_line_ends():
    out = await translated("po", CATALOGUE.replace("\n", "\r\n").encode(), marked)
    assert out.count(b"\r\n") == out.count(b"\n") and b'msgstr "DE A dog is running in the snow."\r\n' in out


async def test_identity_gives_a_latin1_file_back():
    assert await translated("po", LATIN1.encode("latin-1"), identity) == LATIN1.encode("latin-1")
    assert "DE Café" in (await translated("po", LATIN1.encode("latin-1"), marked)).decode("latin-1")


async def test_untranslated_entries_are_translated_marked_fuzzy_and_keep_their_placeholders(bundled, tmp_path):
    out = await translated("po", CATALOGUE.encode(), bundled)
    before, after = entries(CATALOGUE.encode()), entries(out)
    assert before.keys() == after.keys()
    for key, source in before.items():
        target = after[key]
        if source.msgstr or source.msgstr_plural.get(0):  # translated before: as it was
            assert (target.msgstr, target.flags) == (source.msgstr, source.flags)
            continue
        assert "fuzzy" in target.flags and set(source.flags) <= set(target.flags)
        pairs = [(source.msgid, target.msgstr)] if not source.msgid_plural else [
            (source.msgid, target.msgstr_plural[0]), (source.msgid_plural, target.msgstr_plural[1])]  # fmt: skip
        for msgid, msgstr in pairs:
            assert_german(msgstr)
            for p in PLACEHOLDER.findall(msgid):
                assert msgstr.count(p) == 1, (p, msgstr)
            assert msgstr.endswith("\n") == msgid.endswith("\n")
    assert out.decode().split("\n\n")[0] == CATALOGUE.split("\n\n")[0]  # the header
    assert out.decode().endswith(
        '#~ msgid "An old man is reading a newspaper."\n#~ msgstr "Ein alter Mann liest Zeitung."\n'
    )
    assert msgfmt_errors(out, tmp_path) == ""


MARKUP = r"""msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

msgid "A man is riding a <strong>red</strong> bike."
msgstr ""

#, python-format
msgid "A dog is running to <a href=\"%(url)s\" class='big'>the park</a> with %(count)s children."
msgstr ""

#, c-format
msgid "A man in a <b>red</b> shirt."
msgid_plural "%d men in <b>red</b> shirts.<br/>"
msgstr[0] ""
msgstr[1] ""

msgid "A dog runs if a < b and c > d."
msgstr ""

msgid "Tom &amp; Jerry&nbsp;<em>run</em>."
msgstr ""
"""
LINK = "<a href=\"%(url)s\" class='big'>"  # its attributes as written, a placeholder among them
CLICK = f"A dog is running to {LINK}the park</a> with %(count)s children."


async def test_html_tags_in_a_msgid_come_back_around_the_translation_as_written(bundled, tmp_path):
    out = await translated("po", MARKUP.encode(), bundled)
    after = entries(out)
    bike = after["A man is riding a <strong>red</strong> bike."].msgstr
    assert re.fullmatch(r"[^<>]+<strong>[^<>]*\w[^<>]*</strong>[^<>]*", bike), bike  # around a word
    click = after[CLICK].msgstr
    assert click.count(LINK) == 1 and click.count("</a>") == 1, click
    assert click.count("%(count)s") == 1 and click.count("<") == 2, click
    plural = after["A man in a <b>red</b> shirt."].msgstr_plural
    assert plural[0].count("<b>") == plural[0].count("</b>") == 1, plural
    assert plural[1].count("<b>") == plural[1].count("</b>") == plural[1].count("<br/>") == 1, plural
    assert plural[1].count("%d") == 1, plural
    for msgstr in (bike, click, *plural.values()):
        assert_german(msgstr)
    assert msgfmt_errors(out, tmp_path) == ""


def test_a_msgid_with_tags_is_a_markup_unit_and_one_without_stays_plain_text():
    units = FORMATS["po"].read(MARKUP.encode(), FileLimits()).units
    assert [(u.text, u.markup) for u in units] == [
        ('A man is riding a <span id="c0">red</span> bike.', True),
        ('A dog is running to <span id="c0">the park</span> with %(count)s children.', True),  # attributes kept out
        ('A man in a <span id="c0">red</span> shirt.', True),
        ('%d men in <span id="c0">red</span> shirts.<img id="c1">', True),
        ("A dog runs if a < b and c > d.", False),  # "<" alone is text, as before
        ('Tom &amp; Jerry\xa0<span id="c0">run</span>.', True),  # the entities read as their characters
    ]
    assert all(u.placeholders for u in units)


async def test_text_and_entities_around_the_tags_come_back_as_written():
    out = entries(await translated("po", MARKUP.encode(), marked))
    assert out["A dog runs if a < b and c > d."].msgstr == "DE A dog runs if a < b and c > d."
    assert out["Tom &amp; Jerry&nbsp;<em>run</em>."].msgstr == "DE Tom &amp; Jerry&nbsp;<em>run</em>."
    assert out[CLICK].msgstr == "DE " + CLICK


async def test_every_plural_form_the_header_asks_for_is_filled(tmp_path):
    out = await translated("po", RUSSIAN.encode(), marked)
    men = "DE %d men are holding a ball."  # Russian's form 0 is for 1, 21, 31, ...: not the singular without its %d
    assert entries(out)["A man is holding a ball."].msgstr_plural == {0: men, 1: men, 2: men}
    assert entries(out)["%d dog"].msgstr_plural == {0: "DE %d dog", 1: "DE %d dogs", 2: "DE %d dogs"}
    german = entries(await translated("po", CATALOGUE.encode(), marked))["A man is holding a ball."].msgstr_plural
    assert german == {0: "DE A man is holding a ball.", 1: men}  # German's form 0 is for 1 alone
    assert msgfmt_errors(out, tmp_path) == ""


async def test_existing_translations_are_kept_unless_the_caller_overwrites():
    kept = FORMATS["po"].read(CATALOGUE.encode(), FileLimits())
    assert [u.text for u in kept.units][-1] == "A dog is running in the snow." and len(kept.units) == 6
    assert all(u.placeholders and not u.markup for u in kept.units)
    every = reader(overwrite=True)(CATALOGUE.encode(), FileLimits())
    assert len(every.units) == 8  # the title and the fuzzy entry too; never the header or an obsolete entry
    out = entries(every.write([f"DE {u.text}" for u in every.units]))
    assert out["titleTwo men are sitting on a bench."].msgstr == "DE Two men are sitting on a bench."


async def test_a_template_gets_the_target_language_when_the_caller_names_it():
    po = reader(language="de")(TEMPLATE.encode(), FileLimits())
    out = polib.pofile(po.write(["Ein Hund."]).decode())
    assert out.metadata["Language"] == "de" and out[0].msgstr == "Ein Hund."


@pytest.mark.parametrize(
    "data, message",
    [
        (b'msgid "A dog\nmsgstr ""\n', "line 1 of the PO file: a string that is not closed"),
        (b'msgid "a"\nmsgstr ""\n\nmsgid "b"\nmsgstr "x\n', "line 5 .* not closed"),
        (b'msgid "a"\n\nmsgid "b"\nmsgstr ""\n', "line 1 of the PO file: a msgid without a msgstr"),
        (b'msgid "a\\q"\nmsgstr ""\n', r"line 1 .* an unknown escape '\\\\q'"),
        (b'msgid "a"\nmsgstr "b"\nA dog.\n', "line 3 .* not a comment"),
        (b'msgid "a"\nmsgstr[0] "x"\nmsgstr "y"\n', "cannot be read: Syntax error in po file \\(line 3\\)"),
        (
            b'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "\xe9"\nmsgstr ""\n',
            "line 4 .* UTF-8",
        ),
        (b'msgid ""\nmsgstr "Content-Type: text/plain; charset=nope\\n"\n', "charset 'nope', which is not known"),
        (b'msgid ""\nmsgstr "Plural-Forms: nplurals=2; plural=n ++ 1;\\n"\n', "Plural-Forms cannot be read"),
        (b"/etc/passwd", "has one line"),  # polib would read the file a one-line string names
        # a 190-byte file asked for 300,000 msgstr[n] a plural entry (10 MB out); a number int() refuses (a 500)
        (b'msgid ""\nmsgstr "Plural-Forms: nplurals=300000; plural=n;\\n"\n', "nplurals=300000; .* at most 6"),
        (b'msgid ""\nmsgstr "Plural-Forms: nplurals=' + b"9" * 5000 + b';\\n"\n', r"nplurals=9{20}…; .* at most 6"),
    ],
)
def test_malformed_files_are_refused_saying_where(data, message):
    with pytest.raises(ValueError, match=message):
        FORMATS["po"].read(data, FileLimits())


def test_an_unreadable_header_is_named_in_a_short_error():
    header = b'msgid ""\nmsgstr "Plural-Forms: nplurals=2; plural=n ++ 1; ' + b"x" * 400_000 + b'\\n"\n'
    with pytest.raises(ValueError, match="cannot be read") as refused:
        FORMATS["po"].read(header, FileLimits())
    assert len(str(refused.value)) < 400


def test_hostile_files_are_refused_or_read_in_linear_time():
    many = "".join(f'msgid "A dog number {i}."\nmsgstr ""\n\n' for i in range(100_000)).encode()
    assert "the limit is 1000" in str(refused_quickly("po", many, FileLimits(max_units=1000)))
    # escapes that a regular expression could split many ways, in a string that is never closed
    assert "not closed" in str(refused_quickly("po", b'msgid "' + b"\\123" * 250_000 + b'\nmsgstr ""\n'))
    assert len(quickly("po", b'msgid "' + b" " * 1_000_000 + b'a"\nmsgstr ""\n').units) == 1
