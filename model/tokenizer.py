"""Joint source/target BPE (byte fallback, so any text round-trips) on top of HuggingFace `tokenizers`."""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from model.token import Token as Token  # where its users have always found it

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]  # ids 0..3, in this order
MIN_VOCAB = 256 + len(SPECIALS)  # the byte-level BPE's alphabet and the special tokens, before any merge
BYTE_TOKENS = [f"<0x{i:02X}>" for i in range(256)]


class Tokenizer:
    """Source side: `text </s>`; target side: `<s> text </s>`. Text is read literally: `</s>` typed in it is cut
    into pieces like any other text, so special tokens come only from the side's wrapping."""

    file_name = "tokenizer.json"  # in a checkpoint directory

    def __init__(self, tokenizer: HFTokenizer):
        self.hf = tokenizer
        # Match the added (special) tokens' text as ordinary characters; the library would otherwise turn "</s>" in
        # a user's text into the end-of-sentence id. A run-time flag: tokenizer.json does not store it.
        tokenizer.encode_special_tokens = True
        ids = [tokenizer.token_to_id(t) for t in SPECIALS]
        if ids != [0, 1, 2, 3]:
            raise ValueError(f"special tokens {SPECIALS} must have ids 0..3, found {ids}")
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = ids
        self.special_ids = frozenset(ids)
        self.byte_ids = frozenset(i for i in map(tokenizer.token_to_id, BYTE_TOKENS) if i is not None)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    src_vocab_size = tgt_vocab_size = vocab_size  # one joint vocabulary

    @classmethod
    def train(cls, lines: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> Tokenizer:
        """Learn BPE merges on `lines`; characters outside the learned alphabet fall back to bytes."""
        tk = HFTokenizer(models.BPE(unk_token=UNK, byte_fallback=True, fuse_unk=True))
        tk.normalizer = normalizers.NFC()
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
                pre_tokenizers.Punctuation(behavior="isolated"),
                pre_tokenizers.Digits(individual_digits=True),
            ]
        )
        tk.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size - len(BYTE_TOKENS),
            min_frequency=min_frequency,
            special_tokens=SPECIALS,
            limit_alphabet=200,
            show_progress=False,
        )
        tk.train_from_iterator(lines, trainer=trainer)
        # Append the 256 byte tokens to the BPE vocabulary (not as added tokens: those would be
        # matched in raw text and dropped by skip_special_tokens).
        spec = json.loads(tk.to_str())
        vocab = spec["model"]["vocab"]
        for t in BYTE_TOKENS:
            vocab.setdefault(t, len(vocab))
        return cls(HFTokenizer.from_str(json.dumps(spec)))

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(HFTokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self.hf.save(str(path))

    def _wrap(self, ids: list[int], side: str) -> list[int]:
        return ([self.bos_id] if side == "target" else []) + ids + [self.eos_id]

    def encode(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[int]:
        ids = self.hf.encode(text, add_special_tokens=False).ids
        return self._wrap(ids, side) if add_special_tokens else ids

    def encode_batch(self, texts: list[str], side: str = "source", add_special_tokens: bool = True) -> list[list[int]]:
        # One text without encode_batch, which hands it to the library's thread pool: its threads wake and take the
        # cores from the model's, and it took ~8% of the server's event-loop time in a profile at concurrency 32.
        if len(texts) == 1:
            return [self.encode(texts[0], side, add_special_tokens)]
        encs = self.hf.encode_batch(texts, add_special_tokens=False)
        return [self._wrap(e.ids, side) if add_special_tokens else e.ids for e in encs]

    def tokenize(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[Token]:
        """Tokens with ids, pieces and character offsets into `text`."""
        enc = self.hf.encode(text, add_special_tokens=False)
        toks = []
        starts = [start for start, _ in enc.offsets[1:]] + [len(text)]
        for i, piece, (start, end), after in zip(enc.ids, enc.tokens, enc.offsets, starts):
            # NFC makes "e" + U+0301 one character, whose offsets name the "e" alone: the marks are the token's too
            while start < end < after and unicodedata.category(text[end])[0] == "M":
                end += 1
            if start < end and not text[start].isspace() and piece == "▁":
                end = start  # the word-boundary mark the pre-tokenizer added before the first word
            elif end - start > 1 and text[start].isspace():  # "▁man" points at "man", not " man"
                start += 1
            toks.append(Token(i, piece, start, end, False))
        if not add_special_tokens:
            return toks
        head = [Token(self.bos_id, BOS, 0, 0, True)] if side == "target" else []
        return head + toks + [Token(self.eos_id, EOS, len(text), len(text), True)]

    def decode(self, ids: list[int], skip_special_tokens: bool = True, side: str = "target") -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)  # one vocabulary for both sides

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = True, side: str = "target") -> list[str]:
        return self.hf.decode_batch(batch, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int, side: str = "target") -> str:
        return self.hf.id_to_token(i)  # one vocabulary for both sides


def load_tokenizer(checkpoint: str | Path):
    """A checkpoint directory's tokenizer: tokenizer.json (nmt-train's BPE), spm_tokenizer.json (an imported model's
    SentencePiece models, model/spm_tokenizer.py) or multilingual_tokenizer.json (an imported M2M100 or NLLB's,
    model/multilingual_tokenizer.py). Needs only `tokenizers`, not torch."""
    from model.multilingual_tokenizer import FILE as MULTILINGUAL
    from model.multilingual_tokenizer import MultilingualTokenizer
    from model.spm_tokenizer import FILE, SentencePieceTokenizer

    path = Path(checkpoint)
    if (path / Tokenizer.file_name).is_file():
        return Tokenizer.from_file(path / Tokenizer.file_name)
    if (path / MULTILINGUAL).is_file():
        return MultilingualTokenizer.from_file(path / MULTILINGUAL)
    return SentencePieceTokenizer.from_file(path / FILE)


def lines_or_exit(path: str | Path, tool: str) -> list[str]:
    """read_lines() of a command's input file, or the command's exit saying which file it cannot read and why (it
    is missing, not UTF-8, not gzip, a gzip cut short)."""
    try:
        return list(read_lines(path))
    except (OSError, UnicodeDecodeError) as e:  # gzip's BadGzipFile is an OSError
        sys.exit(f"{tool}: cannot read {path}: {e}")
    except EOFError as e:  # gzip's stream ends before its end marker: a download or copy cut short
        sys.exit(f"{tool}: cannot read {path}: it is cut short ({e})")


def read_lines(path: str | Path) -> Iterator[str]:
    """One sentence a line, plain or gzip. Lines end at "\n" alone (a CRLF's "\r" is dropped with it), as `wc -l`
    counts them: a lone "\r" inside a sentence is not a line break, or the source and target files would fall out of
    step. A UTF-8 byte-order mark at the start is no part of the first sentence."""
    import gzip

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig", newline="\n") as f:
        for line in f:
            yield line.removesuffix("\n").removesuffix("\r")
