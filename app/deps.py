"""The routes' dependencies: what they read from app.state, and the API key check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.glossaries import GlossaryStore
from app.models import Models
from app.settings import Settings
from app.text import Engine

bearer = HTTPBearer(auto_error=False, description="the server's NMT_API_KEY")


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_models(request: Request) -> Models:
    return request.app.state.models


ModelsDep = Annotated[Models, Depends(get_models)]


async def get_engine(models: ModelsDep, model: str | None = None) -> Engine:
    """The engine of the `model` query parameter, else the default model's."""
    return models.pick(model)


EngineDep = Annotated[Engine, Depends(get_engine)]


async def get_glossaries(request: Request) -> GlossaryStore:
    return request.app.state.glossaries


GlossariesDep = Annotated[GlossaryStore, Depends(get_glossaries)]


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
