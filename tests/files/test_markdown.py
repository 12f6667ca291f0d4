"""Markdown: text blocks translated in place, code, URLs, HTML and front matter byte for byte."""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from app.files import FORMATS, FileLimits
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, quickly, refused_quickly

pytestmark = pytest.mark.anyio

PAGE = """---
title: A walk in the park
tags: [dogs, parks]
---

# A dog is running in the park

A man in a **red shirt** is walking his [dog](https://example.org/dogs_(big) "Dogs")
in the park with `leash()` on a sunny day.

> A woman is *reading* a book on a bench.

- A boy is jumping into the water.
  - A girl in a pink dress is playing with a ball.
- Two dogs are running in the snow.

| Animal | Scene |
|--------|-------|
| Dog | A black dog is running on the grass. |

```python
print("A dog is running.")
```

    an indented code block

<div class="note">An HTML block.</div>

A man is riding a bike  
next to a woman on a street.

[ref]: https://example.org/ref
"""
KEPT = ["---\ntitle: A walk in the park\ntags: [dogs, parks]\n---\n", '```python\nprint("A dog is running.")\n```\n',
        "    an indented code block\n", '<div class="note">An HTML block.</div>\n', "[ref]: https://example.org/ref\n",
        '](https://example.org/dogs_(big) "Dogs")', "`leash()`", "|--------|-------|\n"]  # fmt: skip
ODD = """+++
title = "TOML front matter"
+++
Setext heading
==============

1. First [a link][ref] and ![an image](img/a_b.png) and <https://auto.example.org>.
2. A line with a backslash break\\
   and *nested **strong** emphasis* and ~~gone~~ and <span>inline html</span>.

| a \\| b | `c` |
|---|:-:|
|  | cell two |

> quote first line
lazy continuation

[ref]: https://example.org/ref
"""


@pytest.mark.parametrize("text", [PAGE, PAGE.replace("\n", "\r\n"), "\ufeff" + PAGE.rstrip("\n"), ODD, "", "\n"])
async def test_identity_gives_the_file_back(text):
    assert await translated("md", text.encode(), identity) == text.encode()


async def test_text_blocks_are_translated_and_the_rest_kept_byte_for_byte(bundled):
    out = (await translated("md", PAGE.encode(), bundled)).decode()
    for kept in KEPT:
        assert out.count(kept) == 1, kept
    lines = out.split("\n")
    assert lines[5].startswith("# ")
    assert_german(lines[5])
    paragraph = " ".join(lines[7:9])  # still two lines
    assert_german(paragraph)
    assert re.search(r"\*\*[^*]+\*\*", paragraph) and re.search(r"\[[^\]]+\]\(https://example.org/dogs", paragraph)
    assert lines[10].startswith("> ") and lines[12].startswith("- ") and lines[13].startswith("  - ")
    for i in (10, 12, 13, 14, 18):
        assert_german(lines[i])
    assert lines[18].startswith("| ") and lines[18].endswith(" |") and lines[18].count("|") == 3
    assert_german(lines[28] + lines[29])
    assert lines[28].endswith("  ") and lines[29].strip() and lines[30] == ""  # the hard break between the same lines
    assert len(lines) == len(PAGE.split("\n"))


def test_inline_markup_is_inline_codes_and_what_is_not_text_is_not_a_unit():
    units = FORMATS["md"].read(ODD.encode(), FileLimits()).units
    assert [u.text for u in units] == [
        "Setext heading",
        'First <span id="c0">a link</span> and <img id="c1"> and <img id="c2">.',
        (
            'A line with a backslash break<br id="c0">and <span id="c1">nested <span id="c2">strong</span> emphasis'
            '</span> and <span id="c3">gone</span> and <img id="c4">inline html<img id="c5">.'
        ),
        "a | b",
        '<code id="c0">c</code>',
        "cell two",
        "quote first line lazy continuation",
    ]


GITHUB = """A man rides a bike[^1] in the snow.

- [ ] A man is reading a newspaper.
- [x] Two dogs play in the grass.

See {{< ref "dogs.md" >}} for the dogs, and $a+b$ for the sum. It costs $5 and $10.

[^note]: The bike is red.
"""


async def test_footnotes_task_boxes_shortcodes_and_math_are_kept_where_their_words_go(bundled):
    """What GitHub (and Hugo, and math renderers) read as markup is CommonMark's text: given to the model, it was
    dropped ("bike[^1]" came back "Fahrrad", "- [ ] A man" as "- Ein Mann")."""
    units = FORMATS["md"].read(GITHUB.encode(), FileLimits()).units
    assert [u.text for u in units] == [
        'A man rides a bike<img id="c0"> in the snow.', '<img id="c0"> A man is reading a newspaper.',
        '<img id="c0"> Two dogs play in the grass.',
        'See <img id="c0"> for the dogs, and <img id="c1"> for the sum. It costs $5 and $10.',  # a price is no math
        '<img id="c0"> The bike is red.',
    ]  # fmt: skip
    out = (await translated("md", GITHUB.encode(), bundled)).decode().split("\n")
    assert "Fahrrad[^1]" in out[0] and out[2].startswith("- [ ] ") and out[3].startswith("- [x] ")
    assert '{{< ref "dogs.md" >}}' in out[5] and "$a+b$" in out[5] and out[7].startswith("[^note]: ")
    assert_german(" ".join(out[:4]))


async def test_translated_text_cannot_turn_into_markup():
    data = b"A dog.\n\n| a | b |\n|---|---|\n| c | d |\n\nA *cat* sleeps\non two lines.\n"

    async def tricky(units):
        return ["- 1 * 2 = [x] `y` <z>", "a|b", "b", "c|d", "d", 'Eine <span id="c0">Katze</span> schläft - # 3']

    out = (await translated("md", data, tricky)).decode()
    assert out.startswith("\\- 1 \\* 2 = \\[x\\] \\`y\\` \\<z>\n")
    assert "| a\\|b | b |" in out and "| c\\|d | d |" in out
    assert "Eine *Katze*" in out and "\n- " not in out and "\n# " not in out  # no break before a list or heading
    html = MarkdownIt("commonmark").enable("table").render(out)
    assert html.count("<table>") == 1 and "<ul>" not in html and "<h1>" not in html and html.count("<p>") == 2


@pytest.mark.parametrize(
    "data, message", [(b"A caf\xe9.\n", "not UTF-8: byte 5 \\(line 1\\)"), (b"A\x00b\n", "NUL characters")]
)
def test_files_that_are_not_text_are_refused(data, message):
    with pytest.raises(ValueError, match=message):
        FORMATS["md"].read(data, FileLimits())


def test_hostile_files_are_refused_or_read_in_linear_time():
    many = "".join(f"A dog number {i}.\n\n" for i in range(50_000)).encode()
    assert "the limit is 1000" in str(refused_quickly("md", many, FileLimits(max_units=1000)))
    assert "the limit is 1000000" in str(refused_quickly("md", b"[" * 1_000_001))  # markdown-it-py: ~15 us each
    for pathological in (b"[" * 20_000, b"*a" * 10_000, b"> " * 10_000 + b"a", b"- " * 10_000 + b"a", b"`" * 20_000):
        quickly("md", pathological)
