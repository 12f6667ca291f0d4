"""The engine: the model run by one scheduling loop, in token ids. It imports nothing of the HTTP or text side above
it (app/text/ turns text into its token ids and its results back into text).

- `core.py`       EngineCore: the model, its KV cache, the batcher and the compiled graphs: token ids in, hypotheses
                  (model/hypothesis.py), streams of ids and attention weights (`attention.py`) out
- `remote.py`     RemoteCore: an EngineCore in the engine process, for a front-end (NMT_FRONTENDS); `wire.py` their
                  messages; `core_server.py` the engine process's side
- `sequence.py`   the state of a submitted sequence or call, and the stream of a streaming one
- `scheduler.py`  Batcher: the worker thread's loop (admission, one decoder step for every live row, faults);
                  `waiting.py` its waiting line
- `compiling.py`  Compiler: NMT_COMPILE, compiling before serving or beside it and swapping the graphs in
- `device.py`     the device and dtype; `memory.py` the decoder rows the device holds
- `metrics.py`    the Prometheus series it feeds (and /metrics exposes)
- `errors.py`     what the engine raises, each mapped to an HTTP status by app/errors.py

The decoding strategies (greedy, beam search, sampling) are model-level code in model/search.py, shared with
nmt-eval; this package touches tensors only on the worker thread, and on the compiling thread, which has a KV
cache of its own.
"""

from app.engine.errors import (
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
)  # fmt: skip

__all__ = [
    "EngineFailure", "EngineUnavailable", "InputTooLong", "InvalidRequest", "OutOfMemory", "QueueFull",
    "RequestTimeout",
]  # fmt: skip
