"""A token as the tokenizers give it with its place in the text: what /tokenize answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Token:
    id: int
    text: str
    start: int  # character offsets into the input; special tokens get an empty span
    end: int
    special: bool
