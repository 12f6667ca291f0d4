"""/tokenize and /detokenize: text to token ids and back, with each token's character span."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.fields import Ids, Language, Request, Side, Text, Texts


class TokenizeRequest(Request):
    text: Texts
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    side: Side = Field("source", description="source adds `</s>`; target adds `<s>` and `</s>`")
    add_special_tokens: bool = True
    language: Language | None = Field(
        None, description="the language of `side`, named as /translate's `source` or `target`: picks the model as "
        "they do; a many-to-many model's tokens carry its code (default the model's saved one; `auto` detects a "
        "source's)",
    )  # fmt: skip
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "A man is riding a bike."}]})


class TokenOut(BaseModel):
    id: int
    text: str
    start: int = Field(description="character offset into the input; special tokens get an empty span")
    end: int
    special: bool


class TokenizeResult(BaseModel):
    tokens: list[TokenOut]
    count: int


class TokenizeResponse(BaseModel):
    results: list[TokenizeResult] = Field(description="one result per input text, in order")


class DetokenizeRequest(Request):
    ids: Ids
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    side: Side = "target"
    skip_special_tokens: bool = True
    model_config = ConfigDict(json_schema_extra={"examples": [{"ids": [1, 310, 42, 2]}]})


class TextOut(BaseModel):
    text: str


class DetokenizeResponse(BaseModel):
    results: list[TextOut]
