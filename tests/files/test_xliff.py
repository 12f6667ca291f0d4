"""XLIFF 1.2 and 2.0: sources translated into targets, inline codes copied exactly once, states set."""

from __future__ import annotations

import pytest
from lxml import etree

from app.files import FORMATS, FileLimits
from app.files.xliff import reader
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, refused_quickly

pytestmark = pytest.mark.anyio
NS1 = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
NS2 = {"x": "urn:oasis:names:tc:xliff:document:2.0"}

XLIFF12 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- exported by a CAT tool -->
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" datatype="html" original="park.html">
    <body>
      <trans-unit id="1">
        <source>A man in a <g id="1" ctype="bold">red shirt</g> is walking his dog.</source>
      </trans-unit>
      <trans-unit id="2">
        <source>Two women<x id="2" ctype="lb"/> are sitting on a bench in the <ph id="3">&lt;br/&gt;</ph>park.</source>
      </trans-unit>
      <group id="brands" translate="no">
        <trans-unit id="3">
          <source>A brand name.</source>
        </trans-unit>
      </group>
      <trans-unit id="4">
        <source>A woman is cooking in a kitchen.</source>
        <target state="translated">Eine Frau kocht in einer Küche.</target>
      </trans-unit>
      <trans-unit id="5">
        <source><bpt id="5">&lt;b&gt;</bpt>A boy<ept id="5">&lt;/b&gt;</ept> is jumping into the <mrk mtype="protected">Pool</mrk>.</source>
        <target/>
      </trans-unit>
    </body>
  </file>
</xliff>
"""
XLIFF20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1">
      <originalData>
        <data id="d1">&lt;br/&gt;</data>
      </originalData>
      <segment>
        <source>A man in a <pc id="1" dataRefStart="d1" dataRefEnd="d1">red shirt</pc> is walking his dog.</source>
      </segment>
      <ignorable><source> </source></ignorable>
      <segment>
        <source>Two dogs are running<ph id="2" dataRef="d1"/> in the snow.</source>
      </segment>
    </unit>
    <unit id="u2" translate="no">
      <segment><source>Keep me.</source></segment>
    </unit>
    <unit id="u3">
      <segment state="final">
        <source>A girl is reading.</source>
        <target>Ein Mädchen liest.</target>
      </segment>
      <segment><source><sc id="3"/>A boy<ec startRef="3"/> swims with {count} friends.</source></segment>
    </unit>
  </file>
</xliff>
"""


async def marked(units):
    return [f"DE {u.text}" for u in units]


def inline(el) -> list[tuple]:
    """The inline codes of a source or target: each one's name and attributes, and all of it as written but for an
    element around text (whose text is translated)."""
    around = {"g", "pc"}
    return sorted(
        (
            c.tag,
            sorted(c.attrib.items()),
            b"" if etree.QName(c).localname in around else etree.tostring(c, with_tail=False),
        )
        for c in el.iter()
        if c is not el
    )


@pytest.mark.parametrize("text", [XLIFF12, XLIFF20, XLIFF12.replace("\n", "\r\n")])
async def test_identity_gives_the_file_back(text):
    assert await translated("xliff", text.encode(), identity) == text.encode()


async def test_xliff12_units_get_targets_for_review_with_every_inline_code_once(bundled):
    out = etree.fromstring(await translated("xliff", XLIFF12.encode(), bundled))
    units = {u.get("id"): u for u in out.iterfind(".//x:trans-unit", NS1)}
    assert units["3"].find("x:target", NS1) is None  # translate="no" on its group
    assert etree.tostring(units["4"].find("x:target", NS1)) == etree.tostring(
        etree.fromstring(XLIFF12.encode()).find(".//x:trans-unit[@id='4']/x:target", NS1)
    )  # translated before: as it was
    for i in "125":
        source, targets = units[i].find("x:source", NS1), units[i].findall("x:target", NS1)
        assert len(targets) == 1
        assert targets[0].get("state") == "needs-review-translation"
        assert targets[0].get("state-qualifier") == "mt-suggestion"
        assert inline(targets[0]) == inline(source)  # each code, its attributes and content, once
        assert_german("".join(targets[0].itertext()))
    target = units["5"].find("x:target", NS1)
    assert [etree.QName(c).localname for c in target] == ["bpt", "ept", "mrk"]  # the pair in order, around words
    assert target.find("x:mrk", NS1).text == "Pool"


async def test_xliff20_segments_are_translated_and_marked_translated(bundled):
    out = etree.fromstring(await translated("xliff", XLIFF20.encode(), bundled))
    segments = out.findall(".//x:segment", NS2)
    assert len(segments) == 5
    assert segments[2].find("x:target", NS2) is None  # translate="no" on its unit
    assert segments[3].find("x:target", NS2).text == "Ein Mädchen liest."  # final, kept
    for segment in (segments[0], segments[1], segments[4]):
        source, targets = segment.find("x:source", NS2), segment.findall("x:target", NS2)
        assert len(targets) == 1 and segment.get("state") == "translated"
        assert inline(targets[0]) == inline(source)
        assert_german("".join(targets[0].itertext()))
    assert "{count}" in "".join(segments[4].find("x:target", NS2).itertext())  # a placeholder, kept
    assert [etree.QName(c).localname for c in segments[4].find("x:target", NS2)] == ["sc", "ec"]
    assert out.find(".//x:ignorable/x:source", NS2).text == " "


