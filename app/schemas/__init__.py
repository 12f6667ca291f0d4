"""Request and response bodies, one module per API; every name is here too (`from app import schemas as s`).

- `fields.py`       the checked field types (Text, Texts, Language, Ids, Glossary, Entries; scrub, auto), Request,
                    ErrorResponse
- `translate.py`    TranslateRequest
- `translation.py`  TranslateResponse and what it holds (TranslationOut, HypothesisOut, SegmentOut, Signals, ...)
- `stream.py`       the server-sent events of `"stream": true` (TokenEvent, EndEvent, ErrorEvent)
- `tokens.py`       /tokenize and /detokenize
- `attention.py`    /attention
- `info.py`         /health, /ready, /models and /info
- `glossaries.py`   /glossaries
- `jobs.py`         /files' jobs
"""

from app.schemas.attention import AttentionRequest, AttentionResponse
from app.schemas.fields import (
    SURROGATES,
    Entries,
    ErrorResponse,
    Glossary,
    Ids,
    Language,
    Request,
    Side,
    Text,
    Texts,
    auto,
    scrub,
)
from app.schemas.glossaries import GlossariesResponse, GlossaryEntriesResponse, GlossaryOut, GlossaryRequest
from app.schemas.info import (
    CompileInfo,
    InfoResponse,
    LanguageOut,
    MemoryInfo,
    ModelOut,
    ModelsResponse,
    ReadyResponse,
    StatusResponse,
    WorkerInfo,
)
from app.schemas.jobs import JobOut, ProgressOut
from app.schemas.stream import EndEvent, ErrorEvent, StreamedToken, StreamEvent, TokenEvent, WithheldSegment
from app.schemas.tokens import (
    DetokenizeRequest,
    DetokenizeResponse,
    TextOut,
    TokenizeRequest,
    TokenizeResponse,
    TokenizeResult,
    TokenOut,
)
from app.schemas.translate import TranslateRequest
from app.schemas.translation import (
    CONFIDENCE,
    FLAGS,
    AlignedOut,
    Flag,
    HypothesisOut,
    SegmentOut,
    Signals,
    TranslateResponse,
    TranslationOut,
    Usage,
    WithheldOut,
    WordOut,
)

__all__ = [
    "CONFIDENCE", "FLAGS", "SURROGATES", "AlignedOut", "AttentionRequest", "AttentionResponse", "CompileInfo",
    "DetokenizeRequest", "DetokenizeResponse", "EndEvent", "Entries", "ErrorEvent", "ErrorResponse", "Flag",
    "GlossariesResponse", "Glossary", "GlossaryEntriesResponse", "GlossaryOut", "GlossaryRequest", "HypothesisOut",
    "Ids", "InfoResponse", "JobOut", "Language", "LanguageOut", "MemoryInfo", "ModelOut", "ModelsResponse",
    "ProgressOut", "ReadyResponse", "Request", "SegmentOut", "Side", "Signals", "StatusResponse", "StreamEvent",
    "StreamedToken", "Text", "TextOut", "Texts", "TokenEvent", "TokenOut", "TokenizeRequest", "TokenizeResponse",
    "TokenizeResult", "TranslateRequest", "TranslateResponse", "TranslationOut", "Usage", "WithheldOut",
    "WithheldSegment", "WordOut", "WorkerInfo", "auto", "scrub",
]  # fmt: skip
