"""SubRip subtitles: cue text translated, indexes, timings and layout kept, tags back exactly once."""

from __future__ import annotations

import re
import time

import pytest

from app.files import FORMATS, FileLimits
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, quickly, refused_quickly

pytestmark = pytest.mark.anyio

MOVIE = """1
00:00:01,000 --> 00:00:04,000
<i>A man in a red shirt</i>
is walking his dog in the park.

2
00:00:04,500 --> 00:00:07,250
- Where are the children playing?
- In the <b>snow</b>.

3
00:00:08,000 --> 00:00:10,000
{\\an8}Two women are sitting on a bench.

4
00:00:10,500 --> 00:00:13,000
<font color="#ffff00">A little girl</font> is climbing
a tree in the garden.
"""
ODD = (  # what players accept: no index, "." before the milliseconds, a blank line inside a cue, none between
    "\n\n00:00:01.000 --> 00:00:02.000 X1:10\nA dog runs.\n\nStill the first cue.\n"
    "2\n00:00:03,000 --> 00:00:04,000\nA cat.\n\n\n"
)
SAMPLES = [MOVIE, MOVIE.replace("\n", "\r\n"), "\ufeff" + MOVIE.rstrip("\n"), ODD, "", "\n\n"]


def cues(text: str) -> list[list[str]]:
    return [block.split("\n") for block in text.strip("\n").split("\n\n")]


@pytest.mark.parametrize("text", SAMPLES)
async def test_identity_gives_the_file_back(text):
    assert await translated("srt", text.encode(), identity) == text.encode()


async def test_cues_are_translated_with_timings_line_breaks_and_tags_kept(bundled):
    out = (await translated("srt", MOVIE.encode(), bundled)).decode()
    source, target = cues(MOVIE), cues(out)
    assert len(target) == len(source)
    for s, t in zip(source, target):
        assert t[:2] == s[:2]  # index and timing line
        assert len(t) == len(s)  # as many text lines: two-line cues stay two lines
        text = " ".join(t[2:])
        assert_german(text)
        for tag in re.findall(r"<[^>]+>|\{\\[^}]+\}", " ".join(s[2:])):
            assert text.count(tag) == 1, (tag, text)
    assert target[1][2].startswith("- ") and target[1][3].startswith("- ")  # a dialogue's dashes, one a line
    assert target[2][2].startswith("{\\an8}")


def test_a_dialogue_cue_is_one_unit_a_line_and_other_cues_one_unit():
    units = FORMATS["srt"].read(MOVIE.encode(), FileLimits()).units
    assert [u.text for u in units if not u.markup] == ["Where are the children playing?"]
    assert units[0].text == '<span id="c0">A man in a red shirt</span> is walking his dog in the park.'
    assert len(units) == 5


SPEAKERS = """1
00:00:03,000 --> 00:00:04,000
- A cat sleeps.

2
00:00:05,000 --> 00:00:06,000
Where are the children playing?
- In the snow.

3
00:00:07,000 --> 00:00:08,000
– A man is riding
a red bike.
—  A woman is reading.
"""


async def test_a_dialogue_dash_is_kept_on_any_line_that_starts_with_one(bundled):
    out = cues((await translated("srt", SPEAKERS.encode(), bundled)).decode())
    assert out[0][2].startswith("- ")  # a cue of one line, one speaker
    assert not out[1][2].startswith(("-", "–")) and out[1][3].startswith("- ")  # a dashed line beside another
    assert out[2][2].startswith("– ") and out[2][4].startswith("—  ")  # each dash as written
    assert not out[2][3].startswith(("-", "–", "—"))
    for source, target in zip(cues(SPEAKERS), out, strict=True):
        assert len(target) == len(source)  # each speaker on as many lines as theirs were
        assert_german(" ".join(target[2:]))


async def test_each_speaker_is_a_unit_put_back_behind_their_dash():
    units = FORMATS["srt"].read(SPEAKERS.encode(), FileLimits()).units
    assert [u.text for u in units] == [
        "A cat sleeps.", "Where are the children playing?", "In the snow.", "A man is riding a red bike.",
        "A woman is reading.",
    ]  # fmt: skip
    out = cues((await translated("srt", SPEAKERS.encode(), upper)).decode())
    assert [cue[2:] for cue in out] == [
        ["- A CAT SLEEPS."], ["WHERE ARE THE CHILDREN PLAYING?", "- IN THE SNOW."],
        ["– A MAN IS RIDING", "A RED BIKE.", "—  A WOMAN IS READING."],
    ]  # fmt: skip


