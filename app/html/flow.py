"""A block's flow, as the reader met it (its text, inline elements and leaves, each with where it is in the page),
as a unit to translate: its text with entities decoded and without the whitespace at its ends, its inline elements as
spans of that text, and the markup around the text as the block's prefix and suffix; or as written when it has no text
to translate. Protected spans in its text become kept empty elements (app/html/reader.py says how)."""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from app.html.document import Block, InlineTag, Node, Unit
from app.protect.masking import CLOSING, SENTENCE_END, after_sentence, forward
from app.protect.restoring import word_char
from app.segment import blank, segment

if TYPE_CHECKING:
    from app.protect.spans import Protect

WHITESPACE = " \t\n\r\f"  # HTML's
# a run that ends a sentence (or has no text), then spaces at most
_ENDED = re.compile(rf"(?:^|[{SENTENCE_END}])[ \t]*\Z")
_PIECES = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)|[ \t\n\r\f]+|[^& \t\n\r\f]+|&")


def unit_of(tokens: list, protect: Protect | None) -> tuple[list, Block | None]:
    """One flow's pieces of the page and its unit: the unit's block for both, or the flow as written and None when it
    has no text to translate."""
    items, parts, stack, top, leaves, pos = [], [], [], [], [], 0
    for kind, x, _ in _protected(tokens, protect) if protect else tokens:
        if kind == "text":
            for m in _PIECES.finditer(x):
                parts.append(html.unescape(m[0]) if m[0][0] == "&" else m[0])
                items.append(("text", m[0], pos, pos + len(parts[-1])))
                pos += len(parts[-1])
            continue
        if kind == "dropped":  # whitespace the unit does not read: a protected span took it (_across)
            items.append(("text", x, pos, pos))
            continue
        if kind == "joiner":  # a space the unit reads where a protected span came out from between two words
            parts.append(" ")
            items.append(("text", "", pos, pos + 1))
            pos += 1
            continue
        if kind != "close":
            x.a, x.b = pos, pos + len(x.text)
            (stack[-1].children if stack else top).append(x)
        if kind == "open":
            stack.append(x)
        elif kind == "close":
            stack.pop().b = pos
        else:
            parts.append(x.text)
            leaves += [x] if x.text else []
            pos = x.b
        items.append((kind, x))
    text = "".join(parts)
    if all(i[0] != "text" or blank(text[i[2] : i[3]]) for i in items):  # nothing seen: &nbsp;, zero-width spaces
        return [p for i in items for p in _raw(i)], None
    s, e = len(text) - len(text.lstrip(WHITESPACE)), len(text.rstrip(WHITESPACE))
    for n in leaves:  # a kept element is not cut
        s, e = n.a if n.a < s < n.b else s, n.b if n.a < e < n.b else e
    side, core, roots = {}, [], []
    todo = [(n, False) for n in reversed(top)]  # outer first, each node's children before its next sibling
    while todo:  # each node before the unit's text, after it, around it (wrap) or in it (core, spans relative)
        n, inside = todo.pop()
        if inside or not (n.b <= s or n.a >= e or n.a <= s and n.b >= e and not n.kept):
            side[n] = "core"
            n.a, n.b = min(max(n.a - s, 0), e - s), min(max(n.b - s, 0), e - s)
            core.append(n)
            roots.extend([] if inside else [n])
        else:
            side[n] = "pre" if n.b <= s else "post" if n.a >= e else "wrap"
        todo += [(c, side[n] == "core") for c in reversed(n.children)]
    prefix, suffix = [], []
    for i in items:
        where = ("pre" if i[3] <= s else "post" if i[2] >= e else "core") if i[0] == "text" else side[i[1]]
        if where == "pre" or where == "wrap" and i[0] == "open":
            prefix += _raw(i)
        elif where in ("post", "wrap"):
            suffix += _raw(i)
    unit = Unit(text[s:e], tuple(InlineTag(n.name, n.a, n.b, n.kept) for n in core))
    block = Block(unit, tokens[0][2], [p for i in items for p in _raw(i)], prefix, suffix, roots)
    return [block], block


