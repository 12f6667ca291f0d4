"""Request and response bodies. Requests are strict: unknown fields and loose types are refused."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

from app.glossaries import MAX_ENTRIES, GlossaryError, checked, short
from app.settings import Quantize

Side = Literal["source", "target"]
SURROGATES = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """The text with each lone surrogate replaced by U+FFFD, the replacement character."""
    # JSON may escape half of a UTF-16 pair ("\ud800") and Python's parser keeps it, but it is no character: the
    # tokenizer refuses it and UTF-8 cannot encode it. Replaced rather than refused, as a browser's TextEncoder and
    # any UTF-8 encoder with errors="replace" do, since it is mostly an emoji cut in half by a client: the rest of
    # the text still translates, and one code unit becomes one character, so every offset and span the answer
    # gives (tokens, alignment, segments) still points into the text as sent.
    return SURROGATES.sub("\ufffd", text)


def _json_type(v: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return "null" if v is None else names.get(type(v), type(v).__name__)


# Validators raise ValueError (pydantic turns it into a 422 with our message; a TypeError would escape).
def _texts(v: Any) -> str | list[str]:
    if isinstance(v, str):
        return scrub(v)
    if not isinstance(v, list):
        raise ValueError(f"must be a string or a list of strings, got {_json_type(v)}")  # noqa: TRY004
    for i, t in enumerate(v):
        if not isinstance(t, str):
            raise ValueError(f"item {i} is {_json_type(t)}; every item must be a string")  # noqa: TRY004
    return list(map(scrub, v))


def _ids(v: Any) -> list[int] | list[list[int]]:
    def is_id(i: Any) -> bool:
        return type(i) is int

    if not isinstance(v, list):
        raise ValueError(f"must be a list of token ids or a list of lists of ids, got {_json_type(v)}")  # noqa: TRY004
    if v and isinstance(v[0], list):
        for b, seq in enumerate(v):
            if not isinstance(seq, list) or not all(map(is_id, seq)):
                raise ValueError(f"item {b} must be a list of integer token ids (all items lists, or all integers)")
    elif not all(map(is_id, v)):
        raise ValueError("every id must be an integer (or send a list of lists of integers)")
    return v


def _glossary(v: dict[str, str] | None) -> dict[str, str] | None:
    if not v:
        return None
    if len(v) > MAX_ENTRIES:
        raise ValueError(f"has {len(v)} entries; the limit is {MAX_ENTRIES} (a stored glossary's too)")
    try:
        return dict(checked((f"entry {short(s)}", scrub(s), scrub(t)) for s, t in v.items()))
    except GlossaryError as e:
        raise ValueError(str(e)) from None


def _entries(v: Any) -> dict[str, str] | str:
    if isinstance(v, str):
        return scrub(v)
    if not isinstance(v, dict) or not all(isinstance(t, str) for t in v.values()):
        raise ValueError(
            f"must be an object of source term -> target term (strings), or TSV or CSV text, got {_json_type(v)}"
            + (" holding a value that is not a string" if isinstance(v, dict) else "")
        )
    return {scrub(k): scrub(t) for k, t in v.items()}


Text = Annotated[str, AfterValidator(scrub)]  # every string field of a request: no lone surrogates past here
Glossary = Annotated[dict[str, str] | None, AfterValidator(_glossary)]
Entries = Annotated[dict[str, str] | str, PlainValidator(_entries, json_schema_input_type=dict[str, str] | str)]
Texts = Annotated[
    str | list[str],
    PlainValidator(_texts, json_schema_input_type=str | Annotated[list[str], Field(min_length=1)]),
    Field(description="one text, or a list of 1..MAX_BATCH_TEXTS texts"),
]
Ids = Annotated[
    list[int] | list[list[int]],
    PlainValidator(_ids, json_schema_input_type=list[int] | Annotated[list[list[int]], Field(min_length=1)]),
    Field(description="one sequence of ids, or a list of 1..MAX_BATCH_TEXTS sequences; ids in 0..vocab_size-1"),
]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, and what is allowed")
    type: str = Field(description="a stable kind: validation_error, input_too_long, unauthorized, ...")
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": "text has 812 tokens; the limit is 256", "type": "input_too_long"}]}
    )


class TokenizeRequest(Request):
    text: Texts
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    side: Side = Field("source", description="source adds `</s>`; target adds `<s>` and `</s>`")
    add_special_tokens: bool = True
    language: Text | None = Field(
        None, description="the language of `side`, named as /translate's `source` or `target`: picks the model as "
        "they do; a many-to-many model's tokens carry its code (default the model's saved one; `auto` detects a "
        "source's)",
    )  # fmt: skip
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "A man is riding a bike."}]})


class TokenOut(BaseModel):
    id: int
    text: str
    start: int = Field(description="character offset into the input; special tokens get an empty span")
    end: int
    special: bool


class TokenizeResult(BaseModel):
    tokens: list[TokenOut]
    count: int


class TokenizeResponse(BaseModel):
    results: list[TokenizeResult] = Field(description="one result per input text, in order")


class DetokenizeRequest(Request):
    ids: Ids
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    side: Side = "target"
    skip_special_tokens: bool = True
    model_config = ConfigDict(json_schema_extra={"examples": [{"ids": [1, 310, 42, 2]}]})


class TextOut(BaseModel):
    text: str


class DetokenizeResponse(BaseModel):
    results: list[TextOut]


class TranslateRequest(Request):
    text: Texts
    model: Text | None = Field(
        None, description="the model to translate with (GET /models); default: by `source`/`target`, else the first"
    )
    source: Text | None = Field(
        None, description="source language code (e.g. `en`): picks the first model that translates from it; for a "
        "many-to-many model any code of its languages (`de`, `deu`, `deu_Latn`, `zh-Hant`), or `auto` (the default "
        "there) to detect it",
    )  # fmt: skip
    target: Text | None = Field(
        None, description="target language code (e.g. `fr`): picks the first model that translates into it; a "
        "many-to-many model needs it",
    )  # fmt: skip
    max_new_tokens: int | None = Field(
        None,
        description="decoder steps per text, 1..MAX_NEW_TOKENS; default min(MAX_NEW_TOKENS, 2 x source tokens + 10)",
        json_schema_extra={"minimum": 1},
    )
    return_tokens: bool = Field(False, description="add the generated pieces and ids (without `</s>`)")
    return_scores: bool = Field(False, description="add the mean log-probability of the generated tokens")
    truncate: bool = Field(False, description="cut texts over MAX_INPUT_TOKENS to the limit instead of a 413")
    beam_size: int = Field(
        1, ge=1, le=8, description="beam search with this many beams (1: greedy); takes that many decoder rows"
    )
    num_hypotheses: int = Field(
        1, ge=1, le=8,
        description="return this many hypotheses per text in `hypotheses`, best first: at most beam_size, or "
        "independent samples when sampling",
    )  # fmt: skip
    length_penalty: float = Field(
        1.0, ge=0.0, le=10.0,
        description="score = sum of the log-probabilities / length ** length_penalty, the length counting `</s>` "
        "(CTranslate2's meaning); 0 ranks by the sum, 1 by the mean; beam search ranks its hypotheses by it",
    )  # fmt: skip
    target_prefix: Text | None = Field(
        None,
        description="the translation must start with this text (forced, then decoded freely); its tokens count "
        "towards max_new_tokens, whose default grows by them",
    )
    return_alignment: bool = Field(
        False,
        description="add `alignment`: for each target token the source token it aligns to (the penultimate decoder "
        "layer's cross-attention, averaged over heads), as token indices and character spans of both texts",
    )
    sampling_topk: int = Field(
        1, ge=0,
        description="1: the most likely token; k > 1: draw at random among the k most likely; 0: among all",
    )  # fmt: skip
    sampling_temperature: float = Field(
        1.0, gt=0.0, le=100.0, description="divide the logits by this before sampling (below 1: more conservative)"
    )
    seed: int | None = Field(
        None, ge=0, le=2**63 - 1,
        description="seeds each text's sampling: the same seed gives the same text, alone or in a busy batch",
    )  # fmt: skip
    split: Literal["sentences", "lines", "none"] = Field(
        "sentences",
        description="how a text is cut into what the model translates, each piece a sequence of the running batch and "
        "the translations put back between the text's own whitespace: `sentences` (sentencex, within each line), "
        "`lines` (one line each: subtitles, lists) or `none` (the text whole)",
    )
    return_segments: bool = Field(
        False, description="add `segments`: each piece's [start, end) characters in the text and in the translation"
    )
    format: Literal["text", "html"] = Field(
        "text",
        description="`html`: each text is an HTML page or fragment; its text nodes (and alt, title, placeholder, "
        "aria-label) are translated and the markup comes back as written, inline tags around the words they wrapped "
        '(by the alignment); scripts, styles, code, pre and `translate="no"` are left alone; malformed HTML is a 422',
    )
    stream: bool = Field(
        False,
        description="one text only: answer with server-sent events, one per generated token "
        '(`{"index", "token": {"id", "text"}, "text_so_far"}`), then `{"text", "finish_reason", "usage", '
        '"truncated", "confidence", "flags"}` (or `{"error", "type"}` if it failed midway)',
    )
    min_confidence: float | None = Field(
        None, ge=0.0, le=1.0,
        description="withhold each sentence whose `confidence` is below this: its text is left out (a document keeps "
        "its other sentences and its whitespace) and `withheld` says which and why; default NMT_MIN_CONFIDENCE (0: "
        "none). Streamed tokens cannot be taken back: the last event's `text` is what stands",
    )  # fmt: skip
    return_signals: bool = Field(
        False, description="add `signals`: the measures the confidence and flags come from (docs/confidence.md)"
    )
    return_word_confidence: bool = Field(
        False,
        description="add `words`: each word of the translation with its character span and its probability as "
        "generated (the product of its tokens' probabilities); plain text, not streamed",
    )
    glossary: Glossary = Field(
        None,
        description="source term -> target term: where a source term occurs in a text (as a whole word or phrase) its "
        "target term is put in the translation. Terms as a stored glossary's (docs/api.md#glossaries); with "
        "`glossary_id`, these come first",
    )
    glossary_id: Text | None = Field(
        None,
        description="a stored glossary (POST /glossaries) to translate with; its languages must be the model's (a "
        "request naming no model or languages goes to the model of the glossary's languages)",
    )
    glossary_ignore_case: bool = Field(False, description="source terms match in any case")
    protect: bool | list[Literal["placeholders", "tags", "urls", "emails", "code"]] = Field(
        False,
        description="keep spans verbatim: `true` for every built-in kind, or a list of kinds (`placeholders` such as "
        '`{name}`, `%s`, `{{ x }}`; inline `tags` such as `<x id="1"/>`; `urls`; `emails`; `code` in backticks). '
        "The model never reads them; each comes back once, as written, where the words around it went "
        "(docs/protected-spans.md)",
    )
    protect_terms: list[Text] | None = Field(
        None,
        description="literal strings to keep verbatim where they stand as whole words, case-sensitive; at most 256, "
        "of at most 200 characters",
    )
    protect_patterns: list[Text] | None = Field(
        None,
        description="regular expressions (RE2: no lookaround or backreferences) whose matches are kept verbatim; at "
        "most 16, of at most 500 characters, each compiling to at most 5,000 instructions and matching no empty "
        "string",
    )
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"text": ["A man is riding a bike.", "Two dogs play in the snow."]}]}
    )


class AlignedOut(BaseModel):
    target_token: int = Field(description="index of the target token (in `token_ids`)")
    source_token: int = Field(description="index of the source token it aligns to (as /tokenize numbers them)")
    target_span: tuple[int, int] = Field(description="[start, end) characters of the token in the translation")
    source_span: tuple[int, int] = Field(description="[start, end) characters of the source token in the text")


class SegmentOut(BaseModel):
    source_span: tuple[int, int] = Field(description="[start, end) characters of the piece in the text")
    target_span: tuple[int, int] = Field(description="[start, end) characters of its translation in the translation")
    confidence: float | None = Field(None, description="this piece's confidence")
    flags: list[Flag] = Field(default_factory=list, description="this piece's flags")
    withheld: bool = Field(False, description="left out of the translation: its confidence is below min_confidence")


Flag = Literal["repetition", "length", "copy", "coverage", "hallucination"]
CONFIDENCE = (
    "how far to trust the translation, 0 to 1: with a calibrated model (`calibrated`) the probability that its chrF "
    "against a human reference clears the calibration's threshold; a document's is its least confident sentence's; "
    "null for a blank text"
)
FLAGS = "what looks wrong, from a fixed vocabulary (docs/confidence.md); a document's: any sentence's"


class Signals(BaseModel):
    mean_logprob: float = Field(description="the mean log-probability of the generated tokens, `</s>` included")
    min_logprob: float = Field(description="the lowest of them")
    length: float = Field(description="how far the length ratio lies from the model's typical one, in spreads")
    repetition: float = Field(description="the share of tokens repeating the n-gram before them, less the source's")
    copied: float = Field(description="the share of the translation's words found in the source")
    attention: float | None = Field(
        None, description="how far the cross-attention lay from spread evenly over the source, averaged over the steps "
        "(0 = even; null where the decoding kept none)",
    )  # fmt: skip
    coverage: float | None = Field(
        None, description="the share of the source's tokens no token of the translation aligns to (null: not kept)"
    )
    tokens: float = Field(0.0, description="the log of the translation's token count")


class WithheldOut(BaseModel):
    segment: int = Field(description="which sentence of the text (from 0, as `segments` counts them)")
    source_span: tuple[int, int] | None = Field(description="[start, end) characters of it in the text (plain text)")
    confidence: float
    flags: list[Flag]


class WordOut(BaseModel):
    text: str
    span: tuple[int, int] = Field(description="[start, end) characters of the word in the translation")
    confidence: float = Field(description="the product of its tokens' probabilities")


class HypothesisOut(BaseModel):
    text: str
    score: float
    finish_reason: Literal["eos", "length"]
    confidence: float | None = Field(None, description=CONFIDENCE)
    flags: list[Flag] = Field(default_factory=list, description=FLAGS)
    words: list[WordOut] | None = Field(None, description="with return_word_confidence")
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    alignment: list[AlignedOut] | None = None


class TranslationOut(BaseModel):
    text: str
    finish_reason: Literal["eos", "length"]
    truncated: bool = Field(description="the input was cut to MAX_INPUT_TOKENS (only with truncate)")
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    score: float | None = None
    alignment: list[AlignedOut] | None = Field(None, description="with return_alignment: one entry per target token")
    hypotheses: list[HypothesisOut] | None = Field(
        None, description="with num_hypotheses > 1: the n-best list, best first (the first is this translation)"
    )
    segments: list[SegmentOut] | None = Field(None, description="with return_segments: the pieces, in order")
    confidence: float | None = Field(None, description=CONFIDENCE)
    flags: list[Flag] = Field(default_factory=list, description=FLAGS)
    signals: Signals | None = Field(
        None, description="with return_signals (a document's: its least confident sentence's)"
    )
    words: list[WordOut] | None = Field(
        None, description="with return_word_confidence: each word of the translation, its span and probability"
    )
    withheld: list[WithheldOut] | None = Field(
        None, description="the sentences left out under min_confidence, with their confidence and flags; absent if none"
    )


class Usage(BaseModel):
    input_tokens: int = Field(description="source tokens the encoder read, `</s>` included")
    output_tokens: int = Field(description="tokens generated, `</s>` included")


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]
    usage: Usage
    model: str
    calibrated: bool = Field(
        description="the model's confidence is calibrated (nmt-calibrate); false: it is the raw geometric mean of the "
        "tokens' probabilities (`/info`'s `confidence` says what it means)"
    )


class AttentionRequest(Request):
    text: Text
    model: Text | None = Field(None, description="the model to use (GET /models); default the server's first")
    target: Text | None = Field(None, description="teacher-force this translation; default: the model's own")
    source_language: Text | None = Field(
        None, description="the text's language, named as /translate's `source`: picks the model as it does; a "
        "many-to-many model's source tokens carry its code (default its saved source language; `auto` detects it)",
    )  # fmt: skip
    target_language: Text | None = Field(
        None, description="the translation's language, named as /translate's `target`: picks the model as it does; a "
        "many-to-many model's decoder is fed its code (default its saved target language)",
    )  # fmt: skip
    layers: list[int] | None = Field(None, description="layer indices to return; default all")
    heads: list[int] | None = Field(None, description="head indices to return; default all")
    average_heads: bool = Field(False, description="average the selected heads into one")
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "A man is riding a bike.", "layers": [0]}]})


class AttentionResponse(BaseModel):
    """Lists are [layer][head][query][key]. Decoder tokens are the decoder's inputs: `<s>` and the
    translation's pieces; row t is the attention that predicted token t+1, so the last row predicted `</s>`."""

    encoder_tokens: list[str]
    decoder_tokens: list[str]
    translation: str
    layers: list[int]
    heads: list[int] = Field(description="the heads averaged when average_heads is set")
    encoder_attention: list[list[list[list[float]]]] = Field(description="[L][H][S][S]")
    decoder_attention: list[list[list[list[float]]]] = Field(description="[L][H][T][T]")
    cross_attention: list[list[list[list[float]]]] = Field(description="[L][H][T][S]")


