"""HTTP routes: validate, hand to the engine, format. No tensor work here."""

from __future__ import annotations

import hmac
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app import schemas as s
from app.engine import Engine, EngineUnavailable
from app.settings import Settings

try:
    VERSION = version("nmt-serve")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"

ERRORS = {status: {"model": s.ErrorResponse} for status in (401, 413, 422, 500, 503)}
bearer = HTTPBearer(auto_error=False, description="the server's NMT_API_KEY")


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_engine(request: Request) -> Engine:
    engine = request.app.state.engine
    if engine is None or not engine.ready:
        raise EngineUnavailable(not_ready_reason(request))
    return engine


async def require_api_key(
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """Constant-time check of `Authorization: Bearer <key>`; create_app adds it when NMT_API_KEY is set."""
    expected = settings.api_key.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials else b""
    if not hmac.compare_digest(given, expected):
        problem = "is wrong" if credentials else "is missing"
        raise HTTPException(
            401, f"the API key {problem}; send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
        )


def not_ready_reason(request: Request) -> str:
    error = request.app.state.load_error
    if error:
        return f"the model failed to load: {error}"
    engine = request.app.state.engine
    return (
        "the server is shutting down"
        if engine and engine.batcher.stopped
        else "the model is still loading; poll GET /ready"
    )


EngineDep = Annotated[Engine, Depends(get_engine)]
open_routes = APIRouter()
router = APIRouter(responses=ERRORS)  # behind require_api_key when a key is set


@open_routes.get("/health", response_model=s.StatusResponse)
async def health() -> s.StatusResponse:
    """Liveness: 200 while the process runs, even before the model is loaded."""
    return s.StatusResponse(status="ok")


@open_routes.get("/ready", response_model=s.StatusResponse, responses={503: {"model": s.ErrorResponse}})
async def ready(request: Request):
    """Readiness: 200 once the model is loaded and warmed up, 503 before (and while shutting down)."""
    engine = request.app.state.engine
    if engine is not None and engine.ready:
        return s.StatusResponse(status="ready")
    failed = request.app.state.load_error is not None
    return JSONResponse({"error": not_ready_reason(request), "type": "load_failed" if failed else "not_ready"}, 503)


@router.get("/info", response_model=s.InfoResponse)
async def info(engine: EngineDep) -> s.InfoResponse:
    """The model, its config and size, the device, and the request limits."""
    return s.InfoResponse(version=VERSION, **engine.info())


@router.post("/tokenize", response_model=s.TokenizeResponse)
async def tokenize(body: s.TokenizeRequest, engine: EngineDep) -> s.TokenizeResponse:
    """Split texts into tokens with ids and character offsets."""
    results = await engine.tokenize(body.text, body.side, body.add_special_tokens)
    return s.TokenizeResponse(
        results=[s.TokenizeResult(tokens=[s.TokenOut(**t.__dict__) for t in toks], count=len(toks)) for toks in results]
    )


@router.post("/detokenize", response_model=s.DetokenizeResponse)
async def detokenize(body: s.DetokenizeRequest, engine: EngineDep) -> s.DetokenizeResponse:
    """Turn token ids back into text."""
    texts = await engine.detokenize(body.ids, body.side, body.skip_special_tokens)
    return s.DetokenizeResponse(results=[s.TextOut(text=t) for t in texts])


@router.post("/translate", response_model=s.TranslateResponse, response_model_exclude_none=True)
async def translate(body: s.TranslateRequest, engine: EngineDep) -> s.TranslateResponse:
    """Translate English to German with greedy decoding."""
    out = await engine.translate(body.text, body.max_new_tokens, body.truncate)
    return s.TranslateResponse(
        translations=[
            s.TranslationOut(
                text=t.text,
                finish_reason=t.finish_reason,
                truncated=t.truncated,
                tokens=t.tokens if body.return_tokens else None,
                token_ids=t.token_ids if body.return_tokens else None,
                score=round(t.score, 4) if body.return_scores else None,
            )
            for t in out
        ],
        usage=s.Usage(input_tokens=sum(t.input_tokens for t in out), output_tokens=sum(t.output_tokens for t in out)),
        model=engine.name,
    )


@router.post("/attention", response_model=s.AttentionResponse)
async def attention(body: s.AttentionRequest, engine: EngineDep) -> s.AttentionResponse:
    """Encoder self-, decoder self- and cross-attention weights for one text, in bertviz's layout."""
    a = await engine.attention(body.text, body.target, body.layers, body.heads, body.average_heads)
    return s.AttentionResponse(**a.__dict__)
