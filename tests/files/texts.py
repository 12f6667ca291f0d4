"""What the text formats' tests share: whether a text reads as the bundled model's German, and how long reading a
file takes."""

from __future__ import annotations

import re
import time

from app.files import FORMATS, FileError, FileLimits, FileTooLarge

GERMAN = {"ein", "eine", "einer", "einem", "einen", "der", "die", "das", "den", "dem", "und", "mit", "im", "in", "auf"}
ENGLISH = {"the", "is", "are", "a", "with", "of", "his", "her", "their", "while"}


def words(text: str) -> set[str]:
    """The words of a text, its tags and codes (`<i>`, `{\\an8}`, `%(name)s`) left out."""
    text = re.sub(r"<[^<>]*>|\{[^{}]*\}|%\([^)]*\)", " ", text)
    return set(re.findall(r"[a-zäöüß]+", text.lower()))


def assert_german(text: str) -> None:
    """The text reads as the model's German: German words in it, none of the English ones that every caption has."""
    found = words(text)
    assert found & GERMAN, f"no German in {text!r}"
    assert not found & ENGLISH, f"English {sorted(found & ENGLISH)} left in {text!r}"


def quickly(fmt: str, data: bytes, limits: FileLimits | None = None, seconds: float = 5.0):
    """What reading `data` gives, the file read or the FileError or FileTooLarge raised, within `seconds` (a hang
    would be a denial of service; the bound is far above what linear work takes, so a loaded machine passes it)."""
    start = time.perf_counter()
    try:
        out = FORMATS[fmt].read(data, limits or FileLimits())
    except (FileError, FileTooLarge) as e:
        out = e
    took = time.perf_counter() - start
    assert took < seconds, f"reading {len(data)} bytes of {fmt} took {took:.1f} s"
    return out


def refused_quickly(fmt: str, data: bytes, limits: FileLimits | None = None, seconds: float = 5.0) -> Exception:
    """The FileError or FileTooLarge that reading `data` raises, within `seconds`."""
    out = quickly(fmt, data, limits, seconds)
    assert isinstance(out, Exception), f"{len(data)} bytes of {fmt} were read without an error"
    return out
