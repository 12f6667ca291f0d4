"""What every request is made of: the checked field types (texts, ids, glossaries, any string without lone
surrogates), the strict base of the request models, and the error body. Requests are strict: unknown fields and loose
types are refused."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

from app.glossaries import MAX_ENTRIES, GlossaryError, checked, short

Side = Literal["source", "target"]
SURROGATES = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """The text with each lone surrogate replaced by U+FFFD, the replacement character."""
    # JSON may escape half of a UTF-16 pair ("\ud800") and Python's parser keeps it, but it is no character: the
    # tokenizer refuses it and UTF-8 cannot encode it. Replaced rather than refused, as a browser's TextEncoder and
    # any UTF-8 encoder with errors="replace" do, since it is mostly an emoji cut in half by a client: the rest of
    # the text still translates, and one code unit becomes one character, so every offset and span the answer
    # gives (tokens, alignment, segments) still points into the text as sent.
    return SURROGATES.sub("\ufffd", text)


def _json_type(v: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return "null" if v is None else names.get(type(v), type(v).__name__)


# Validators raise ValueError (pydantic turns it into a 422 with our message; a TypeError would escape).
def _texts(v: Any) -> str | list[str]:
    if isinstance(v, str):
        return scrub(v)
    if not isinstance(v, list):
        raise ValueError(f"must be a string or a list of strings, got {_json_type(v)}")  # noqa: TRY004
    for i, t in enumerate(v):
        if not isinstance(t, str):
            raise ValueError(f"item {i} is {_json_type(t)}; every item must be a string")  # noqa: TRY004
    return list(map(scrub, v))


def _ids(v: Any) -> list[int] | list[list[int]]:
    def is_id(i: Any) -> bool:
        return type(i) is int

    if not isinstance(v, list):
        raise ValueError(f"must be a list of token ids or a list of lists of ids, got {_json_type(v)}")  # noqa: TRY004
    if v and isinstance(v[0], list):
        for b, seq in enumerate(v):
            if not isinstance(seq, list) or not all(map(is_id, seq)):
                raise ValueError(f"item {b} must be a list of integer token ids (all items lists, or all integers)")
    elif not all(map(is_id, v)):
        raise ValueError("every id must be an integer (or send a list of lists of integers)")
    return v


def _glossary(v: dict[str, str] | None) -> dict[str, str] | None:
    if not v:
        return None
    if len(v) > MAX_ENTRIES:
        raise ValueError(f"has {len(v)} entries; the limit is {MAX_ENTRIES} (a stored glossary's too)")
    try:
        return dict(checked((f"entry {short(s)}", scrub(s), scrub(t)) for s, t in v.items()))
    except GlossaryError as e:
        raise ValueError(str(e)) from None


def _entries(v: Any) -> dict[str, str] | str:
    if isinstance(v, str):
        return scrub(v)
    if not isinstance(v, dict) or not all(isinstance(t, str) for t in v.values()):
        raise ValueError(
            f"must be an object of source term -> target term (strings), or TSV or CSV text, got {_json_type(v)}"
            + (" holding a value that is not a string" if isinstance(v, dict) else "")
        )
    return {scrub(k): scrub(t) for k, t in v.items()}


PROTECTABLE = ("placeholders", "tags", "urls", "emails", "code")  # the built-in kinds of protected spans


def _protect(v: Any) -> bool | list[str]:
    if isinstance(v, bool) or isinstance(v, list) and all(k in PROTECTABLE for k in v):
        return v
    got = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
    raise ValueError(f"must be true, false or a list of kinds of spans ({', '.join(PROTECTABLE)}), got {got}")


AUTO = "auto"  # a source language to detect


def auto(code: str) -> str:
    """A language code as sent, with "auto" in any case ("AUTO", "Auto") as "auto": codes match in any case."""
    return AUTO if code.lower() == AUTO else code


def _language(v: str) -> str:
    if not v.strip():  # it once meant "left out", while an empty "model" was a 422
        raise ValueError(
            f"is {'empty' if not v else 'blank'}: send a language code (`en`, `de`; GET /models lists each model's) "
            "or leave the field out"
        )
    return auto(v)


Text = Annotated[str, AfterValidator(scrub)]  # every string field of a request: no lone surrogates past here
Language = Annotated[str, AfterValidator(scrub), AfterValidator(_language)]  # a language code, "auto" in any case
Protect = Annotated[
    bool | list[Literal[PROTECTABLE]],
    PlainValidator(_protect, json_schema_input_type=bool | list[Literal[PROTECTABLE]]),
]
Glossary = Annotated[dict[str, str] | None, AfterValidator(_glossary)]
Entries = Annotated[dict[str, str] | str, PlainValidator(_entries, json_schema_input_type=dict[str, str] | str)]
Texts = Annotated[
    str | list[str],
    PlainValidator(_texts, json_schema_input_type=str | Annotated[list[str], Field(min_length=1)]),
    Field(description="one text, or a list of 1..MAX_BATCH_TEXTS texts"),
]
Ids = Annotated[
    list[int] | list[list[int]],
    PlainValidator(_ids, json_schema_input_type=list[int] | Annotated[list[list[int]], Field(min_length=1)]),
    Field(description="one sequence of ids, or a list of 1..MAX_BATCH_TEXTS sequences; ids in 0..vocab_size-1"),
]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # NaN: "a finite number", not "<= 10"


class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, and what is allowed")
    type: str = Field(description="a stable kind: validation_error, input_too_long, unauthorized, ...")
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": "text has 812 tokens; the limit is 256", "type": "input_too_long"}]}
    )
