"""Moved to app/engine/scheduler.py."""

from app.engine.errors import EngineFailure, EngineUnavailable, OutOfMemory, QueueFull
from app.engine.scheduler import MAX_OOM_RETRIES, Batcher

__all__ = ["MAX_OOM_RETRIES", "Batcher", "EngineFailure", "EngineUnavailable", "OutOfMemory", "QueueFull"]
