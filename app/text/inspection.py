"""Looking inside the model: a text's tokens, the text of token ids, and the attention weights over a translation
(/tokenize, /detokenize and /attention), each bounded and checked as /translate's requests are."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from app.engine.errors import InputTooLong, InvalidRequest
from app.segment import segment, worded
from app.text.documents import check_chars
from app.text.results import Attention
from model.options import max_new_tokens_for
from model.token import Token

if TYPE_CHECKING:
    from app.text.engine import Engine


async def tokenize(
    engine: Engine, text: str | list[str], side: str, add_special_tokens: bool, language: str | None = None
) -> list[list[Token]]:
    """Tokens of each text; a many-to-many model's special tokens carry `language`'s code (default its saved
    language for `side`), a pair model's ignore it."""
    texts = engine.limits.texts(text, "text")
    check_chars(texts, engine.max_request_chars)  # its answer is tens of bytes a token: bound it as /translate's
    source = side == "source"
    named = engine.directions.or_saved(language if source else None, None if source else language)
    code = named.source if source else named.target
    more = {} if code is None else {"language": code}  # a pair model's tokenizer takes no language
    return await asyncio.to_thread(
        lambda: [engine.tokenizer.tokenize(t, side, add_special_tokens, **more) for t in texts]
    )


async def detokenize(
    engine: Engine, ids: list[int] | list[list[int]], side: str, skip_special_tokens: bool
) -> list[str]:
    nested = bool(ids) and isinstance(ids[0], list)
    batch = engine.limits.texts(ids if nested or not ids else [ids], "ids")
    vocab = engine.config.src_vocab_size if side == "source" else engine.config.tgt_vocab_size

    def run() -> list[str]:
        for b, seq in enumerate(batch):
            for j, i in enumerate(seq):
                if not 0 <= i < vocab:
                    where = f"ids[{b}][{j}]" if nested else f"ids[{j}]"
                    raise InvalidRequest(f"{where} = {i} is not a token id; allowed ids are 0..{vocab - 1}")
        return engine.tokenizer.decode_batch(batch, skip_special_tokens=skip_special_tokens, side=side)

    return await asyncio.to_thread(run)


async def attention(
    engine: Engine, text: str, target: str | None = None, layers: list[int] | None = None,
    heads: list[int] | None = None, average_heads: bool = False, source_language: str | None = None,
    target_language: str | None = None,
) -> Attention:  # fmt: skip
    """Attention weights over `text`, teacher-forcing `target` or else the translation /translate gives: the model's
    own, or for a text without a letter the text as written; a many-to-many model's source carries
    `source_language`'s code and its decoder is fed `target_language`'s (each left out: the model's saved one)."""
    c = engine.config
    layers = engine.limits.indices("layers", layers, min(c.n_encoder_layers, c.n_decoder_layers))
    heads = engine.limits.indices("heads", heads, c.n_heads)
    decoding = engine.directions.or_saved(source_language, target_language)
    start = engine.directions.start(decoding)
    check_chars([text], engine.max_request_chars)  # bounded before it is tokenized, as /tokenize's
    seen = segment(text, "none")  # what /translate gives the model: the text without whitespace and invisible
    text = text[seen[0].start : seen[0].end] if seen else ""  # characters at its ends (a blank text: nothing)
    (src,), _ = await asyncio.to_thread(
        engine.limits.sources, engine.tokenizer, [text], False, True, None, decoding.source, truncatable=False
    )  # fmt: skip
    shown = None  # the translation, where it is not its tokens' text
    if target is not None:
        tgt = await asyncio.to_thread(engine.tokenizer.encode, target, "target", False)
        if len(tgt) > engine.max_new_tokens:
            raise InputTooLong(f"target has {len(tgt)} tokens; the limit is {engine.max_new_tokens}")
    elif not worded(text):  # as /translate: a text without a letter comes back as written (a blank one as ""), not the
        whole = await asyncio.to_thread(engine.tokenizer.encode, text, "target", False)  # model's: it is the target,
        tgt = whole[: max_new_tokens_for(len(src), engine.max_new_tokens)]  # cut where the model's own would stop
        shown = text if len(tgt) == len(whole) else None  # as written, where a vocabulary has no piece for it (<unk>)
    else:
        async with engine.deadline():
            (hyp,) = await engine.core.generate([src], [max_new_tokens_for(len(src), engine.max_new_tokens)], start)
        tgt = hyp.tokens
    weights = await engine.core.attention(src, tgt, layers, heads, average_heads, start)
    return Attention(
        [engine.tokenizer.id_to_token(i, "source") for i in src],
        [engine.tokenizer.id_to_token(i) for i in weights.decoder_ids],
        engine.tokenizer.decode(tgt) if shown is None else shown, layers, heads,
        weights.encoder, weights.decoder, weights.cross,
    )  # fmt: skip