def _protected(tokens: list, protect: Protect) -> list:
    """The flow with the protected spans of its text as kept empty elements: each group of spans, with the
    whitespace on one side of it, as written (app/protect/masking.py's cuts), and a space in its place where two words
    would otherwise meet. A span whose edge falls inside an entity's characters is left in the text. A text run is cut
    knowing how the flow's text before it ends, and a group alone in its element (`Visit <b>{name}</b> now`) takes the
    whitespace beside that element with it (`_across`): the unit reads "Visit now", as plain text's masking does."""
    out, tail = [], ""  # tail: how the flow's text so far ends (its last character and a whitespace after it)
    for kind, x, at in tokens:
        if kind != "text":
            out.append((kind, x, at))
            tail = _tail(tail + x.text) if kind == "leaf" else tail
            continue
        decoded, raw = _decoded(x)
        done = 0
        for cut in protect.cuts(decoded, tail):
            a, b = raw(cut.start), raw(cut.end)
            if a is None or b is None or a < done:
                continue
            out += [("text", x[done:a], at + done)] if done < a else []
            out.append(("leaf", Node("#protected", [x[a:b]], kept=True, protect=protect,
                                      forward=cut.forward), at + a))  # fmt: skip
            out += [("joiner", " ", at + b)] if cut.joiner else []
            done = b
        out += [("text", x[done:], at + done)] if done < len(x) else []
        tail = _tail(tail + decoded)
    return _across(out)


def _tail(text: str) -> str:
    """How a text ends, as much as cuts() asks: its last character but whitespace, and one whitespace after it (a line
    break, where there is one)."""
    core = text.rstrip()
    space = text[len(core) :]
    return core[-1:] + ("\n" if "\n" in space else space[:1])


def _across(out: list) -> list:
    """The flow with the whitespace that a group of spans alone in its element has beside that element, across its
    tags (`Visit <b>{name}</b> now`), taken out of the unit's text as the group's own is (on the side it takes:
    before it, or after one that goes in front of the next word), where the text reads on without it: not where two
    words would meet (`Visit <b>{name}</b>now`) nor across a line break. The whitespace stays in the page, written as
    it was where the unit's text is not translated; the elements it was beside keep it for their spacing (Node.left,
    Node.right, app/html/place.py)."""
    taken: dict[int, list[int]] = {}  # a text run of `out` by index: [a, b), what is left of it in the unit's text
    for i, (kind, x, _) in enumerate(out):
        if kind != "leaf" or x.protect is None:
            continue
        group = html.unescape(x.start[0])
        if group.strip(WHITESPACE) == group:  # glued to a word across a tag (`Visit <b>{name}</b>now`): as in a run
            left, right = _beside(out, i, -1), _beside(out, i, 1)
            x.forward = forward(left[-1:] + group + right[:1], len(left[-1:]), len(left[-1:]) + len(group))
        alone = not x.forward and _own_sentence(out, i, taken)
        step = 1 if x.forward else -1
        j, crossed = i + step, []
        while 0 <= j < len(out) and out[j][0] in ("open", "close"):
            crossed.append(out[j])
            j += step
        if not crossed or not 0 <= j < len(out) or out[j][0] != "text":
            continue
        a, b = taken.setdefault(j, [0, len(out[j][1])])
        text = out[j][1][a:b]
        space = text[len(text.rstrip(WHITESPACE)) :] if step < 0 else text[: len(text) - len(text.lstrip(WHITESPACE))]
        if not space or "\n" in space or "\r" in space or word_char(other := _beside(out, i, -step)):
            continue  # no whitespace, a line break, or the space between two words that would meet
        if step < 0 and other.strip() and not alone and after_sentence(text[: len(text) - len(space)]):
            continue  # after a sentence, but not one of its own: "runs. <b>{x}</b> now" reads "runs. now"
        taken[j] = [a, b - len(space)] if step < 0 else [a + len(space), b]
        side, edge = ("left", "open") if step < 0 else ("right", "close")
        for node in [x, *(n for k, n, _ in crossed if k == edge)]:  # it, and the elements that start (end) with it
            setattr(node, side, space[-1] if step < 0 else space[0])
    done = []
    for j, (kind, x, at) in enumerate(out):
        a, b = taken.get(j, (0, len(x) if kind == "text" else 0))
        if kind != "text" or (a, b) == (0, len(x)):
            done.append((kind, x, at))
            continue
        done += [("dropped", x[:a], at)] if a else []
        done += [("text", x[a:b], at + a)] if a < b else []
        done += [("dropped", x[max(a, b) :], at + max(a, b))] if b < len(x) else []
    return done


