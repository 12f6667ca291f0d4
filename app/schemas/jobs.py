"""/files: a document's translation job, its progress and where its result is."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ProgressOut(BaseModel):
    done: int = Field(description="segments (paragraphs, cells, subtitles, strings) translated so far")
    total: int = Field(description="segments of the file")


class JobOut(BaseModel):
    id: str = Field(description="the job's id: 32 hexadecimal digits")
    status: Literal["queued", "running", "done", "failed"]
    progress: ProgressOut
    filename: str = Field(description="the uploaded file's name")
    output_filename: str = Field(description="the translated file's name, e.g. report.de.docx")
    format: str = Field(description="the file's format: txt, html, docx, pptx, xlsx, odt, srt, vtt, po, xliff or md")
    model: str
    source: str | None = Field(description="the source language the request named (or detected); null: the model's")
    target: str | None
    created: str = Field(description="ISO 8601, UTC")
    finished: str | None = Field(description="when it became done or failed")
    expires: str | None = Field(description="when a finished job and its files are deleted (NMT_JOB_RETENTION_S)")
    error: str | None = Field(description="why it failed")
    error_type: str | None = Field(description="the kind of that error, as an error response's `type`")
    download: str | None = Field(description="where the translated file is, once done")
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "id": "5f0c9e1d2b7a4c3e8f6a1b2c3d4e5f60", "status": "running", "progress": {"done": 8, "total": 20},
                "filename": "report.docx", "output_filename": "report.de.docx", "format": "docx",
                "model": "multi30k-en-de", "source": None, "target": "de", "created": "2026-05-01T09:30:00.000Z",
                "finished": None, "expires": None, "error": None, "error_type": None, "download": None,
            }]
        }
    )  # fmt: skip
