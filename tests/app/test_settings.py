"""Settings come from NMT_* variables, and the default model is the bundled checkpoint wherever we run from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import BUNDLED_MODEL_DIR, Settings


def test_defaults_point_at_the_bundled_checkpoint(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NMT_COMPILE")  # tests/conftest.py turns compiling off for the suite
    s = Settings()
    assert s.model_dir == BUNDLED_MODEL_DIR and s.model_dir.is_absolute()
    assert BUNDLED_MODEL_DIR == Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"
    assert (s.device, s.dtype, s.max_input_tokens, s.max_new_tokens, s.max_batch_texts) == (
        "auto",
        "float32",
        256,
        256,
        64,
    )
    assert s.api_key is None and s.compile == "background"  # a server compiles unless told not to, beside serving
    assert (s.max_queue, s.max_batch_size, s.request_timeout_s) == (None, None, 60.0)  # the engine sizes them
    assert s.max_request_sequences is None  # half of the queue the engine sizes


def test_environment_variables_with_the_nmt_prefix(monkeypatch):
    monkeypatch.setenv("NMT_MAX_NEW_TOKENS", "12")
    monkeypatch.setenv("NMT_API_KEY", "s3cret-key")
    monkeypatch.setenv("NMT_MODEL_DIR", "/models/x")
    monkeypatch.setenv("NMT_MAX_QUEUE", "80")
    monkeypatch.setenv("NMT_REQUEST_TIMEOUT_S", "2.5")
    s = Settings()
    assert (s.max_new_tokens, s.api_key.get_secret_value(), s.model_dir) == (12, "s3cret-key", Path("/models/x"))
    assert (s.max_queue, s.request_timeout_s) == (80, 2.5)
    assert "s3cret" not in repr(s)  # the key is never printed
    monkeypatch.setenv("NMT_API_KEY", "")
    assert Settings().api_key is None


def test_a_requests_share_of_the_queue_is_read_and_empty_leaves_it_to_the_engine(monkeypatch):
    monkeypatch.setenv("NMT_MAX_REQUEST_SEQUENCES", "100")
    assert Settings().max_request_sequences == 100
    monkeypatch.setenv("NMT_MAX_REQUEST_SEQUENCES", "")  # as docker-compose.yml passes a variable left unset
    assert Settings().max_request_sequences is None


@pytest.mark.parametrize(
    "env",
    [
        {"NMT_DTYPE": "float64"}, {"NMT_MAX_INPUT_TOKENS": "0"}, {"NMT_PORT": "http"}, {"NMT_MAX_QUEUE": "0"},
        {"NMT_REQUEST_TIMEOUT_S": "0"}, {"NMT_MAX_REQUEST_SEQUENCES": "0"}, {"NMT_COMPILE_JOBS": "-1"},
        {"NMT_COMPILE_JOBS": "many"},
    ],
)  # fmt: skip
def test_bad_values_are_refused(monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.parametrize(
    ("value", "mode"),
    [("background", "background"), ("blocking", "blocking"), ("off", "off"), ("true", "blocking"),
     ("True", "blocking"), ("false", "off"), ("0", "off")],
)  # fmt: skip
def test_nmt_compile_takes_a_mode_or_the_booleans_of_earlier_versions(monkeypatch, value, mode):
    monkeypatch.setenv("NMT_COMPILE", value)  # true compiled before serving, which is now `blocking`
    assert Settings().compile == mode


def test_nmt_compile_refuses_other_values(monkeypatch):
    monkeypatch.setenv("NMT_COMPILE", "later")
    with pytest.raises(ValidationError, match="background"):
        Settings()


def test_a_compile_cache_directory_becomes_inductors(monkeypatch, tmp_path, tiny_checkpoint):
    from app.loading import load_engine

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))  # restored after the test
    s = Settings(model_dir=tiny_checkpoint, compile="off", compile_cache_dir=tmp_path / "graphs")
    load_engine(s)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "before"), "off compiles nothing"
    load_engine(s.model_copy(update={"compile": "background"}))  # not started: compiles nothing yet
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "graphs")
    assert (tmp_path / "graphs").is_dir()


def test_glossaries_live_in_the_users_data_directory_unless_nmt_glossary_dir_says_where(monkeypatch, tmp_path):
    monkeypatch.delenv("NMT_GLOSSARY_DIR")  # tests/conftest.py gives the suite a directory of its own
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings().glossaries() == tmp_path / ".local" / "share" / "nmt-serve" / "glossaries"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert Settings().glossaries() == tmp_path / "data" / "nmt-serve" / "glossaries"
    for unset in ("", None):
        if unset is not None:
            monkeypatch.setenv("NMT_GLOSSARY_DIR", unset)  # as docker-compose.yml passes a variable left empty
        assert Settings().glossary_dir is None
    monkeypatch.setenv("NMT_GLOSSARY_DIR", "/srv/glossaries")
    assert Settings().glossaries() == Path("/srv/glossaries")


def test_cors_origins_are_a_list_star_for_any_and_empty_for_none(monkeypatch):
    assert Settings().origins() == ["*"]
    monkeypatch.setenv("NMT_CORS_ORIGINS", " https://a.example/ ,https://b.example:8443")
    assert Settings().origins() == ["https://a.example", "https://b.example:8443"]
    monkeypatch.setenv("NMT_CORS_ORIGINS", "")
    assert Settings().origins() == []


def test_front_ends_and_workers_are_two_ways_to_use_processes_and_exclude_each_other(monkeypatch):
    monkeypatch.setenv("NMT_FRONTENDS", "2")
    assert Settings().frontends == 2
    monkeypatch.setenv("NMT_WORKERS", "2")
    with pytest.raises(ValidationError, match="frontends and workers"):
        Settings()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NMT_MAX_QUEUE": "10"}, "max_queue=10 is below max_batch_texts=64"),
        ({"NMT_MAX_REQUEST_SEQUENCES": "8"}, "max_request_sequences=8 must be at least max_batch_texts=64"),
        ({"NMT_MAX_QUEUE": "100", "NMT_MAX_REQUEST_SEQUENCES": "200"}, "and at most max_queue=100"),
    ],
)
def test_a_queue_or_request_share_that_cannot_admit_a_full_request_is_refused_as_a_setting(monkeypatch, env, message):
    """Before any model loads, by the settings' names: the engine said so as a model that failed to load."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=message):
        Settings()


def test_the_queue_of_several_front_ends_fits_each_ones_largest_request(monkeypatch, tiny_checkpoint):
    """Each front-end admits max_queue / frontends sequences: a queue set too small for that is refused at start by
    name; unset, the engine sizes it to fit (else every front-end would fail to load its models)."""
    from app.loading import load_engine

    monkeypatch.setenv("NMT_FRONTENDS", "8")
    monkeypatch.setenv("NMT_MAX_QUEUE", "256")
    with pytest.raises(ValidationError, match=r"max_queue=256 is shared by frontends=8.*at least 512"):
        Settings()
    monkeypatch.delenv("NMT_MAX_QUEUE")
    engine = load_engine(Settings(model_dir=tiny_checkpoint, compile="off"))
    try:
        assert engine.core.max_queue == 8 * 64
    finally:
        engine.stop()