def _own_sentence(out: list, i: int, taken: dict[int, list[int]]) -> bool:
    """Whether protected leaf i, alone in its element, stands as a sentence of its own after one (`runs. <b>{x}</b>.
    A`, `runs.<b>{x}</b>. A`), as app/protect/masking.py's cuts() finds in a run; then the element takes the closing
    punctuation after its end tag out of the unit's text (Node.after): left in, the model read "runs. . A" or
    "runs.. A", and it dropped a full stop or kept a stray one."""
    k, opened = i - 1, 0
    while k >= 0 and out[k][0] == "open":
        k, opened = k - 1, opened + 1
    j, closed = i + 1, []
    while j < len(out) and out[j][0] == "close":
        closed.append(out[j][1])
        j += 1
    if not opened or not closed or j == len(out) or out[j][0] != "text" or taken.get(j, [0])[0]:
        return False
    before = _written_before(out, k + 1)
    closing = CLOSING.match(out[j][1])
    space = out[j][1][closing.end() : closing.end() + 1] if closing else None  # the page's character after it
    if not closing or not _ENDED.search(before) or space not in ("", " "):
        return False  # not after a full stop and plain spaces, or not before a space: "runs.\n<b>{x}</b>.\nA" as read
    after = html.unescape(out[j][1][closing.end() :])
    if before.strip() and after.strip() and len(segment(html.unescape(before) + after)) < 2:
        return False  # the splitter reads on ("sees Mr. <b>{x}</b>. A"): the full stop was the sentence's
    taken[j] = [closing.end(), taken.get(j, [0, len(out[j][1])])[1]]
    closed[-1].after, closed[-1].right = closing[0], space or None
    return True


def _written_before(out: list, i: int) -> str:
    """The flow's text before item i of `out` as written (entities too), across tags back to its last character other
    than whitespace."""
    parts = []
    for kind, x, _ in reversed(out[:i]):
        parts.append(x if kind == "text" else " " if kind == "joiner" else x.text if kind == "leaf" else "")
        if parts[-1].strip():
            break
    return "".join(reversed(parts))


def _beside(out: list, i: int, step: int) -> str:
    """The character the flow's text has beside item i of `out` (after it, or before it: step -1), across tags."""
    j = i + step
    while 0 <= j < len(out) and out[j][0] in ("open", "close"):
        j += step
    if not 0 <= j < len(out):
        return ""
    kind, x, _ = out[j]
    shown = html.unescape(x) if kind == "text" else " " if kind == "joiner" else x.text
    return shown[:1] if step > 0 else shown[-1:]


def _raw(item: tuple) -> list:
    """A flow item's pieces as written."""
    return [item[1]] if item[0] == "text" else [item[1].end] if item[0] == "close" else item[1].start


def _decoded(raw: str):
    """A run of text with its entities decoded, and the raw offset of any decoded one (None inside an entity)."""
    pieces = [(m[0], html.unescape(m[0]) if m[0][0] == "&" else m[0]) for m in _PIECES.finditer(raw)]
    starts = list(accumulate((len(d) for _, d in pieces), initial=0))
    raw_starts = list(accumulate((len(r) for r, _ in pieces), initial=0))

    def offset(d: int) -> int | None:
        i = bisect_right(starts, d) - 1
        if d == starts[i]:
            return raw_starts[i]
        return None if pieces[i][0][0] == "&" else raw_starts[i] + d - starts[i]

    return "".join(d for _, d in pieces), offset
