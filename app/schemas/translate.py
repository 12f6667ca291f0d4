"""/translate's request: the texts and every option of how they are translated."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from app.schemas.fields import Glossary, Language, Protect, Request, Text, Texts


class TranslateRequest(Request):
    text: Texts
    model: Text | None = Field(
        None, description="the model to translate with (GET /models); default: by `source`/`target`, else the first"
    )
    source: Language | None = Field(
        None, description="source language code (e.g. `en`): picks the first model that translates from it; for a "
        "many-to-many model any code of its languages (`de`, `deu`, `deu_Latn`, `zh-Hant`), or `auto` (the default "
        "there) to detect it: each text of a list its own",
    )  # fmt: skip
    target: Language | None = Field(
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
    glossary_ignore_case: bool = Field(
        False, description='source terms match in any case (Unicode case folding: "Straße" matches "STRASSE")'
    )
    protect: Protect = Field(
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
