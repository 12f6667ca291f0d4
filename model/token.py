"""What every tokenizer offers: `Token`, a token with its place in the text (what /tokenize answers), and
`TextTokenizer`, the methods the engine, the trainer and the importers call on any of them: the project's own BPE
(model/tokenizer.py's Tokenizer), an imported SentencePiece model (model/spm_tokenizer.py) and a many-to-many
model's (model/multilingual_tokenizer.py, which also has its languages)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass
class Token:
    id: int
    text: str
    start: int  # character offsets into the input; special tokens get an empty span
    end: int
    special: bool


@runtime_checkable
class TextTokenizer(Protocol):
    """Text to token ids and back for a model's two sides ("source", "target"); ids are the model's rows. The source
    side ends in </s>; user text is read literally, never as a special token."""

    file_name: str  # in a checkpoint directory
    pad_id: int
    eos_id: int
    unk_id: int
    special_ids: frozenset[int]
    byte_ids: frozenset[int]  # byte-fallback pieces (<0xNN>): a word's confidence groups them

    @property
    def src_vocab_size(self) -> int: ...

    @property
    def tgt_vocab_size(self) -> int: ...

    def save(self, path: str | Path) -> None: ...

    def encode(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[int]: ...

    def encode_batch(
        self, texts: list[str], side: str = "source", add_special_tokens: bool = True
    ) -> list[list[int]]: ...

    def tokenize(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[Token]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True, side: str = "target") -> str: ...

    def decode_batch(
        self, batch: list[list[int]], skip_special_tokens: bool = True, side: str = "target"
    ) -> list[str]: ...

    def id_to_token(self, i: int, side: str = "target") -> str: ...
