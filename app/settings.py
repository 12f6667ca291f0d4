"""Service settings, read once from NMT_* environment variables (or passed in by the CLI and tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BUNDLED_MODEL_DIR = Path(__file__).resolve().parent.parent / "checkpoints" / "multi30k-en-de"
MAX_BODY_BYTES = 1 << 20  # request bodies over 1 MB get a 413

Dtype = Literal["float32", "float16", "bfloat16"]
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
CompileMode = Literal["background", "blocking", "off"]
Quantize = Literal["none", "int8"]
CompileKernels = Literal["max-autotune", "default"]


class Settings(BaseSettings):
    """Every field can be set as NMT_<NAME> (e.g. NMT_MAX_NEW_TOKENS=128); names are case-insensitive."""

    model_config = SettingsConfigDict(env_prefix="NMT_", extra="ignore")

    model_dir: Path = Field(BUNDLED_MODEL_DIR, description="checkpoint directory to serve (one model)")
    models: str | None = Field(
        None,
        description="several models in one server, `name=directory` separated by commas, e.g. "
        "`en-de=checkpoints/multi30k-en-de,en-fr=checkpoints/multi30k-en-fr`; replaces `model_dir`. A request picks "
        "one by `model` or by its `source`/`target` languages; the first is the default. Each has its own KV cache, "
        "batch and worker thread",
    )
    device: str = Field("auto", description="`auto` (`cuda` when available, else `cpu`), `cpu`, `cuda` or `cuda:N`")
    dtype: Dtype = Field("float32", description="`float16` and `bfloat16` only on CUDA")
    max_input_tokens: int = Field(
        256,
        ge=1,
        description="source tokens per text, `</s>` included; longer gets 413 unless the request sends "
        '`"truncate": true`',
    )
    max_new_tokens: int = Field(
        256,
        ge=1,
        description="the largest `max_new_tokens` a request may ask; a text's default is "
        "`min(this, 2 × its source tokens + 10)`",
    )
    max_batch_texts: int = Field(64, ge=1, description="texts (or id lists) per request")
    max_request_chars: int = Field(
        20_000,
        ge=1,
        description="characters of all of a `/translate` request's texts together; more gets 413. A text is split "
        "into sentences (`split`), each one a sequence of the running batch, so this bounds a request's work",
    )
    max_batch_size: int | None = Field(
        None,
        ge=1,
        description="rows the engine decodes together (KV-cache rows; a beam search takes `beam_size`). Unset: 32 on "
        "a CPU; on a GPU as many as `gpu_memory_fraction` of its memory holds after the weights, up to 1024. `/info` "
        "reports the rows and bytes chosen (`memory`)",
    )
    gpu_memory_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        description="share of the GPU's memory this server may fill (weights, KV cache, workspaces), as vLLM's "
        "`gpu_memory_utilization`: sizes the KV cache when `max_batch_size` is unset",
    )
    prefill_tokens: int = Field(
        2048, ge=1, description="source tokens admitted into the running batch per decoder step"
    )
    waiting_served_ratio: float = Field(
        0.3,
        ge=0,
        description="while rows are decoding, new sequences wait until they number this share of the "
        "running rows (or `max_waiting_steps` pass) and are then encoded together, as TGI's "
        "`--waiting-served-ratio`; `0` admits each at once. An idle server admits at once",
    )
    max_waiting_steps: int = Field(
        4,
        ge=0,
        description="decoder steps a new sequence waits at most to be admitted with others "
        "(as TGI's `--max-waiting-tokens`)",
    )
    max_queue: int | None = Field(
        None,
        ge=1,
        description="sequences waiting or decoding; a request whose texts do not fit gets 429 with "
        "`Retry-After` (must be ≥ `max_batch_texts`, with `frontends` ≥ `frontends` × `max_batch_texts`: each "
        "front-end admits its share). Unset: 256, or the decoder rows where more fit (a GPU's), or `frontends` × "
        "`max_batch_texts` where that is more",
    )
    max_request_sequences: int | None = Field(
        None,
        ge=1,
        description="sequences (sentences, lines or texts; a beam counts once) one request may have waiting or "
        "decoding; more gets 413. Unset: half of `max_queue`, but at least `max_batch_texts` (must be between the "
        "two). Waiting sequences are admitted one request at a time in turn, so a request of many sentences does not "
        "hold up the others",
    )
    request_timeout_s: float = Field(
        60.0, gt=0, description="seconds before an unanswered request gets 504; its sequences leave the batch"
    )
    head_timeout_s: float = Field(
        60.0,
        gt=0,
        description="seconds a connection has to send a request's line and headers, from its opening or from their "
        "first byte (nginx's `client_header_timeout`), and a body between two of its reads (`client_body_timeout`); a "
        "head or body still incomplete then gets 408, a connection that sent nothing is closed. Bounds how long slow "
        "or silent clients hold a connection",
    )
    shutdown_timeout_s: float = Field(
        30.0,
        gt=0,
        description="after SIGTERM (or Ctrl-C), seconds the requests in flight have to finish while new connections "
        "are refused; those still running then get 503 `not_ready` (a stream: an error event) and the server exits, "
        "within about 5 s more. Give the orchestrator's grace period that much (Compose's `stop_grace_period`, 40 s "
        "in docker-compose.yml; Kubernetes' `terminationGracePeriodSeconds`, 30 s unless set)",
    )
    compile: CompileMode = Field(
        "background",
        description="compile the encoder and the decoder steps (AOTInductor) for faster decoding. `background`: serve the "
        "eager model at once and swap the compiled graphs in, between two decoder steps, once they are ready; "
        "`blocking`: compile before `/ready` answers 200; `off` (or `false`): never. If compiling fails the server "
        "logs it and serves the eager model; `/info` says which (`compiled`, `compile`)",
    )
    compile_mode: CompileKernels = Field(
        "max-autotune",
        description="how the graphs are compiled: `max-autotune` benchmarks candidate GEMM kernels for the decoder "
        "steps of fewer than 16 rows and keeps the fastest, and on a CPU builds the steps of 16 rows or more both "
        "ways (oneDNN's packed GEMMs; max-autotune's) and keeps the one that steps faster on this CPU (`/info`'s "
        "`compile.gemms`): longer to compile, faster batches; `default` does neither",
    )
    compile_jobs: int = Field(
        0,
        ge=0,
        description="how many graphs to build at once, each in a process of its own: `0` as many as the cores this "
        "process may run on and the available memory allow (a build holds up to about 1.2 GB and eight times the "
        "model's weights), `1` one after another on the compiling thread. A first start, or `nmt-serve --precompile`, builds "
        "about a dozen graphs; in the background they run at a lower priority than serving. `/info`'s "
        "`compile.jobs` says how many ran at once",
    )
    compile_cache_dir: Path | None = Field(
        None,
        description="directory that keeps the compiled graphs between starts (one AOTInductor package per graph, and "
        "Inductor's own caches, as `TORCHINDUCTOR_CACHE_DIR`): a restart loads them in seconds, `nmt-serve "
        "--precompile` fills it ahead; must be writable, and may be shared by servers. Unset: PyTorch's own default, "
        "`<tmp>/torchinductor_<user>`",
    )
    compile_release_gil: bool = Field(
        True,
        description="run the compiled graphs (on a CPU) with Python's interpreter lock released, as eager PyTorch's "
        "ops run: the event loop, and with `NMT_MODELS` the other models' engines, run Python while a graph runs. "
        "AOTInductor's own binding holds the lock for each whole graph, so two busy compiled models took turns: "
        "77.1 sentences/s together against 138.9 released on a 2-core AMD EPYC (`docs/performance.md`). Needs a "
        "C++ extension of a few lines, built once (under a minute) beside the graphs, or in `TORCH_EXTENSIONS_DIR`; "
        "where it cannot be built the server logs a warning and runs the graphs holding the lock",
    )
    quantize: Quantize = Field(
        "none",
        description="`int8`: the linear layers (the output projection too) with int8 weights, one scale per output "
        "channel, and their inputs quantized per tensor as they come (`model/quantize.py`); oneDNN's int8 kernels run "
        "them, compiled or eager (before the graphs are in, with `NMT_COMPILE=off`, for `/attention`: the same "
        "kernels on the same inputs). CPU and `float32` only; about 86–88% of sentences keep float32's tokens, BLEU "
        "within 0.12 (`docs/performance.md`); a translation can depend on the sentences batched with it (one input "
        "scale per batch); the logit screen is off. `/info` reports it (`quantize`). It pays only on a CPU with an "
        "int8 dot product (VNNI: `avx512_vnni`, `avx_vnni` or `amx_int8` among its flags), and there at large "
        "batches: on an AVX2-only AMD EPYC it decoded at 0.44× float32's speed at batch 1 and 0.97× at batch 32, so on "
        "such a CPU the server logs a warning and `/info` lists it (`warnings`); serve float32 there unless memory is "
        "short",
    )
    min_confidence: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="withhold every translated sentence whose `confidence` is below this (a request's "
        "`min_confidence` overrides it): its text is left out, a document keeps its other sentences and its shape, "
        "and `withheld` says which and why. `0`: nothing withheld. Files and DeepL's API withhold nothing (their "
        "answers have no place to say so). See `docs/confidence.md`",
    )
    screen_logits: bool = Field(
        True,
        description="on a CPU with bfloat16 matmuls (AVX512-BF16 or AMX), steps of 4 or more rows pick their token "
        "from a bfloat16 output projection and confirm it in float32 (`model/screen.py`): float32 greedy's tokens, "
        "scores within ~3e-3. Off on GPUs; `/info` says whether it is on (`screened_logits`)",
    )
    threads: int = Field(
        0,
        ge=0,
        description="CPU threads for the model (one OpenMP team, on the engine's worker thread); "
        "`0` = `OMP_NUM_THREADS`, else one per core. `/info` reports it (`threads`)",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="server processes sharing the port (Linux's SO_REUSEPORT), each with its own event loop and its "
        "own copy of the models, sharing `gpu_memory_fraction` and the cores out among them. For a GPU that one "
        "process cannot keep busy with one-sentence requests; `/ready` is 200 once every worker has loaded, `/info` "
        "and `/metrics` are the answering worker's",
    )
    frontends: int = Field(
        0,
        ge=0,
        le=64,
        description="HTTP front-end processes sharing the port, apart from one engine process that owns every model, "
        "KV cache, running batch and compiled graph and speaks only token ids with them (app/frontends.py); each "
        "front-end does a request's text work (validation, tokenizing, sentences, HTML, detokenizing). `0`: one "
        "process does both, as before. Excludes `workers`; Linux",
    )
    engine_timeout_s: float = Field(
        30.0,
        ge=1,
        description="with `frontends`: seconds the engine process may go without a sign of life (its event loop "
        "beats each second) before it is taken as hung, killed, and the server stops with a non-zero status for "
        "the service manager to restart it. Meanwhile, from 5 s, requests get 503 and `/ready` says why",
    )
    engine_address: str | None = Field(
        None,
        description="set by nmt-serve for its front-ends (`frontends`): the engine process's socket, `ipc://PATH` "
        "in a directory only the server's user may enter",
    )
    api_key: SecretStr | None = Field(
        None,
        description="when set, every endpoint except `/health`, `/ready`, `/docs`, `/redoc`, `/openapi.json` and the "
        "viewer page needs `Authorization: Bearer <key>`; LibreTranslate's and DeepL's APIs take it as their clients "
        "send it (`api_key`, `Authorization: DeepL-Auth-Key <key>`)",
    )
    glossary_dir: Path | None = Field(
        None,
        description="directory that keeps the stored glossaries (`/glossaries`, DeepL's `/v2/glossaries`), one file "
        "each, made on the first one; they survive restarts, and servers sharing it see the same glossaries. Unset: "
        "`$XDG_DATA_HOME/nmt-serve/glossaries` (`~/.local/share/nmt-serve/glossaries`); the Docker image's is "
        "`/var/lib/nmt-serve/glossaries` (a volume in docker-compose.yml)",
    )
    file_max_bytes: int = Field(
        20 * 2**20,
        ge=1,
        description="bytes of a file to translate (`POST /files`, LibreTranslate's `/translate_file`, DeepL's "
        "`/v2/document`); a larger upload gets 413, by its `Content-Length` before its body is read",
    )
    job_dir: Path | None = Field(
        None,
        description="directory that keeps the file translations (jobs): each one's upload, state (`job.json`) and "
        "result, written to the disk before it is acknowledged; jobs left queued or running by a stopped server are "
        "started again by the next one on the same directory. Unset: a temporary directory made at start and removed "
        "at shutdown, so jobs do not survive a restart (one a killed server left is removed by the next start)",
    )
    job_retention_s: float = Field(
        86400.0,
        gt=0,
        description="seconds a finished (done or failed) job and its files are kept before they are deleted; checked "
        "at start and every few minutes",
    )
    job_segments_in_flight: int = Field(
        8,
        ge=1,
        description="segments (paragraphs, cells, subtitles) of all jobs together in the engine at once, so that "
        "interactive requests keep most of the batch and the queue; a quarter of it while a translation request is in "
        "flight or was within a second. Each job keeps four chunks of a quarter of it in flight. 8 paragraphs of a "
        "sentence or two leave most of a CPU's 32 rows, and all but a few dozen of the 256 queued sequences, to "
        "interactive requests; raise it on a GPU, whose batch has hundreds. With `frontends`, each front-end runs the "
        "jobs uploaded to it with an equal part of this (and gives way to the translation requests it answers)",
    )
    job_concurrency: int = Field(
        2, ge=1, description="jobs translating at once (per worker); the others wait, `queued`"
    )
    job_max_queued: int = Field(
        100,
        ge=1,
        description="jobs queued or translating at once (per worker); another upload gets 429 with `Retry-After`",
    )
    cors_origins: str = Field(
        "*",
        description="web pages (origins, comma-separated, e.g. `https://app.example.com`) whose scripts may call the "
        "API from a browser, preflight requests included (CORS); `*`: any, as LibreTranslate's; empty: none, only "
        "same-origin pages",
    )
    host: str = Field("127.0.0.1", description="address to bind; `0.0.0.0` for all interfaces (the Docker image)")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    log_level: LogLevel = Field("info", description="log level of the service and uvicorn")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_yes_no(cls, v):  # the boolean spellings of earlier versions: true compiled before serving
        if isinstance(v, bool) or str(v).lower() in ("true", "false", "1", "0", "yes", "no"):
            return "blocking" if str(v).lower() in ("true", "1", "yes") else "off"
        return v

    @field_validator("max_batch_size", "max_queue", "max_request_sequences", "glossary_dir", "job_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, v):  # NMT_MAX_BATCH_SIZE= (as docker-compose.yml passes it when unset): automatic
        return None if v == "" else v

    @field_validator("models")
    @classmethod
    def _models_named(cls, v):
        if v is not None and v.strip():
            model_dirs(v)  # raises ValueError saying what is wrong
            return v
        return None  # unset, empty or blank (`NMT_MODELS= ` in an env file): NMT_MODEL_DIR's model

    @model_validator(mode="after")
    def _one_way_to_share(self):
        if self.frontends and self.workers > 1:
            raise ValueError(
                "frontends and workers are two ways to use more than one process: set one. frontends keeps one copy "
                "of the models in an engine process; workers give each process its own"
            )
        if self.frontends and self.max_queue is not None and self.max_queue < self.frontends * self.max_batch_texts:
            raise ValueError(
                f"max_queue={self.max_queue} is shared by frontends={self.frontends}: each front-end's share must fit "
                f"max_batch_texts={self.max_batch_texts}, so max_queue must be at least "
                f"{self.frontends * self.max_batch_texts} (or unset: the engine then sizes it)"
            )
        # what the engine checks of these again, said here as the settings they are (not as a model that failed)
        if self.max_queue is not None and self.max_queue < self.max_batch_texts:
            raise ValueError(
                f"max_queue={self.max_queue} is below max_batch_texts={self.max_batch_texts}: a request with that many "
                "texts could never be admitted"
            )
        most = self.max_queue if self.max_queue is not None else None
        if self.max_request_sequences is not None and not (
            self.max_batch_texts <= self.max_request_sequences <= (most or self.max_request_sequences)
        ):
            raise ValueError(
                f"max_request_sequences={self.max_request_sequences} must be at least max_batch_texts="
                f"{self.max_batch_texts} (a request may send that many texts)"
                + (f" and at most max_queue={most}" if most is not None else "")
            )
        return self

    def model_dirs(self) -> dict[str, Path]:
        """The models to serve, by name: NMT_MODELS, else NMT_MODEL_DIR under its checkpoint's name (None: the
        engine names it from the checkpoint's metadata)."""
        return model_dirs(self.models) if self.models else {"": self.model_dir}

    def glossaries(self) -> Path:
        """Where the stored glossaries are kept: NMT_GLOSSARY_DIR, else the user's data directory."""
        if self.glossary_dir is not None:
            return self.glossary_dir
        data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(data) / "nmt-serve" / "glossaries"

    def origins(self) -> list[str]:
        """NMT_CORS_ORIGINS as a list (empty: no cross-origin calls)."""
        return [o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip()]

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v):
        return None if v in ("", None) else v


def model_dirs(spec: str) -> dict[str, Path]:
    """`en-de=dir1,en-fr=dir2` as {"en-de": Path("dir1"), "en-fr": Path("dir2")}."""
    out: dict[str, Path] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, eq, directory = (x.strip() for x in item.partition("="))
        if not eq or not name or not directory:
            raise ValueError(f"{item!r} is not name=directory (NMT_MODELS is e.g. en-de=dir1,en-fr=dir2)")
        if name in out:
            raise ValueError(f"the model name {name!r} is given twice")
        out[name] = Path(directory)
    if not out:
        raise ValueError("names no model (NMT_MODELS is e.g. en-de=dir1,en-fr=dir2)")
    return out
