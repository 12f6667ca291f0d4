"""An imported model's tokenizer: a source and a target SentencePiece model, run by `tokenizers`, over the model's ids.

Marian (OPUS-MT) models cut text with two SentencePiece unigram models and look the pieces up in a vocabulary of
their own (`vocab.json`, and `target_vocab.json` when the two sides have separate vocabularies); a piece that is not
in the vocabulary is <unk>. The importer (model/importers/marian.py) converts each SentencePiece model to a
`tokenizers` unigram model with the same pieces, scores and normalizer, so that serving needs neither sentencepiece
nor transformers; this class maps its pieces to the model's ids exactly as transformers' MarianTokenizer does:

- a text `>>xx<<` at the start is a language code, one token;
- a run of characters the SentencePiece model does not know is one piece, the run itself (normalized), and its id is
  the vocabulary's id for that text, else <unk>;
- decoding drops the special tokens (with skip_special_tokens), joins the pieces, turns "▁" into spaces and strips.

Unlike MarianTokenizer, text is never read as special tokens: "</s>" typed in a text is cut into pieces like any
other text (an unknown run that spells one is <unk>).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from model.token import Token

FILE = "spm_tokenizer.json"  # in a checkpoint directory, instead of tokenizer.json
UNKNOWN = "\U0010fffd" * 4 + "<unk>"  # the converted models' unknown piece: no text can match it
SIDES = ("source", "target")


class SentencePieceTokenizer:
    """The interface of model.tokenizer.Tokenizer, for a source and a target SentencePiece model."""

    file_name = FILE

    def __init__(self, spec: dict):
        self.spec = spec
        special = spec["special"]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (
            special["pad"], special["decoder_start"], special["eos"], special["unk"],
        )  # fmt: skip
        self.special_ids = frozenset((self.pad_id, self.eos_id, self.unk_id))
        self.byte_ids: frozenset[int] = frozenset()
        self.language_codes = spec.get("language_codes", False)
        self._hf, self._ids, self._unknown, self._vocab, self._pieces = {}, {}, {}, {}, {}
        for side in SIDES:
            s = spec[side]
            hf = self._hf[side] = HFTokenizer.from_str(json.dumps(s["tokenizer"]))
            vocab = self._vocab[side] = spec["vocab"][s["vocab"]]
            self._ids[side] = [vocab.get(p, self.unk_id) for p in s["pieces"]]  # converted model's id -> model id
            self._unknown[side] = hf.token_to_id(UNKNOWN)
            pieces = [""] * spec["sizes"][side]  # ids past the vocabulary (embeddings it never names) decode to ""
            for p, i in vocab.items():
                pieces[i] = p
            self._pieces[side] = pieces
        # per side of the ids: the SentencePiece model that decodes them, as the pieces it knows and its control pieces
        self._known, self._control = {}, {}
        for side, model in spec["decode"].items():
            self._known[side] = frozenset(spec[model]["pieces"]) - {UNKNOWN}
            self._control[side] = frozenset(spec[model]["control"])

    @classmethod
    def from_file(cls, path: str | Path) -> SentencePieceTokenizer:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.spec, ensure_ascii=False), encoding="utf-8")

    @property
    def src_vocab_size(self) -> int:
        return len(self._pieces["source"])

    @property
    def tgt_vocab_size(self) -> int:
        return len(self._pieces["target"])

    # ---- text to ids ---------------------------------------------------------------------------------------

    def _split_code(self, text: str) -> tuple[str, str]:
        """A leading language code `>>xx<<` and the rest, as MarianTokenizer.remove_language_code does."""
        if self.language_codes and text.startswith(">>") and (end := text.find("<<")) != -1:
            return text[: end + 2], text[end + 2 :]
        return "", text

    def _encode(self, text: str, side: str, offsets: bool = False) -> tuple[list[int], list[tuple[int, int]]]:
        """Model ids and, when asked, their character offsets into `text`. A token's piece is the vocabulary's
        piece for its id (an unknown run looked up by its text has that text's id)."""
        code, rest = self._split_code(text)
        enc = self._hf[side].encode(rest, add_special_tokens=False)
        to_model, unknown, vocab = self._ids[side], self._unknown[side], self._vocab[side]
        ids = [to_model[i] for i in enc.ids]
        if unknown in enc.ids:  # runs of unknown characters: look their text up (the slow path, rare)
            surfaces = iter(self._unknown_runs(rest, side))
            ids = [self._lookup(next(surfaces), side) if i == unknown else m for i, m in zip(enc.ids, ids)]
        spans = [(start + len(code), end + len(code)) for start, end in enc.offsets] if offsets else []
        if code:
            ids.insert(0, vocab.get(code, self.unk_id))
            spans.insert(0, (0, len(code)))
        return ids, spans

    def _lookup(self, surface: str, side: str) -> int:
        """The vocabulary's id of an unknown run's text; <unk> if none, or if the text is a special token's."""
        i = self._vocab[side].get(surface, self.unk_id)
        return self.unk_id if i in self.special_ids else i

    def _unknown_runs(self, text: str, side: str) -> list[str]:
        """The normalized text of each run of unknown characters, in order."""
        hf = self._hf[side]
        words = hf.pre_tokenizer.pre_tokenize_str(hf.normalizer.normalize_str(text))
        return [t.value for word, _ in words for t in hf.model.tokenize(word) if t.id == self._unknown[side]]

    def encode(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[int]:
        ids = self._encode(text, side)[0]
        return ids + [self.eos_id] if add_special_tokens else ids

    def encode_batch(self, texts: list[str], side: str = "source", add_special_tokens: bool = True) -> list[list[int]]:
        return [self.encode(t, side, add_special_tokens) for t in texts]

    def tokenize(self, text: str, side: str = "source", add_special_tokens: bool = True) -> list[Token]:
        """Tokens with ids, pieces and character offsets into `text`."""
        ids, spans = self._encode(text, side, offsets=True)
        toks, pieces = [], self._pieces[side]
        for i, (start, end) in zip(ids, spans):
            piece = pieces[i]
            if start < end and not text[start].isspace() and piece == "▁":
                end = start  # the word-boundary mark SentencePiece adds before the first word
            elif end - start > 1 and text[start].isspace():  # "▁man" points at "man", not " man"
                start += 1
            toks.append(Token(i, piece, start, end, False))
        if add_special_tokens:
            toks.append(Token(self.eos_id, pieces[self.eos_id], len(text), len(text), True))
        return toks

    # ---- ids to text ---------------------------------------------------------------------------------------

    def _decode_run(self, pieces: list[str], side: str) -> str:
        """SentencePiece's decode_pieces: known pieces with "▁" as spaces, control pieces as nothing, pieces the model
        does not know verbatim; until some text is out, each piece's leading "▁" is dropped (so "▁", "▁w" gives "w")."""
        out, known, control = [], self._known[side], self._control[side]
        for p in pieces:
            if p in control:
                continue
            text = p
            if p in known:
                text = p.replace("▁", " ")
                if not out and text.startswith(" "):
                    text = text[1:]
            if text:
                out.append(text)
        return "".join(out)

    def decode(self, ids: list[int], skip_special_tokens: bool = True, side: str = "target") -> str:
        """Ids to text, as MarianTokenizer.decode (source ids with the source vocabulary and model)."""
        pieces, out, run = self._pieces[side], "", []
        for i in ids:
            if i in self.special_ids:
                if not skip_special_tokens:
                    out += self._decode_run(run, side) + pieces[i] + " "
                    run = []
                continue
            run.append(pieces[i])
        out += self._decode_run(run, side)
        return out.replace("▁", " ").strip()

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = True, side: str = "target") -> list[str]:
        return [self.decode(ids, skip_special_tokens, side) for ids in batch]

    def id_to_token(self, i: int, side: str = "target") -> str:
        return self._pieces[side][i]
