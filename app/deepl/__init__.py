"""A DeepL-compatible API (v2), mounted at /deepl (and at /v2, where DeepL's own server has it): DeepL's fields,
answers, status codes and language codes, backed by the engines and the glossary store, so that DeepL's clients
(`deepl` for Python, `deepl-node`) work unmodified with this server as their server URL. Errors are
`{"message": ...}`, DeepL's shape, with our `type` beside it.

- `routes.py`     the router and its endpoints (translate, languages, usage, glossaries, documents) and the API key
- `fields.py`     a request's fields (JSON, form or query string) read and checked as DeepL checks them
- `languages.py`  DeepL's language codes, and the engine that translates a pair
- `errors.py`     DeepLError, and DeepL's error body and status codes for it and for ours
"""

from app.deepl.errors import answer, speaks
from app.deepl.routes import router

__all__ = ["answer", "router", "speaks"]
