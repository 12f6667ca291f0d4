"""/metrics on the HTTP side: RequestMetrics, the middleware that counts and times each request by its route, into
app/engine/metrics.py's series (Metrics, EngineMetrics, named here too)."""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.engine.metrics import EngineMetrics, Metrics

try:
    from fastapi.routing import iter_route_contexts  # FastAPI that keeps included routers whole (0.165)
except ImportError:  # one that flattens them: app.routes holds every route with its full path
    iter_route_contexts = None

__all__ = ["CONTENT_TYPE_LATEST", "EngineMetrics", "Metrics", "RequestMetrics"]


class RequestMetrics:
    """ASGI middleware: count each HTTP request by route and status, and time it to the end of its response."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app, self.metrics = app, metrics
        self.templates: Templates | None = None  # read from the app that serves the first request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if self.templates is None:
                self.templates = Templates(scope["app"].routes)
            endpoint = self.templates.of(scope)
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)


class Templates:
    """The path template of each of an app's routes, as a request to it is labelled. Paths no route has share the
    label `unmatched`, so that a scan of random paths adds one series, not one per path."""

    def __init__(self, routes: list[BaseRoute]):
        # FastAPI keeps an included router's routes inside it, each with its path before the prefix (LibreTranslate's
        # "/translate" would be counted as ours), so each route's full template comes from its context in the app.
        contexts = list(iter_route_contexts(routes)) if iter_route_contexts else routes
        self.routes = [(c, c.path_format) for c in contexts]
        # a router included twice (DeepL's, at /deepl and at /v2) has each route under two templates
        self.by_route: dict[int, list[tuple[BaseRoute, str]]] = {}
        for c, path in self.routes:
            self.by_route.setdefault(id(getattr(c, "original_route", c)), []).append((c, path))

    def of(self, scope: Scope) -> str:
        """The template of the route that answered, else of the one the path matches (FastAPI's /docs, /redoc and
        /openapi.json, and requests answered before routing, such as an early 413, carry no route)."""
        route = scope.get("route")
        if route is not None:
            found = self.by_route.get(id(route), [])
            if len(found) > 1:
                found = [(c, path) for c, path in found if c.matches(scope)[0] == Match.FULL] or found
            return found[0][1] if found else route.path
        partial = "unmatched"
        for context, path in self.routes:
            match = context.matches(scope)[0]
            if match == Match.FULL:
                return path
            if match == Match.PARTIAL and partial == "unmatched":  # the path with another method: a 405
                partial = path
        return partial
