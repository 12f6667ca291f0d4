"""/glossaries: a stored glossary's request, its description and its entries."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.fields import Entries, Request, Text


class GlossaryRequest(Request):
    name: Text = Field(description="a name for it (not necessarily unique)")
    source_lang: Text = Field(description="the language of the source terms, as a model names it (`en`, `deu_Latn`)")
    target_lang: Text = Field(description="the language of the target terms")
    entries: Entries = Field(
        description="source term -> target term, or the entries as text in `entries_format`: DeepL's TSV "
        "(`source<TAB>target` a line) or CSV (`source,target` a line)"
    )
    entries_format: Literal["tsv", "csv"] = Field("tsv", description="how `entries` is written, when it is text")
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"name": "bikes", "source_lang": "en", "target_lang": "de", "entries": {"bike": "Velo"}}]
        }
    )


class GlossaryOut(BaseModel):
    glossary_id: str
    name: str
    ready: bool = Field(description="always true: a glossary is ready once stored")
    source_lang: str
    target_lang: str
    creation_time: str = Field(description="ISO 8601, UTC, to the millisecond")
    entry_count: int


class GlossariesResponse(BaseModel):
    glossaries: list[GlossaryOut] = Field(description="every stored glossary, oldest first")


class GlossaryEntriesResponse(BaseModel):
    glossary_id: str
    entries: dict[str, str] = Field(description="source term -> target term, in the glossary's order")