async def test_existing_targets_are_kept_unless_the_caller_overwrites_and_the_language_is_set():
    kept = FORMATS["xliff"].read(XLIFF12.encode(), FileLimits())
    assert len(kept.units) == 3 and all(u.placeholders for u in kept.units)
    every = reader(overwrite=True, language="de")(XLIFF12.encode(), FileLimits())
    assert len(every.units) == 4  # the translated one too; never translate="no"
    out = etree.fromstring(every.write(await marked(every.units)))
    assert out.find("x:file", NS1).get("target-language") == "de"
    assert out.find(".//x:trans-unit[@id='4']/x:target", NS1).text == "DE A woman is cooking in a kitchen."
    assert len(out.findall(".//x:trans-unit[@id='4']/x:target", NS1)) == 1


async def test_a_unit_whose_translation_is_its_source_is_left_as_it_was():
    xliff = FORMATS["xliff"].read(XLIFF20.encode(), FileLimits())
    out = etree.fromstring(xliff.write([u.text if i else f"DE {u.text}" for i, u in enumerate(xliff.units)]))
    segments = out.findall(".//x:segment", NS2)
    assert segments[0].find("x:target", NS2) is not None and segments[1].find("x:target", NS2) is None
    assert segments[1].get("state") is None


SEGMENTED = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" datatype="plaintext" original="s.txt">
    <body>
      <trans-unit id="1">
        <source>A man in a <g id="1">red shirt</g> is walking. Two dogs are running.  A girl reads.</source>
        <seg-source><mrk mtype="seg" mid="1">A man in a <g id="1">red shirt</g> is walking.</mrk> <mrk mtype="seg" \
mid="2">Two dogs are running.</mrk>  <mrk mtype="seg" mid="3">A girl reads.</mrk></seg-source>
        <note>segmented by the CAT tool</note>
      </trans-unit>
    </body>
  </file>
</xliff>
""".replace("\\\n", "")


async def test_a_segmented_unit_has_each_segment_translated_in_a_target_that_mirrors_its_seg_source():
    """Okapi's and Trados' XLIFF: a seg-source of <mrk mtype="seg"> segments; the target has the same segments, by mid,
    each segment's translation in its own, the text between them as written (a segment whose translation is its
    source stays as written)."""
    xliff = FORMATS["xliff"].read(SEGMENTED.encode(), FileLimits())
    assert len(xliff.units) == 3 and "red shirt</span> is walking." in xliff.units[0].text
    assert [u.text for u in xliff.units[1:]] == ["Two dogs are running.", "A girl reads."]
    out = etree.fromstring(xliff.write([f"DE {u.text}" if i != 2 else u.text for i, u in enumerate(xliff.units)]))
    unit = out.find(".//x:trans-unit", NS1)
    assert [etree.QName(c).localname for c in unit] == ["source", "seg-source", "target", "note"]
    target = unit.find("x:target", NS1)
    assert target.get("state") == "needs-review-translation"
    marks = target.findall("x:mrk", NS1)
    assert [(m.get("mtype"), m.get("mid")) for m in marks] == [("seg", "1"), ("seg", "2"), ("seg", "3")]
    assert ["".join(m.itertext()) for m in marks] == [
        "DE A man in a red shirt is walking.", "DE Two dogs are running.", "A girl reads.",
    ]  # fmt: skip
    assert [m.tail for m in marks] == [" ", "  ", None]
    assert marks[0].find("x:g", NS1).get("id") == "1"  # the segment's inline code, inside its segment
    assert unit.find("x:seg-source", NS1) is not None and len(unit.find("x:seg-source", NS1)) == 3


@pytest.mark.parametrize(
    "data, message",
    [
        (
            b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>\n<xliff/>',
            "line 2 .* DOCTYPE or ENTITY declaration",
        ),
        (
            b'<xliff version="1.2"><file><body><trans-unit id="1"><source>A</source></body></file></xliff>',
            "not well-formed XML: .*trans-unit",
        ),
        (
            b'<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2"><file>caf\xe9</file></xliff>',
            "not well-formed",
        ),
        (b"<html><body/></html>", "not XLIFF: its root element is <html>"),
        (b'<xliff version="3.0"/>', "version '3.0' is not supported"),
        (b"", "not well-formed"),
    ],
)
def test_malformed_files_are_refused_saying_where(data, message):
    with pytest.raises(ValueError, match=message):
        FORMATS["xliff"].read(data, FileLimits())


def test_hostile_files_are_refused_or_read_in_linear_time():
    many = "".join(f'<trans-unit id="{i}"><source>A dog.</source></trans-unit>' for i in range(100_000))
    data = f'<xliff version="1.2"><file><body>{many}</body></file></xliff>'.encode()
    assert "the limit is 1000" in str(refused_quickly("xliff", data, FileLimits(max_units=1000)))
    laughs = b'<!DOCTYPE x [<!ENTITY a "' + b"a" * 1000 + b'">' + b"".join(
        b'<!ENTITY %c "%s">' % (98 + i, b"&%c;" % (97 + i) * 10) for i in range(20)
    ) + b"]><xliff>&u;</xliff>"  # fmt: skip
    assert "DOCTYPE" in str(refused_quickly("xliff", laughs))
    deep = b'<xliff version="1.2"><file><body><trans-unit id="1"><source>' + b"<g>" * 100_000
    assert "not well-formed" in str(refused_quickly("xliff", deep))