class StatusResponse(BaseModel):
    status: str


class ReadyResponse(StatusResponse):
    status: Literal["ready", "partial"] = Field(description="`partial`: some models failed to load, the rest serve")
    models: dict[str, Literal["loading", "ready", "failed", "stopped"]]


class LanguageOut(BaseModel):
    code: str = Field(description="the model's own code (`deu_Latn`)")
    name: str = Field(description="the shortest code that names it here (`de`; `zh-Hant`)")


class ModelOut(BaseModel):
    name: str
    state: Literal["loading", "ready", "failed", "stopped"]
    default: bool = Field(description="requests that name no model and no language go to this one")
    directory: str
    source: str = Field(description="source language code from the checkpoint's metadata (`unknown` until loaded)")
    target: str
    error: str | None = Field(None, description="why it failed to load")
    device: str | None = None
    dtype: str | None = None
    threads: int | None = Field(None, description="CPU threads of its worker (NMT_THREADS, or the cores shared out)")
    parameters: int | None = None
    limits: dict[str, int] | None = None
    metadata: dict[str, Any] | None = Field(None, description="the checkpoint's metadata (training, scores)")
    languages: list[LanguageOut] | None = Field(
        None, description="a many-to-many model's languages (its `source` and `target` read `multilingual`): any of "
        "them into any other"
    )  # fmt: skip


