"""Service settings, read once from NMT_* environment variables (or passed in by the CLI and tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BUNDLED_MODEL_DIR = Path(__file__).resolve().parent.parent / "checkpoints" / "multi30k-en-de"
MAX_BODY_BYTES = 1 << 20  # request bodies over 1 MB get a 413

Dtype = Literal["float32", "float16", "bfloat16"]
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]


class Settings(BaseSettings):
    """Every field can be set as NMT_<NAME> (e.g. NMT_MAX_NEW_TOKENS=128); names are case-insensitive."""

    model_config = SettingsConfigDict(env_prefix="NMT_", extra="ignore")

    model_dir: Path = Field(BUNDLED_MODEL_DIR, description="checkpoint directory to serve")
    device: str = Field("auto", description="auto (cuda when available, else cpu), cpu, cuda or cuda:N")
    dtype: Dtype = Field("float32", description="float16/bfloat16 only on CUDA")
    max_input_tokens: int = Field(256, ge=1, description="source tokens per text, </s> included")
    max_new_tokens: int = Field(256, ge=1, description="upper bound of a request's max_new_tokens")
    max_batch_texts: int = Field(64, ge=1, description="texts (or id lists) per request")
    max_batch_size: int = Field(32, ge=1, description="sequences the engine decodes together")
    prefill_tokens: int = Field(2048, ge=1, description="source tokens admitted into the batch per decoder step")
    waiting_served_ratio: float = Field(
        0.3, ge=0, description="while rows are decoding, new sequences wait until they number this ratio of the "
        "running rows (or max_waiting_steps pass) and are then encoded together; 0 = admit each at once",
    )
    max_waiting_steps: int = Field(4, ge=0, description="decoder steps a new sequence waits at most to be admitted with others")
    max_queue: int = Field(256, ge=1, description="sequences waiting or decoding; a request that does not fit gets 429")
    request_timeout_s: float = Field(60.0, gt=0, description="seconds before an unanswered request gets 504")
    compile: bool = Field(
        True,
        description="torch.compile the encoder and the decoder step at start-up: minutes on a small CPU "
        "(cached on disk for the next start), then about twice the speed; /ready waits for it",
    )
    screen_logits: bool = Field(
        True,
        description="on CPUs with bfloat16 matmuls, find each step's most likely token with a bfloat16 output "
        "projection confirmed in float32 (model/screen.py): the same tokens, log-probabilities within ~3e-3",
    )
    threads: int = Field(
        0, ge=0, description="CPU threads for the model's work (one OpenMP team); 0 = OMP_NUM_THREADS, else one per core"
    )
    api_key: SecretStr | None = Field(None, description="when set, requests need `Authorization: Bearer <key>`")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    log_level: LogLevel = "info"

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v):
        return None if v in ("", None) else v
