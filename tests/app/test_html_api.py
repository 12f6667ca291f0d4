"""/translate with "format": "html": the page's text translated as the plain text would be, its markup as written."""

import re

import pytest

from app.html import parse
from tests.app.conftest import MODES, trained_in
from tests.app.helpers import assert_error
from tests.synthetic import synthetic_pairs

pytestmark = pytest.mark.anyio
trained = pytest.fixture(scope="module", params=MODES, name="trained")(trained_in)  # one process, a front-end
S = [en for en, _ in synthetic_pairs(12, seed=7)]
PAGE = f"""<!DOCTYPE html>
<html lang="en">
<head><title>{S[0]}</title>
<style>p {{ color: red; }}</style>
<script>var caption = "{S[1]}"; if (a < b) {{ go(); }}</script>
</head>
<body>
  <!-- {S[2]} -->
  <h1 class="title">{S[3]}</h1>
  <p>{S[4]} {S[5]}<br>
     {S[6]}</p>
  <ul>
    <li>{S[7]}
    <li><img src="dog.png" alt="{S[8]}"> {S[9]}
  </ul>
  <table><tr><td>{S[10]}<td translate="no">{S[11]}</table>
  <pre>{S[1]}</pre>
</body>
</html>
"""


@pytest.fixture
def client(trained):
    return trained[1]


def tags(page: str) -> list[str]:
    """The page's tags, the values of the attributes that are translated left out."""
    return [re.sub(r'( (alt|title)=)"[^"]*"', r"\1", t) for t in re.findall(r"<[^>]*>", page)]


async def plain(client, texts: list[str]) -> list[str]:
    r = await client.post("/translate", json={"text": texts})
    assert r.status_code == 200, r.text
    return [t["text"] for t in r.json()["translations"]]


async def test_a_page_keeps_its_markup_and_its_text_is_translated_as_plain_text_would_be(client):
    r = await client.post("/translate", json={"text": PAGE, "format": "html"})
    assert r.status_code == 200, r.text
    out = r.json()["translations"][0]["text"]
    assert tags(out) == tags(PAGE)  # every tag as written, in order
    units = [u.text for u in parse(PAGE).units]
    assert [u.text for u in parse(out).units] == await plain(client, units)
    for kept in (f'var caption = "{S[1]}"; if (a < b)', f"<!-- {S[2]} -->", f"<pre>{S[1]}</pre>", f">{S[11]}<"):
        assert kept in out  # scripts, comments, pre and translate="no" are left alone
    assert S[4] not in out and S[8] not in out  # text and alt attributes are translated


async def test_an_inline_tag_wraps_the_translation_of_the_words_it_wrapped(client):
    words = S[3].rstrip(".").split()
    page = f"<p>{' '.join(words[:-1])} <b>{words[-1]}</b>.</p>"
    r = await client.post("/translate", json={"text": [page, page], "format": "html"})
    assert r.status_code == 200, r.text
    out = [t["text"] for t in r.json()["translations"]]
    assert out[0] == out[1]
    assert tags(out[0]) == ["<p>", "<b>", "</b>", "</p>"]
    bold = re.search(r"<b>(.*)</b>", out[0]).group(1)
    assert bold.strip() and bold in (await plain(client, [S[3].rstrip(".") + "."]))[0]


async def test_an_element_kept_as_written_is_a_word_of_its_own_as_in_the_source(client):
    kept = ["<code>x</code>", "<kbd>Bob</kbd>", '<span translate="no">Ann</span>', '<b class="notranslate">Max</b>']
    pages = [f"<p>{' '.join(s.split()[:2])} {k} {' '.join(s.split()[2:])}</p>" for s, k in zip(S[4:], kept)]
    r = await client.post("/translate", json={"text": pages, "format": "html"})
    assert r.status_code == 200, r.text
    for k, t in zip(kept, r.json()["translations"]):
        out = t["text"]
        # a space (one) on each side, or the block's edge, or punctuation; never glued to a word
        assert re.search(rf"(^<p>|[^\s<>]\s|[^\w\s<>]){re.escape(k)}(\s[^\s<>]|[^\w\s<>]|</p>$)", out), out
        assert "  " not in out, out


async def test_malformed_html_is_a_422_saying_where(client):
    r = await client.post("/translate", json={"text": ["<p>ok</p>", "<p>A <b>dog</i> runs.</p>"], "format": "html"})
    assert_error(r, 422, "validation_error", "text[1] is not well-formed HTML", "</i>", "1:")


@pytest.mark.parametrize(
    "extra, problem",
    [({"stream": True}, "stream works on plain text only"), ({"return_segments": True}, "return_segments"),
     ({"return_alignment": True}, "return_alignment"), ({"target_prefix": "Ein"}, "target_prefix")],
)  # fmt: skip
async def test_what_works_on_plain_text_only_is_a_422_with_html(client, extra, problem):
    r = await client.post("/translate", json={"text": "<p>A dog runs.</p>", "format": "html", **extra})
    assert_error(r, 422, "validation_error", problem)


async def test_markup_without_text_comes_back_as_it_is(client):
    page = "<div><img src='a.png'><!-- nothing --></div>"
    r = await client.post("/translate", json={"text": page, "format": "html"})
    assert r.json()["translations"][0]["text"] == page
