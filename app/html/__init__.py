"""HTML for /translate's format "html": the units of a page to translate, and the page with their translations.

- `reader.py`    parse(): a page or fragment read into units, every character of it kept; MalformedHtml
- `flow.py`      a block's flow (its text, inline elements and leaves) as a unit with its inline tags
- `document.py`  HtmlDocument: the units and the page's pieces; render() writes the page with their translations
- `place.py`     the inline tags put back into a translation, around the words aligned to the text they wrapped
- `ignore.py`    ignoring(): elements marked not to translate by name (DeepL's ignore_tags)

Reading and putting back keep their own stacks, not Python's, so any depth of nesting works. Their work grows with
the page's characters times a logarithm (the ranges siblings hold are kept sorted and bisected, the alignment is
indexed once per unit), but for two things: each distinct kept text is searched for in its unit's text and
translation, and a tag aligned to target words far apart looks at each stretch between them that no sibling holds.
"""

from app.html.document import Alignment, HtmlDocument, InlineTag, Part, Unit
from app.html.ignore import ignoring
from app.html.reader import HTML, XML, MalformedHtml, Rules, parse, xml_rules

__all__ = [
    "HTML", "XML", "Alignment", "HtmlDocument", "InlineTag", "MalformedHtml", "Part", "Rules", "Unit", "ignoring",
    "parse", "xml_rules",
]  # fmt: skip
