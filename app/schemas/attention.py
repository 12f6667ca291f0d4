"""/attention: the model's attention weights over a text and its translation, for the viewer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.fields import Language, Request, Text


class AttentionRequest(Request):
    text: Text
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    target: Text | None = Field(
        None, description="teacher-force this translation; default: the one /translate gives (the model's own; a text "
        "without a letter as written)",
    )  # fmt: skip
    source_language: Language | None = Field(
        None, description="the text's language, named as /translate's `source`: picks the model as it does; a "
        "many-to-many model's source tokens carry its code (default its saved source language; `auto` detects it)",
    )  # fmt: skip
    target_language: Language | None = Field(
        None, description="the translation's language, named as /translate's `target`: picks the model as it does; a "
        "many-to-many model's decoder is fed its code (default its saved target language)",
    )  # fmt: skip
    layers: list[int] | None = Field(None, description="layer indices to return; default all")
    heads: list[int] | None = Field(None, description="head indices to return; default all")
    average_heads: bool = Field(False, description="average the selected heads into one")
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "A man is riding a bike.", "layers": [0]}]})


class AttentionResponse(BaseModel):
    """Lists are [layer][head][query][key]. Decoder tokens are the decoder's inputs: `<s>` and the
    translation's pieces; row t is the attention that predicted token t+1, so the last row predicted `</s>`."""

    encoder_tokens: list[str]
    decoder_tokens: list[str]
    translation: str
    layers: list[int]
    heads: list[int] = Field(description="the heads averaged when average_heads is set")
    encoder_attention: list[list[list[list[float]]]] = Field(description="[L][H][S][S]")
    decoder_attention: list[list[list[list[float]]]] = Field(description="[L][H][T][T]")
    cross_attention: list[list[list[list[float]]]] = Field(description="[L][H][T][S]")
