"""DeepL's ignore_tags: elements marked not to translate by name, and the mark taken off after."""

from __future__ import annotations

import re
import secrets
from html.parser import HTMLParser, tagfind_tolerant


def ignoring(page: str, names: set[str], xml: bool = False) -> tuple[str, str]:
    """The page with `translate="no"` and a marker attribute added to the start tag of every element named in
    `names` (lower case; DeepL's ignore_tags) that has no translate attribute of its own, and that marker: after
    translating, removing the marker (`' ' + marker`) gives back the tags as written. `xml`: read as XML, where
    <script> and <style> hold markup as any element does (app/html/reader.py reads them so)."""
    marker = f'translate="no" data-nmt-ignored-{secrets.token_hex(6)}'
    found = _StartTags(page, names, xml).found
    out, done = [], 0
    for at in found:
        out += [page[done:at], " ", marker]
        done = at
    return "".join(out) + page[done:], marker


class _StartTags(HTMLParser):
    """Where to add an attribute to the start tags of the elements named: just after each one's name."""

    def __init__(self, page: str, names: set[str], xml: bool = False):
        super().__init__(convert_charrefs=True)
        if xml:  # an element named in a <script> is one there (it was read as the script's text, and translated)
            self.CDATA_CONTENT_ELEMENTS = self.RCDATA_CONTENT_ELEMENTS = ()
        self.names, self.found = names, []
        self.lines = [0] + [m.end() for m in re.finditer("\n", page)]
        try:
            self.feed(page)  # not close(): an unterminated tag at the end is the engine's parser's error to report
        except AssertionError:  # how the standard library's parser refuses a declaration ("<![ x"): the same parser
            pass  # reading the page to translate it (app/html/reader.py) refuses it there, with where and why (a 400)

    def handle_starttag(self, tag, attrs):
        if tag in self.names and not any(name == "translate" for name, _ in attrs):
            line, column = self.getpos()
            name_ends = tagfind_tolerant.match(self.get_starttag_text(), 1).end(1)
            self.found.append(self.lines[line - 1] + column + name_ends)

    handle_startendtag = handle_starttag
