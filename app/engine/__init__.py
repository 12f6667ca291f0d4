"""The engine: requests in, translations out, the model run by one scheduling loop.

- `engine.py`     Engine: validates and tokenizes requests, hands them to its core in token ids, formats the results
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

from app.engine.engine import Attention, Engine, Translation
from app.engine.errors import (
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
)  # fmt: skip
from app.engine.offload import INLINE_CHARS

__all__ = [
    "INLINE_CHARS", "Attention", "Engine", "EngineFailure", "EngineUnavailable", "InputTooLong", "InvalidRequest", "OutOfMemory",
    "QueueFull", "RequestTimeout", "Translation",
]  # fmt: skip
