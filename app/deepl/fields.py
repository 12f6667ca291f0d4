"""A DeepL request's fields, read from a JSON body, a form or the query string, and each checked as DeepL checks it
(400 with DeepL's message), then the request's size (413)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException

from app import glossaries as g
from app.deepl.errors import DeepLError
from app.deepl.languages import checked
from app.html import Rules, xml_rules
from app.libretranslate import form_of, media_type, scrubbed
from app.schemas import scrub

MAX_GLOSSARY_IDS = 5  # glossary_ids, as DeepL's
LISTS = {"text", "glossary_ids", "ignore_tags", "non_splitting_tags", "splitting_tags", "custom_instructions"}
SPLIT = {"0": "none", "1": "sentences", "nonewlines": "nonewlines"}
FORMALITY = {"default", "more", "less", "prefer_more", "prefer_less"}
# model_type: the kind of model a request prefers -> the kind the answer says served it (model_type_used). A server's
# one model of a language pair is both: the answer names the kind asked for ("prefer_" is DeepL's legacy spelling).
MODEL_TYPES = {"latency_optimized": "latency_optimized", "quality_optimized": "quality_optimized",
               "prefer_quality_optimized": "quality_optimized"}  # fmt: skip
TRUE, FALSE = {"1", "true"}, {"0", "false"}


async def fields(request: Request) -> dict[str, Any]:
    """The request's fields: a JSON object, else the form's (urlencoded or multipart) over the query string's, with
    the list fields (`text`, `glossary_ids`, the tag lists) as lists."""
    if media_type(request) == "application/json":
        if not await request.body():
            return {}
        try:
            values = await request.json()
        except (ValueError, RecursionError):  # not JSON or not UTF-8, or nested too deeply
            values = None
        if not isinstance(values, dict):
            raise DeepLError(400, "the body is not a JSON object; send the fields as one, or form-encoded")
        return {k: scrubbed(v) for k, v in values.items()}
    try:
        form = await form_of(request)
    except HTTPException as e:
        if e.status_code != 400:
            raise
        raise DeepLError(400, f"the form cannot be read: {e.detail}") from None
    out: dict[str, Any] = {}
    for source in (request.query_params, form):
        for key in source:
            values = [scrub(v) for v in source.getlist(key) if isinstance(v, str)]
            if values:
                out[key] = values if key in LISTS else values[-1]
    return out


def string(values: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        if required:
            raise DeepLError(400, f"Parameter '{name}' not specified.")
        return None
    if not isinstance(value, str):
        raise DeepLError(400, f"Parameter '{name}' must be a string.")
    return value


def strings(values: dict[str, Any], name: str) -> list[str]:
    """A list field: a JSON list of strings, or a string of comma-separated items (as the clients send tag lists)."""
    value = values.get(name)
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise DeepLError(400, f"Parameter '{name}' must be a list of strings.")
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def flag(values: dict[str, Any], name: str) -> bool:
    value = values.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
    raise DeepLError(400, f"Value for '{name}' not supported: send 0 or 1 (true or false).")


def choice(values: dict[str, Any], name: str, allowed: set[str]) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).lower() not in allowed:
        raise DeepLError(400, f"Value for '{name}' not supported: send one of {', '.join(sorted(allowed))}.")
    return str(value).lower()


def texts(values: dict[str, Any]) -> list[str]:
    """`text` as a list."""
    text = values.get("text")
    if text is None or text == []:
        raise DeepLError(400, "Parameter 'text' not specified.")
    text = [text] if isinstance(text, str) else text
    if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
        raise DeepLError(400, "Parameter 'text' must be a string or a list of strings.")
    return text


def within_limits(request: Request, text: list[str]) -> None:
    """413 for more texts or characters than the server takes (NMT_MAX_BATCH_TEXTS, NMT_MAX_REQUEST_CHARS)."""
    settings = request.app.state.settings
    if len(text) > settings.max_batch_texts:
        raise DeepLError(
            413, f"the request has {len(text)} texts; the limit is {settings.max_batch_texts} a request", "too_large"
        )
    if (chars := sum(map(len, text))) > settings.max_request_chars:
        raise DeepLError(
            413, f"the texts have {chars} characters in all; the limit is {settings.max_request_chars} a request "
            "(NMT_MAX_REQUEST_CHARS): send the rest in another request", "too_large",
        )  # fmt: skip


# ---- glossaries in a translation -------------------------------------------------------------------------------


def glossary_ids(values: dict[str, Any], source: str | None) -> list[str]:
    """The glossaries a request names: `glossary_id`, or up to MAX_GLOSSARY_IDS in `glossary_ids`."""
    one, several = string(values, "glossary_id"), strings(values, "glossary_ids")
    if one and several:
        raise DeepLError(400, "glossary_id and glossary_ids cannot be used together; send one of them")
    ids = [one] if one else several
    if len(ids) > MAX_GLOSSARY_IDS:
        raise DeepLError(400, f"glossary_ids has {len(ids)} glossaries; the limit is {MAX_GLOSSARY_IDS}")
    if ids and source is None:
        raise DeepLError(400, "Use of a glossary requires the source_lang parameter to be set.")
    return ids


async def glossary_terms(request: Request, ids: list[str], source: str, target: str) -> tuple[tuple[str, str], ...]:
    """The entries of the glossaries, in order; each one's languages must be the request's."""
    store: g.GlossaryStore = request.app.state.glossaries
    found = []
    for glossary_id in ids:
        glossary = await store.get(glossary_id)
        if not (g.same(glossary.source_lang, source) and g.same(glossary.target_lang, target)):
            raise DeepLError(
                400, f"the glossary {glossary_id} is {glossary.source_lang.upper()}->{glossary.target_lang.upper()}; "
                f"the request is {source.upper()}->{target.upper()} (the glossary's pair must be the request's)",
            )  # fmt: skip
        found.append(glossary.entries)
    return g.terms(*found)


@dataclass(frozen=True)
class Asked:
    """What a /v2/translate request asks, read and checked."""

    texts: list[str]
    source: str | None
    target: str
    html: bool  # tag_handling html or xml
    xml: bool  # tag_handling xml
    split: str  # /translate's
    billed: bool  # add billed_characters
    context: str | None
    ignored: set[str]  # ignore_tags
    tags: Rules | None  # tag_handling xml: the XML rules with non_splitting_tags and splitting_tags
    glossary_ids: list[str]
    model_type: str | None  # model_type_used, where model_type was sent


def asked(request: Request, values: dict[str, Any]) -> Asked:
    """The request's fields, each checked as DeepL checks it (400), then its size (413)."""
    items, target, source = texts(values), string(values, "target_lang", required=True), string(values, "source_lang")
    checked(target, "target_lang")
    if source:
        checked(source, "source_lang")
    tags = choice(values, "tag_handling", {"html", "xml"})
    html = tags is not None
    split = SPLIT[choice(values, "split_sentences", set(SPLIT)) or ("nonewlines" if html else "1")]
    split = "sentences" if html and split == "nonewlines" else split  # HTML's line breaks are its own (<br>)
    flag(values, "preserve_formatting")  # the formatting is never corrected here: always preserved
    if choice(values, "formality", FORMALITY) in ("more", "less"):
        raise DeepLError(
            400, f"'formality' is not supported for given 'target_lang' {target}: no model here has formality; send "
            "prefer_more or prefer_less to fall back to the default",
        )  # fmt: skip
    for unsupported in ("style_id", "translation_memory_id"):
        if values.get(unsupported):
            raise DeepLError(400, f"{unsupported}: style rules and translation memories are not available here")
    ignored = {t.lower() for t in strings(values, "ignore_tags")} if html else set()
    rules = None
    if tags == "xml":  # as the parser names elements: lower case
        rules = xml_rules({t.lower() for t in strings(values, "non_splitting_tags")},
                          {t.lower() for t in strings(values, "splitting_tags")})  # fmt: skip
    out = Asked(
        items, source, target, html, tags == "xml", split, flag(values, "show_billed_characters"), string(values, "context"),
        ignored, rules, glossary_ids(values, source),
        MODEL_TYPES.get(choice(values, "model_type", set(MODEL_TYPES)) or ""),
    )  # fmt: skip
    within_limits(request, items)
    return out
