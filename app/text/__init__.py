"""The text side: requests in text, translations out, through an engine core (app/engine/) in token ids. It runs in
the server process, or in each front-end apart from the engine process (NMT_FRONTENDS), and imports no torch.

- `engine.py`     Engine: validates and tokenizes requests, hands them to its core in token ids, formats the results
- `directions.py` Directions: the languages a model translates between, and what a request's languages mean for it
- `limits.py`     Limits: what a request may ask for, and the 4xx messages that say so
- `documents.py`  a request's texts split into segments that decode together, and put back; `protected.py`
                  protected spans through them; `glossary.py` a request's glossary as decoding constraints
- `results.py`    translations, n-best lists, alignments, word confidences; `streaming.py` a streamed translation's
                  events (Token, Finished)
- `inspection.py` /tokenize, /detokenize and /attention: looking inside the model
- `offload.py`    text work inline or on a thread
"""

import importlib

# Imported on first use, so that importing the package (app/protect/ raises the engine's errors) loads nothing more
_LAZY = {"Attention": "app.text.results", "Engine": "app.text.engine", "Translation": "app.text.results",
         "INLINE_CHARS": "app.text.offload"}  # fmt: skip

__all__ = ["INLINE_CHARS", "Attention", "Engine", "Translation"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