class ModelsResponse(BaseModel):
    models: list[ModelOut]


class CompileInfo(BaseModel):
    """Where compiling stands (NMT_COMPILE)."""

    mode: Literal["background", "blocking", "off"] = Field(description="NMT_COMPILE")
    state: Literal["off", "pending", "compiling", "compiled", "failed"] = Field(
        description="`compiled` once the compiled graphs serve; `failed` serves the eager model (the log says why)"
    )
    seconds: float | None = Field(description="from the start of compiling to the compiled graphs serving")
    built: int | None = Field(description="graphs compiled at this start (NMT_COMPILE_CACHE_DIR had no package)")
    loaded: int | None = Field(description="graphs loaded from the packages an earlier start built")
    graphs: Literal["aotinductor", "cuda"] = Field(
        "aotinductor",
        description="`aotinductor`: compiled packages (CPU); `cuda`: the decoder step captured as CUDA graphs for row "
        "and key-window buckets (GPU)",
    )
    serving: list[str] = Field(
        default_factory=list,
        description="the compiled graphs serving now, by name (step, rows): in the background they serve one by one "
        "as they are ready, the greedy step's first",
    )


class MemoryInfo(BaseModel):
    """The KV cache the engine decodes in, and how its rows were chosen (NMT_MAX_BATCH_SIZE)."""

    rows: int = Field(description="decoder rows (sequences decoding together; a beam search takes `beam_size`)")
    max_len: int = Field(description="target positions per row")
    max_src_len: int = Field(description="source tokens per row")
    kv_cache_bytes: int = Field(description="the cache's keys, values and source masks")
    rows_from: Literal["setting", "cpu", "gpu memory"] = Field(
        description="`setting`: NMT_MAX_BATCH_SIZE; `cpu`: the CPU default; `gpu memory`: NMT_GPU_MEMORY_FRACTION"
    )
    gpu_memory_fraction: float | None = Field(description="on a GPU: the share of its memory the server may fill")
    gpu_total_bytes: int | None = None
    gpu_free_bytes: int | None = None
    allocated_bytes: int | None = Field(None, description="on a GPU: what PyTorch has allocated on it now")


