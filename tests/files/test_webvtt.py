"""WebVTT subtitles: cue text translated; header, NOTE/STYLE/REGION blocks, identifiers, timings and settings kept."""

from __future__ import annotations

import re

import pytest

from app.files import FORMATS, FileLimits
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, quickly, refused_quickly

pytestmark = pytest.mark.anyio

MOVIE = """WEBVTT - Park scenes
Kind: captions
Language: en

NOTE Edited by hand,
two lines of it

STYLE
::cue(.yellow) { color: yellow; }

REGION
id:top width:40% lines:3

intro
00:00:01.000 --> 00:00:04.000 align:start position:10%
<v Roger>A man in a red shirt
is walking his dog in the park.</v>

00:00:04.500 --> 00:00:07.250 region:top
A <c.yellow>little girl</c> is climbing a tree.

2
00:00:08.000 --> 00:00:10.000
<v Anna>Where are the children playing?
<v Ben>In the snow &amp; the rain.

00:11.000 --> 00:13.000
Two dogs <00:00:12.000>are running on the grass.
"""
SAMPLES = [MOVIE, MOVIE.replace("\n", "\r\n"), "\ufeff" + MOVIE.rstrip("\n"), "WEBVTT\n", "WEBVTT"]


def blocks(text: str) -> list[str]:
    return text.strip("\n").split("\n\n")


@pytest.mark.parametrize("text", SAMPLES)
async def test_identity_gives_the_file_back(text):
    assert await translated("vtt", text.encode(), identity) == text.encode()


async def test_cues_are_translated_and_everything_else_kept(bundled):
    out = (await translated("vtt", MOVIE.encode(), bundled)).decode()
    source, target = blocks(MOVIE), blocks(out)
    assert target[:4] == source[:4]  # header, NOTE, STYLE, REGION
    for s, t in zip(source[4:], target[4:]):
        s_lines, t_lines = s.split("\n"), t.split("\n")
        timing = next(i for i, line in enumerate(s_lines) if "-->" in line)
        assert t_lines[: timing + 1] == s_lines[: timing + 1]  # identifier, timing line and settings
        assert len(t_lines) == len(s_lines)
        text = " ".join(t_lines[timing + 1 :])
        assert_german(text)
        for tag in re.findall(r"<[^>]+>", " ".join(s_lines[timing + 1 :])):
            assert text.count(tag) == 1, (tag, text)
    assert "&amp;" in target[6] or "&" not in target[6]  # "&" written as an entity
    assert [line.split(">")[0] for line in target[6].split("\n")[2:]] == ["<v Anna", "<v Ben"]  # one speaker a line


def test_voice_lines_are_units_of_their_own_and_tags_are_inline_codes():
    units = [u.text for u in FORMATS["vtt"].read(MOVIE.encode(), FileLimits()).units]
    assert units[2:4] == ["Where are the children playing?", "In the snow & the rain."]  # no codes: plain text
    assert units[0] == '<span id="c0">A man in a red shirt is walking his dog in the park.</span>'  # <v ..>..</v>


async def test_a_ruby_annotation_is_kept_as_written_after_its_words_and_never_read_as_the_sentence(bundled):
    """A cue "<ruby>A dog<rt>inu</rt></ruby> runs" came back "<ruby><rt>Ein Hund</rt></ruby> rennt": the reading was
    translated into the sentence, the sentence into the annotation."""
    for ruby in ("<ruby>A dog<rt>inu</rt></ruby>", "<ruby>A dog<rt>inu</ruby>"):  # WebVTT's </rt> may be left out
        cue = f"WEBVTT\n\n00:01.000 --> 00:02.000\n{ruby} runs in the park.\n"
        (unit,) = FORMATS["vtt"].read(cue.encode(), FileLimits()).units
        assert unit.text == '<span id="c0">A dog<img id="c1"></span> runs in the park.'
        text = (await translated("vtt", cue.encode(), bundled)).decode().split("\n")[3]
        annotation = ruby[len("<ruby>A dog") : -len("</ruby>")]
        assert re.fullmatch(rf"<ruby>[^<]*Hund{annotation}</ruby> [^<]+", text), text


async def test_a_dialogue_dash_is_kept_on_any_line_that_starts_with_one():
    data = (
        "WEBVTT\n\n00:01.000 --> 00:02.000\n\u2013 A cat sleeps.\n\n"
        "00:03.000 --> 00:04.000\nA dog runs <i>in the park</i>.\n- Two men are sitting.\n\n"
        "00:05.000 --> 00:06.000\n-5 degrees in the park.\n"
    ).encode()
    units = FORMATS["vtt"].read(data, FileLimits()).units
    assert [u.text for u in units] == [
        "A cat sleeps.", 'A dog runs <span id="c0">in the park</span>.', "Two men are sitting.",
        "-5 degrees in the park.",
    ]  # fmt: skip

    async def upper(units):  # the text upper-cased, the tags as they are
        return [re.sub(r"[^<>]+(?=<|$)", lambda m: m[0].upper(), u.text) for u in units]

    out = blocks((await translated("vtt", data, upper)).decode())
    assert [b.split("\n")[1:] for b in out[1:]] == [
        ["\u2013 A CAT SLEEPS."], ["A DOG RUNS <i>IN THE PARK</i>.", "- TWO MEN ARE SITTING."],
        ["-5 DEGREES IN THE PARK."],
    ]  # fmt: skip


@pytest.mark.parametrize(
    "data, message",
    [
        (b"WEBVTT\n\n00:00:01,000 --> 00:00:02,000\nA dog.\n", "line 3 .* a cue timing line that cannot be read"),
        (b"WEBVTT\n\n1\n00:01.000 -> 00:02.000\nA dog.\n", "line 4 .* a cue timing line that cannot be read"),
        (b"1\n00:00:01.000 --> 00:00:02.000\nA dog.\n", "line 1 .* starts with 'WEBVTT'; found '1'"),
        (b"WEBVTTX\n", "starts with 'WEBVTT'"),
        (b"WEBVTT\n\n00:01.000 --> 00:02.000\n\xff\n", "not UTF-8: byte 32 \\(line 4\\)"),
    ],
)
def test_malformed_files_are_refused_saying_where(data, message):
    with pytest.raises(ValueError, match=message):
        FORMATS["vtt"].read(data, FileLimits())


def test_hostile_files_are_refused_or_read_in_linear_time():
    many = "WEBVTT\n\n" + "".join(f"{i}\n00:01.000 --> 00:02.000\nA dog.\n\n" for i in range(100_000))
    assert "the limit is 1000" in str(refused_quickly("vtt", many.encode(), FileLimits(max_units=1000)))
    assert not quickly("vtt", b"WEBVTT\n\n" + b"1" * 1_000_000 + b":00.000 -> x\n").units  # not a cue: kept
    assert "timing line" in str(refused_quickly("vtt", b"WEBVTT\n\n" + b"-->" * 300_000 + b"\n"))
