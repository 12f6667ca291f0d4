"""What the engine raises to its callers; app/errors.py maps each to an HTTP status."""

from __future__ import annotations


class EngineUnavailable(RuntimeError):
    """The worker is not running: still starting, or shutting down."""


class EngineFailure(RuntimeError):
    """The model raised while serving this request; requests outside that step were not affected."""


class QueueFull(RuntimeError):
    """`max_queue` sequences are already waiting or decoding; the caller should retry later."""


class OutOfMemory(RuntimeError):
    """The device ran out of memory for this sequence even in a smaller batch."""


class InvalidRequest(ValueError):
    """The request breaks a limit or names something that does not exist."""


class InputTooLong(InvalidRequest):
    """A text has more tokens than the server accepts."""


class RequestTimeout(RuntimeError):
    """The request was not answered within NMT_REQUEST_TIMEOUT_S; its sequences were dropped."""
