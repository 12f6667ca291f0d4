"""The engine: requests in, translations out, the model run by one scheduling loop.

- `engine.py`     Engine: validates and tokenizes requests, hands them to its core in token ids, formats the results
- `directions.py` Directions: the languages a model translates between, and what a request's languages mean for it
- `inspection.py` /tokenize, /detokenize and /attention: looking inside the model
- `core.py`       EngineCore: the model, its KV cache, the batcher and the compiled graphs, in token ids
- `remote.py`     RemoteCore: an EngineCore in the engine process, for a front-end (NMT_FRONTENDS); `wire.py` their
                  messages; `core_server.py` the engine process's side
- `limits.py`     Limits: what a request may ask for, and the 4xx messages that say so
- `sequence.py`   the state of a submitted sequence or call, and the stream of a streaming one
- `scheduler.py`  Batcher: the worker thread's loop (admission, one decoder step for every live row, faults)
- `compiling.py`  Compiler: NMT_COMPILE, compiling before serving or beside it and swapping the graphs in
- `errors.py`     what the engine raises, each mapped to an HTTP status by app/errors.py

The decoding strategies (greedy, beam search, sampling) are model-level code in model/search.py, shared with
nmt-eval; this package touches tensors only on the worker thread, and on the compiling thread, which has a KV
cache of its own.
"""

import importlib

from app.engine.errors import (
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
)  # fmt: skip

# Imported on first use, so that importing the errors (app/protect/ raises two) does not load the engine
_LAZY = {"Attention": "app.engine.results", "Engine": "app.engine.engine", "Translation": "app.engine.results",
         "INLINE_CHARS": "app.engine.offload"}  # fmt: skip

__all__ = [
    "INLINE_CHARS", "Attention", "Engine", "EngineFailure", "EngineUnavailable", "InputTooLong", "InvalidRequest", "OutOfMemory",
    "QueueFull", "RequestTimeout", "Translation",
]  # fmt: skip


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
