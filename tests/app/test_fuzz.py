"""Generated and malformed requests at every endpoint: never a 5xx, and every error is {"error", "type"}. Each runs
against one process and against a front-end whose models an engine process serves (tests/app/conftest.py's MODES), so
that what gets past the front-end's checks reaches the engine over its wire too."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import pytest
import schemathesis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODES, engine_process, served_in
from tests.app.helpers import assert_handled

served = pytest.fixture(scope="module", params=MODES, name="served")(served_in)
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=12,
)
texts = st.text(max_size=60) | st.lists(st.text(max_size=40), max_size=10)
ids = st.lists(st.integers(-1, 545), max_size=12) | st.lists(st.lists(st.integers(-1, 545), max_size=6), max_size=10)
small_ints = st.lists(st.integers(-2, 5), max_size=5)
languages = st.sampled_from(["en", "de", "auto", "xx", "", "de_Latn", "zh-Hant"]) | st.text(max_size=8)
FIELDS = {  # near-valid values for each field, so generated bodies also get past the schema
    "/tokenize": {
        "text": texts, "side": st.sampled_from(["source", "target", "x"]), "add_special_tokens": st.booleans(),
        "language": languages,
    },
    "/detokenize": {"ids": ids, "side": st.sampled_from(["source", "target"]), "skip_special_tokens": st.booleans()},
    "/translate": {
        "text": texts, "max_new_tokens": st.integers(-1, 14), "return_tokens": st.booleans(),
        "return_scores": st.booleans(), "truncate": st.booleans(),
        "min_confidence": st.floats(-0.5, 1.5) | st.sampled_from([0, 1, "0.5", None]), "return_signals": st.booleans(),
        "return_segments": st.booleans(), "return_word_confidence": st.booleans(),
        "glossary": st.dictionaries(st.sampled_from(["dog", "a man", "Dog", " ", "", "x\ty"]) | st.text(max_size=8),
                                    st.text(max_size=8), max_size=4),
        "glossary_id": st.sampled_from(["0b7e3b1e-0000-4000-8000-000000000000", "x", "../x", ""]) | st.text(max_size=40),
        "glossary_ignore_case": st.booleans(),
        "protect": st.booleans() | st.lists(st.sampled_from(["placeholders", "tags", "urls", "emails", "code", "x"])),
        "protect_terms": st.lists(st.sampled_from(["dog", "{x}", " ", "", "a" * 201]) | st.text(max_size=8), max_size=4),
        "protect_patterns": st.lists(st.sampled_from([r"\d+", "(a", "a*", r"\b", "[a-z]+", r"(?<=a)b", "x{1000}"])
                                     | st.text(max_size=10), max_size=3),
    },
    "/attention": {
        "text": st.text(max_size=60), "target": st.text(max_size=40), "layers": small_ints, "heads": small_ints,
        "average_heads": st.booleans(), "source_language": languages, "target_language": languages,
    },
    "/glossaries": {
        "name": st.text(max_size=20), "source_lang": languages, "target_lang": languages,
        "entries": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4) | st.text(max_size=60),
        "entries_format": st.sampled_from(["tsv", "csv", "xml"]),
    },
    "/deepl/v2/translate": {
        "text": texts, "target_lang": languages, "source_lang": languages, "context": st.text(max_size=20),
        "tag_handling": st.sampled_from(["html", "xml", "md"]), "split_sentences": st.sampled_from(["0", "1", "nonewlines", 2]),
        "ignore_tags": st.lists(st.sampled_from(["b", "x", ""]), max_size=3) | st.text(max_size=8),
        "non_splitting_tags": st.lists(st.sampled_from(["g", "x", "p", ""]), max_size=3) | st.text(max_size=8),
        "splitting_tags": st.lists(st.sampled_from(["b", "x", ""]), max_size=3) | st.text(max_size=8),
        "formality": st.sampled_from(["default", "less", "prefer_less", "x"]), "glossary_id": st.text(max_size=40),
        "glossary_ids": st.lists(st.text(max_size=8), max_size=6), "show_billed_characters": st.booleans(),
        "preserve_formatting": st.booleans() | st.sampled_from(["0", "1", "x"]),
        "model_type": st.sampled_from(["quality_optimized", "latency_optimized", "x"]),
    },
}  # fmt: skip
OTHER_PATHS = ["/health", "/ready", "/info", "/", "/translate/x", "/glossaries/x", "/v2/glossaries",
               "/deepl/v2/glossaries/x/entries", "/files", "/files/x", f"/files/{'0' * 32}/events", "/files/x/download",
               "/libretranslate/translate_file", "/libretranslate/download_file/x.txt", "/v2/document",
               f"/deepl/v2/document/{'0' * 32}", "/deepl/v2/document/x/result"]  # fmt: skip
REQUIRED = {"/detokenize": ["ids"], "/glossaries": ["name", "source_lang", "target_lang", "entries"],
            "/deepl/v2/translate": ["text", "target_lang"]}  # fmt: skip


def bodies(path: str) -> st.SearchStrategy:
    """Mostly well-typed bodies (to reach the engine), plus any field set to any JSON, plus any JSON at all."""
    required = REQUIRED.get(path, ["text"])
    typed = {k: v for k, v in FIELDS[path].items() if k not in required}
    well_typed = st.fixed_dictionaries({k: FIELDS[path][k] for k in required}, optional=typed)
    anything = st.fixed_dictionaries({}, optional={k: v | json_values for k, v in FIELDS[path].items()})
    extra = st.dictionaries(st.text(max_size=8), json_values, max_size=2)
    with_extra = st.tuples(anything, extra).map(lambda pair: {**pair[1], **pair[0]})
    return st.one_of(well_typed, well_typed, anything, with_extra, json_values)


def fuzz_json_bodies(path: str):
    @pytest.mark.anyio
    @FUZZ
    @given(body=bodies(path))
    async def test(client, body):
        r = await client.post(path, json=body)
        event(f"status {r.status_code}")
        assert_handled(r, path)

    test.__doc__ = f"Generated JSON bodies at POST {path}."
    return test


files = st.tuples(st.sampled_from(["a.txt", "a.srt", "a.docx", "a", ""]) | st.text(max_size=12),
                  st.binary(max_size=200) | texts.map(lambda t: str(t).encode()))  # fmt: skip
UPLOAD_FIELDS = {  # multipart fields beside a file
    "/files": {
        "target": languages, "source": languages, "model": st.sampled_from(["tiny", "x", ""]),
        "format": st.sampled_from(["txt", "srt", "docx", "pdf", ""]) | st.text(max_size=6),
        "glossary_id": st.sampled_from(["0b7e3b1e-0000-4000-8000-000000000000", "x", ""]),
        "beam_size": st.integers(-1, 9).map(str) | st.text(max_size=3),
    },
    "/libretranslate/translate_file": {"source": languages, "target": languages, "api_key": st.text(max_size=8)},
    "/deepl/v2/document": {
        "target_lang": languages, "source_lang": languages, "filename": st.text(max_size=12),
        "glossary_id": st.text(max_size=8), "output_format": st.sampled_from(["txt", "docx", ""]),
        "formality": st.sampled_from(["default", "less", "x"]),
    },
}  # fmt: skip


def fuzz_uploads(path: str):
    @pytest.mark.anyio
    @FUZZ
    @given(fields=st.fixed_dictionaries({}, optional=UPLOAD_FIELDS[path]), file=st.none() | files)
    async def test(client, fields, file):
        parts = [(k, (None, v)) for k, v in fields.items()] + ([("file", file)] if file else [])
        r = await client.post(path, files=parts or [("other", (None, ""))])
        event(f"status {r.status_code}")
        assert_handled(r, path)

    test.__doc__ = f"Generated multipart uploads at POST {path}."
    return test


test_files_uploads = fuzz_uploads("/files")
test_libretranslate_file_uploads = fuzz_uploads("/libretranslate/translate_file")
test_deepl_document_uploads = fuzz_uploads("/deepl/v2/document")
test_tokenize_bodies = fuzz_json_bodies("/tokenize")
test_detokenize_bodies = fuzz_json_bodies("/detokenize")
test_translate_bodies = fuzz_json_bodies("/translate")
test_attention_bodies = fuzz_json_bodies("/attention")
test_glossaries_bodies = fuzz_json_bodies("/glossaries")
test_deepl_translate_bodies = fuzz_json_bodies("/deepl/v2/translate")


@pytest.mark.anyio
@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=st.sampled_from([*FIELDS, *OTHER_PATHS]),
    body=st.binary(max_size=80)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.sampled_from([b'{"text": NaN}', b'{"text": "a", "max_new_tokens": Infinity}', b'{"ids": [1e400]}']),
    content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded", None]),
)
async def test_raw_bodies_methods_and_content_types_never_cause_a_5xx(client, method, path, body, content_type):
    headers = {"content-type": content_type} if content_type else {}
    assert_handled(await client.request(method, path, content=body, headers=headers), path)


@pytest.fixture(scope="module", params=MODES)
def api_schema(tiny_checkpoint, tmp_path_factory, request):
    """The app's own OpenAPI schema, of one process or of a front-end; loading it starts the app's lifespan on
    schemathesis' event loop."""
    glossaries = tmp_path_factory.mktemp("glossaries")
    settings = Settings(model_dir=tiny_checkpoint, max_input_tokens=64, max_new_tokens=12, max_batch_texts=8,
                        glossary_dir=glossaries)  # fmt: skip
    with ExitStack() as stack:
        if request.param == "front-end":
            settings = stack.enter_context(engine_process(settings))[0]
        app = create_app(settings)
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        deadline = time.monotonic() + 60
        while not (app.state.engine and app.state.engine.ready) and time.monotonic() < deadline:
            assert app.state.load_error is None, app.state.load_error
            time.sleep(0.05)
        schema.config.generation.update(modes=list(GenerationMode), max_examples=60)
        yield schema
        asgi.shutdown_lifespans()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis(case):
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    if case.meta and case.meta.generation.mode == GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    response = case.call()
    case.validate_response(response, checks=checks)
    assert_handled(response, case.path)