class WorkerInfo(BaseModel):
    """The worker that answered, when the server runs several (NMT_WORKERS)."""

    index: int = Field(description="this worker's number, from 0")
    count: int = Field(description="the server's workers (NMT_WORKERS)")
    loaded: int = Field(description="how many of them have loaded their models")
    pid: int = Field(description="this worker's process id")


class InfoResponse(BaseModel):
    model: str
    models: list[str] = Field(description="every model this server serves (GET /models); `?model=` picks one here")
    version: str
    config: dict[str, Any]
    parameters: int
    vocab_size: dict[str, int]
    device: str
    device_name: str = Field(description="the GPU's name on CUDA, else the CPU model")
    dtype: str
    compiled: bool = Field(description="the encoder and decoder steps run compiled graphs (NMT_COMPILE)")
    compile: CompileInfo
    screened_logits: bool = Field(
        description="greedy picks screened in bfloat16, confirmed in float32 (NMT_SCREEN_LOGITS)"
    )
    quantize: Quantize = Field(description="`int8`: the linear layers run in int8 (NMT_QUANTIZE)")
    threads: int = Field(description="CPU threads the model's work runs on (NMT_THREADS)")
    limits: dict[str, int]
    memory: MemoryInfo
    languages: dict[str, str] = Field(description='the language pair, e.g. {"source": "en", "target": "de"}')
    metadata: dict[str, Any]
    confidence: dict[str, Any] = Field(
        description="what `confidence` means for this model: `calibrated`, `meaning`, the flags' `thresholds`, and for "
        "a calibrated one its `chrf_threshold` and what it was fitted on (docs/confidence.md)"
    )
    worker: WorkerInfo | None = Field(None, description="with NMT_WORKERS > 1: the worker that answered, else null")


