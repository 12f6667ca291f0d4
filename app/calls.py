"""From a request to its engine call: the decoding fields it asks for, its protected spans, its source language
detected when it is "auto" (the routes, app/fastpath.py and app/files_api.py share these)."""

from __future__ import annotations

from app import detect
from app import schemas as s
from app.engine import InvalidRequest
from app.glossaries import Glossary, fits, terms
from app.languages import cut
from app.models import Models
from app.protect.spans import Protect, protection
from app.segment import blank
from app.text import Attention, Engine, Translation, inspection
from app.text.limits import Decoding


async def run_translate(engine: Engine, body: s.TranslateRequest, stored: Glossary | None = None) -> list[Translation]:
    """The engine call for a `/translate` request that is not streamed (also used by app/fastpath.py); where the
    source language is detected, a list's texts each from its own (`Translation.detected_source`)."""
    if body.format == "html" and body.return_segments:
        raise InvalidRequest('return_segments works on plain text only; send it with "format": "text"')
    texts = [body.text] if isinstance(body.text, str) else body.text
    sources = await detect_each(engine, texts, body.format) if detected(body, engine, stored) else None
    how, kept = await decoding(body, engine, stored, sources), protected(body)
    out = await engine.translate(
        body.text, body.max_new_tokens, body.truncate, how, body.split, body.format, body.min_confidence, kept,
        sources=sources,
    )  # fmt: skip
    for t, source in zip(out, sources, strict=True) if sources else ():
        t.detected_source = source
    return out


def detected(body: s.TranslateRequest, engine: Engine, stored: Glossary | None = None) -> bool:
    """Whether the request's source language is detected: a many-to-many model's, left out or "auto", where no stored
    glossary names it."""
    return bool(engine.codes) and body.source in (None, "auto") and stored is None


async def decoding(
    body: s.TranslateRequest, engine: Engine, stored: Glossary | None = None, sources: list[str] | None = None
) -> Decoding:
    """The request's decoding fields, for the engine to check against the model and its limits; for a many-to-many
    model a source left out or "auto" is detected among its languages (`sources`: detected already, each text's; the
    first stands for them), or is the stored glossary's. A stored
    glossary must be of the languages the model translates the request between; its entries follow the inline ones."""
    source, target = body.source, body.target
    if stored is not None:
        source = stored.source_lang if source in (None, "auto") else source
        target = target or stored.target_lang
    if detected(body, engine, stored):
        texts = [body.text] if isinstance(body.text, str) else body.text
        source = sources[0] if sources else await detect_source(engine, read(texts, body.format))
    if stored is not None and not fits(stored, engine, source, target):
        if engine.codes and (lacking := engine.directions.why_not(source, target)):  # a language the model lacks
            raise InvalidRequest(
                f"the glossary {stored.glossary_id} is {stored.source_lang}->{stored.target_lang}, and {lacking}"
            )
        langs = engine.languages if engine.codes is None else {"source": source, "target": target}
        raise InvalidRequest(
            f"the glossary {stored.glossary_id} is {stored.source_lang}->{stored.target_lang}, but this request is "
            f"{langs['source']}->{langs['target']} (model {engine.name!r}); use a glossary of that pair, or leave out "
            "model, source and target to translate with the glossary's model"
        )
    glossary = terms(
        (body.glossary or {}).items(), stored.entries if stored else (), ignore_case=body.glossary_ignore_case
    )
    return Decoding(
        beam_size=body.beam_size, num_hypotheses=body.num_hypotheses, length_penalty=body.length_penalty,
        target_prefix=body.target_prefix, sampling_topk=body.sampling_topk,
        sampling_temperature=body.sampling_temperature, seed=body.seed, return_alignment=body.return_alignment,
        return_word_confidence=body.return_word_confidence, glossary=glossary,
        glossary_ignore_case=body.glossary_ignore_case, source=source, target=target,
    )  # fmt: skip


async def engine_by_detection(models: Models, body: s.TranslateRequest, among: tuple[str, ...]) -> Engine:
    """The engine for a request whose source is left out or "auto" where several models translate into its target
    (`among`: the languages they translate from): the first to translate from the texts' language, as detected among
    those (LibreTranslate's and DeepL's routes choose so too); the first into the target where none is detected."""
    texts = [body.text] if isinstance(body.text, str) else body.text
    words = read(texts, body.format)
    if detect.identifier(among) is None or all(map(blank, words)):
        return models.pick(None, body.source, body.target)
    language = (await detect.detect(words, among))[0][0]
    return models.find(None, language, body.target) or models.pick(None, body.source, body.target)


async def detect_source(engine: Engine, texts: list[str]) -> str:
    """The likeliest of a many-to-many model's languages that the detector knows (by their ISO 639-1 names)."""
    return (await detect.detect(texts, detectable(engine, texts)))[0][0]


async def detect_each(engine: Engine, texts: list[str], format: str) -> list[str]:
    """Each text's language, as detect_source() tells the likeliest of all of them (app/detect.py's each(): a short
    text leans on the others)."""
    words = read(texts, format)
    return await detect.detect_each(words, detectable(engine, words))


def detectable(engine: Engine, texts: list[str]) -> tuple[str, ...]:
    """The model's languages by their ISO 639-1 names, which detection chooses among; a 422 asking for the source
    where the texts are blank or the detector knows none of them."""
    names = tuple(sorted(set(engine.codes.names.values())))
    if detect.identifier(names) is None or all(map(blank, texts)):
        what = "the text is blank" if detect.identifier(names) else "the detector knows none of this model's languages"
        raise InvalidRequest(f'name the source language: {what}, so "auto" cannot tell; {engine.codes.hint()}')
    return names


def read(texts: list[str], format: str) -> list[str]:
    """What detection reads of each text: an HTML page's words, not its markup."""
    return [detect.visible(t) for t in texts] if format in ("html", "xml") else texts


def protected(body: s.TranslateRequest) -> Protect | None:
    """The request's protected spans, checked against their limits (app/protect/); None when it protects none. A
    target prefix holding one is refused: the span would come twice, the prefix's read by the model as words."""
    protect = protection(body.protect, body.protect_terms, body.protect_patterns)
    if protect is not None and body.target_prefix and (spans := protect.spans(body.target_prefix)):
        a, b = spans[0]
        raise InvalidRequest(
            f"target_prefix holds {cut(body.target_prefix[a:b])!r}, a span this request protects, which the server "
            "puts back itself where the words around it go: send the prefix without it"
        )
    return protect


async def run_attention(engine: Engine, body: s.AttentionRequest) -> Attention:
    """The engine call for an `/attention` request, its source language detected first when it is "auto"."""
    source = body.source_language
    if engine.codes and source == "auto":
        source = await detect_source(engine, [body.text])
    return await inspection.attention(
        engine, body.text, body.target, body.layers, body.heads, body.average_heads, source, body.target_language
    )