async def upper(units):
    return [u.text.upper() for u in units]


@pytest.mark.parametrize(
    "text, units",
    [
        ("-5 degrees in the park.", ["-5 degrees in the park."]),  # a minus sign, not a dash
        ("-5 degrees in the park.\nA dog runs.", ["-5 degrees in the park. A dog runs."]),
        ("-Where are you?\n-Here.", ["Where are you?", "Here."]),  # a dialogue written without spaces
        ("A dog runs.\n-5 degrees.", ["A dog runs. -5 degrees."]),
    ],
)
def test_a_dash_without_a_space_starts_a_speaker_only_where_another_line_starts_with_one(text, units):
    data = f"1\n00:00:01,000 --> 00:00:02,000\n{text}\n".encode()
    assert [u.text for u in FORMATS["srt"].read(data, FileLimits()).units] == units


async def test_a_translation_goes_back_on_the_lines_of_its_cue_broken_at_spaces():
    data = b"1\n00:00:01,000 --> 00:00:02,000\nAaaa bbbb\ncccc dddd eeee ffff\nggg\n"

    async def longer(units):
        return ["one two three four five six seven eight nine ten eleven twelve"]

    lines = (await translated("srt", data, longer)).decode().split("\n")[2:-1]
    assert len(lines) == 3 and " ".join(lines) == "one two three four five six seven eight nine ten eleven twelve"
    assert len(lines[1]) > len(lines[0]) > len(lines[2])  # in proportion to the source's lines


@pytest.mark.parametrize(
    "data, message",
    [
        (b"1\n00:00:01,000 -> 00:00:02,000\nA dog.\n", "line 2 of the SubRip file: a timing line that cannot be read"),
        (MOVIE.replace("00:00:08,000 -->", "00:00:08,000 ->").encode(), "line 12 .* a timing line that cannot be"),
        (b"1\n00:00:01,000 --> 00:00:02,000\nA dog.\n\nHello there\n", None),  # text after a blank line: srt reads it
        (b"A dog runs.\nTwo cats.\n", "line 1 of the SubRip file: expected a cue"),
        (b"1\n00:00:01,000 --> 00:00:02,000\nCaf\xe9\n", "not UTF-8: byte 35 \\(line 3\\)"),
        (b"1\n00:00:01,000 --> 00:00:02,000\nA\x00\n", "NUL characters"),
    ],
)
def test_malformed_files_are_refused_saying_where(data, message):
    if message is None:
        assert len(FORMATS["srt"].read(data, FileLimits()).units) == 1
    else:
        with pytest.raises(ValueError, match=message):
            FORMATS["srt"].read(data, FileLimits())


def test_hostile_files_are_refused_or_read_in_linear_time():
    many = "".join(f"{i}\n00:00:01,000 --> 00:00:02,000\nA dog.\n\n" for i in range(100_000)).encode()
    assert "the limit is 1000" in str(refused_quickly("srt", many, FileLimits(max_units=1000)))
    # lines of digits take the srt library's regular expression time in their length's square
    assert "expected a cue" in str(refused_quickly("srt", b"1" * 1_000_000 + b"\n"))
    assert len(quickly("srt", b"1\n00:00:01,000 --> 00:00:02,000\n" + b"1" * 1_000_000 + b"\n\n2\n").units) == 1
    assert "timestamp" in str(refused_quickly("srt", b"1\n0:0:" + b"0" * 1_000_000 + b" --> 0:0:0\nA\n"))
    assert "expected a cue" in str(refused_quickly("srt", b" " * 1_000_000 + b"x"))
    long = quickly("srt", b"1\n00:00:01,000 --> 00:00:02,000\n" + b"a " * 200_000 + b"\n" + b"b " * 200_000 + b"\n")
    start = time.perf_counter()
    assert long.write([u.text.upper() for u in long.units]).count(b"\n") == 4  # broken onto two lines again
    assert time.perf_counter() - start < 5