class GlossaryRequest(Request):
    name: Text = Field(description="a name for it (not necessarily unique)")
    source_lang: Text = Field(description="the language of the source terms, as a model names it (`en`, `deu_Latn`)")
    target_lang: Text = Field(description="the language of the target terms")
    entries: Entries = Field(
        description="source term -> target term, or the entries as text in `entries_format`: DeepL's TSV "
        "(`source<TAB>target` a line) or CSV (`source,target` a line)"
    )
    entries_format: Literal["tsv", "csv"] = Field("tsv", description="how `entries` is written, when it is text")
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"name": "bikes", "source_lang": "en", "target_lang": "de", "entries": {"bike": "Velo"}}]
        }
    )


class GlossaryOut(BaseModel):
    glossary_id: str
    name: str
    ready: bool = Field(description="always true: a glossary is ready once stored")
    source_lang: str
    target_lang: str
    creation_time: str = Field(description="ISO 8601, UTC, to the millisecond")
    entry_count: int


class GlossariesResponse(BaseModel):
    glossaries: list[GlossaryOut] = Field(description="every stored glossary, oldest first")


class GlossaryEntriesResponse(BaseModel):
    glossary_id: str
    entries: dict[str, str] = Field(description="source term -> target term, in the glossary's order")


class ProgressOut(BaseModel):
    done: int = Field(description="segments (paragraphs, cells, subtitles, strings) translated so far")
    total: int = Field(description="segments of the file")


