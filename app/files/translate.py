"""A file's units through the engine: plain units as text, markup units as HTML fragments (app/html/ places their
inline tags); URLs and e-mail addresses kept verbatim (app/protect/; a model given one writes words in its place, as
DeepL would not), and in placeholder units the built-in placeholder kinds too."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from app.files import Unit
from app.protect.spans import ADDRESSES, protection
from app.segment import blank
from app.text.limits import GREEDY, Decoding

if TYPE_CHECKING:
    from app.text.engine import Engine

PLACEHOLDERS = protection(["placeholders", *ADDRESSES.kinds], None, None)


async def translate_units(engine: Engine, units: list[Unit], decoding: Decoding = GREEDY) -> list[str]:
    """Each unit's translation, in order; blank units come back as they are without a model call. At most the engine's
    max_batch_texts units of one kind a call (callers send a file in chunks, which is also how a job shows progress).
    No sentence is withheld whatever NMT_MIN_CONFIDENCE says: a file has no place to say one was left out."""
    out = [u.text for u in units]
    groups: dict[tuple[bool, bool], list[int]] = {}
    for i, u in enumerate(units):
        if not blank(u.text):
            groups.setdefault((u.markup, u.placeholders), []).append(i)
    done = await asyncio.gather(*(
        engine.translate([units[i].text for i in at], cut_long=True, decoding=decoding, min_confidence=0.0,
                         format="html" if markup else "text", protect=PLACEHOLDERS if placeholders else ADDRESSES)
        for (markup, placeholders), at in groups.items()
    ))  # fmt: skip  # the kinds decode side by side in the batch
    for at, translated in zip(groups.values(), done, strict=True):
        for i, t in zip(at, translated, strict=True):
            out[i] = t.text
    return out