class JobOut(BaseModel):
    id: str = Field(description="the job's id: 32 hexadecimal digits")
    status: Literal["queued", "running", "done", "failed"]
    progress: ProgressOut
    filename: str = Field(description="the uploaded file's name")
    output_filename: str = Field(description="the translated file's name, e.g. report.de.docx")
    format: str = Field(description="the file's format: txt, html, docx, pptx, xlsx, odt, srt, vtt, po, xliff or md")
    model: str
    source: str | None = Field(description="the source language the request named (or detected); null: the model's")
    target: str | None
    created: str = Field(description="ISO 8601, UTC")
    finished: str | None = Field(description="when it became done or failed")
    expires: str | None = Field(description="when a finished job and its files are deleted (NMT_JOB_RETENTION_S)")
    error: str | None = Field(description="why it failed")
    error_type: str | None = Field(description="the kind of that error, as an error response's `type`")
    download: str | None = Field(description="where the translated file is, once done")
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "id": "5f0c9e1d2b7a4c3e8f6a1b2c3d4e5f60", "status": "running", "progress": {"done": 8, "total": 20},
                "filename": "report.docx", "output_filename": "report.de.docx", "format": "docx",
                "model": "multi30k-en-de", "source": None, "target": "de", "created": "2026-05-01T09:30:00.000Z",
                "finished": None, "expires": None, "error": None, "error_type": None, "download": None,
            }]
        }
    )  # fmt: skip
