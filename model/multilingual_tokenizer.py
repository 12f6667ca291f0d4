"""The tokenizer of a many-to-many model (M2M100, NLLB-200, mBART-50): one SentencePiece model run by `tokenizers`,
over the model's fairseq ids, with a language code on every sentence.

transformers' M2M100Tokenizer, NllbTokenizer and MBart50Tokenizer give these ids; this class gives the same ones
without sentencepiece or transformers (`spec_from` converts a model directory's tokenizer files at import time):

- ids: fairseq's dictionary, <s>=0, <pad>=1, </s>=2, <unk>=3, then the pieces (M2M100: in vocab.json's order, a piece
  it lacks is <unk>; NLLB and mBART-50: in the SentencePiece model's order, so a piece's id is its SentencePiece id
  + 1), then the language codes (M2M100: `__en__`, after vocab.json; NLLB: `eng_Latn`, mBART-50: `en_XX`, where the
  saved tokenizer puts them);
- a sentence is `code text </s>` (M2M100, NLLB, mBART-50) or `text </s> code` (NLLB with legacy_behaviour), on both
  sides: the target side's code is the first token the decoder is forced to produce, and the decoder starts from </s>;
- M2M100 and NLLB cut text with a BPE model: M2M100 as SentencePiece does; NLLB as transformers 5's NllbTokenizer,
  which keeps a trailing space (as one "▁" piece) where SentencePiece strips it. mBART-50 cuts it with a unigram model
  as transformers 5's MBart50Tokenizer does: the same trailing "▁", runs of spaces as one, a "▁" before the text.

Text is never read as a code or a control token: "__de__ </s> eng_Latn" typed in a text is ordinary pieces.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from model.importers import CannotImport
from model.spm_tokenizer import UNKNOWN, SentencePieceTokenizer
from model.token import Token

FILE = "multilingual_tokenizer.json"  # in a checkpoint directory, instead of tokenizer.json
SPM = "sentencepiece.bpe.model"
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0..3 in every fairseq dictionary
TEMPLATES = {"prefix": ("code", "text", "eos"), "suffix": ("text", "eos", "code")}  # where the code goes
M2M100_LANGUAGES = {  # transformers' M2M100Tokenizer FAIRSEQ_LANGUAGE_CODES, by its `language_codes` setting
    "m2m100": [
        "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el",
        "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu",
        "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt",
        "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt",
        "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr",
        "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu",
    ],
    "wmt21": ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"],
}  # fmt: skip
MBART50_LANGUAGES = [  # transformers' MBart50Tokenizer FAIRSEQ_LANGUAGE_CODES, in their order after the pieces
    "ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX", "gu_IN", "hi_IN", "it_IT", "ja_XX",
    "kk_KZ", "ko_KR", "lt_LT", "lv_LV", "my_MM", "ne_NP", "nl_XX", "ro_RO", "ru_RU", "si_LK", "tr_TR", "vi_VN",
    "zh_CN", "af_ZA", "az_AZ", "bn_IN", "fa_IR", "he_IL", "hr_HR", "id_ID", "ka_GE", "km_KH", "mk_MK", "ml_IN",
    "mn_MN", "mr_IN", "pl_PL", "ps_AF", "pt_XX", "sv_SE", "sw_KE", "ta_IN", "te_IN", "th_TH", "tl_XX", "uk_UA",
    "ur_PK", "xh_ZA", "gl_ES", "sl_SI",
]  # fmt: skip
KINDS = ("m2m100", "nllb", "mbart50")  # tokenizer_config.json's tokenizer_class, less "Tokenizer"/"Fast", lowercase


class MultilingualTokenizer(SentencePieceTokenizer):
    """SentencePieceTokenizer's interface for one shared vocabulary, with a language code on each side."""

    file_name = FILE

    def __init__(self, spec: dict):  # the parent's attributes, with one model shared by both sides
        self.spec = spec
        special = spec["special"]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (
            special["pad"], special["decoder_start"], special["eos"], special["unk"],
        )  # fmt: skip
        self.languages: dict[str, int] = spec["languages"]  # code (as src_lang/tgt_lang spell it) -> id
        self.template = TEMPLATES[spec["language_at"]]
        self.default_languages: dict[str, str] = spec["default_languages"]  # by side: the saved src_lang, tgt_lang
        self.special_ids = frozenset(
            (self.pad_id, self.eos_id, self.unk_id, special["bos"], *special.get("other", {}).values())
        ) | frozenset(self.languages.values())
        self.byte_ids: frozenset[int] = frozenset()
        self.language_codes = False  # no `>>xx<<` in text (SentencePieceTokenizer._split_code)
        hf = HFTokenizer.from_str(json.dumps(spec["tokenizer"]))
        vocab = spec["vocab"]
        pieces = [""] * spec["size"]  # ids past the vocabulary (made-up words) decode to ""
        for p, i in vocab.items():
            pieces[i] = p
        for code, i in self.languages.items():
            pieces[i] = spec["language_tokens"][code]
        for p, i in special.get("other", {}).items():
            pieces[i] = p
        ids = [vocab.get(p, self.unk_id) for p in spec["pieces"]]  # converted model's id -> model id
        known = frozenset(spec["pieces"]) - {spec["pieces"][hf.token_to_id(UNKNOWN)], *spec["control"]}
        both = ("source", "target")
        self._hf, self._ids, self._vocab, self._pieces = ({s: x for s in both} for x in (hf, ids, vocab, pieces))
        self._unknown = dict.fromkeys(both, hf.token_to_id(UNKNOWN))
        self._known, self._control = dict.fromkeys(both, known), dict.fromkeys(both, frozenset(spec["control"]))

    @property
    def leading_specials(self) -> int:
        """Special tokens before a source's text: the code where it comes first."""
        return self.template.index("text")

    @property
    def trailing_specials(self) -> int:
        """Special tokens after a source's text: </s>, and the code where it comes last (what truncation keeps)."""
        return len(self.template) - 1 - self.template.index("text")

    @property
    def vocab_size(self) -> int:
        return len(self._pieces["source"])

    def language_id(self, code: str) -> int:
        """The id of a language code as transformers' src_lang/tgt_lang spell it (`en`, `eng_Latn`)."""
        if code not in self.languages:
            known = ", ".join(sorted(self.languages)[:12])
            raise ValueError(f"unknown language {code!r}; this model has {len(self.languages)}: {known}, ...")
        return self.languages[code]

    def _unknown_runs(self, text: str, side: str) -> list[str]:
        """The normalized text of each run of unknown characters, in order (a BPE model names each one <unk>, with
        its span in the word's UTF-8 bytes)."""
        hf, unknown = self._hf[side], self._unknown[side]
        words = [w.encode() for w, _ in hf.pre_tokenizer.pre_tokenize_str(hf.normalizer.normalize_str(text))]
        runs = []
        for word in words:
            runs += [
                word[t.offsets[0] : t.offsets[1]].decode() for t in hf.model.tokenize(word.decode()) if t.id == unknown
            ]
        return runs

    def _wrap(self, tokens: list, code: Any, eos: Any) -> list:
        """`tokens` with the language code and </s> around them, as the model's template puts them."""
        return [x for part in self.template for x in {"code": [code], "text": tokens, "eos": [eos]}[part]]

    def encode(
        self, text: str, side: str = "source", add_special_tokens: bool = True, language: str | None = None
    ) -> list[int]:
        """Model ids; with special tokens, the language's code and </s> where the model's tokenizer puts them."""
        ids = self._encode(text, side)[0]
        if not add_special_tokens:
            return ids
        return self._wrap(ids, self.language_id(language or self.default_languages[side]), self.eos_id)

    def encode_batch(
        self, texts: list[str], side: str = "source", add_special_tokens: bool = True, language: str | None = None
    ) -> list[list[int]]:
        return [self.encode(t, side, add_special_tokens, language) for t in texts]

    def tokenize(
        self, text: str, side: str = "source", add_special_tokens: bool = True, language: str | None = None
    ) -> list[Token]:
        """Tokens with ids, pieces and character offsets into `text`; the code and </s> have empty spans."""
        toks = super().tokenize(text, side, add_special_tokens=False)
        if not add_special_tokens:
            return toks
        code = self.language_id(language or self.default_languages[side])
        n = len(text)
        at = 0 if self.template[0] == "code" else n
        pieces = self._pieces[side]
        return self._wrap(
            toks, Token(code, pieces[code], at, at, True), Token(self.eos_id, pieces[self.eos_id], n, n, True)
        )


# ---- conversion, at import time (needs sentencepiece) ---------------------------------------------------------


def spec_from(directory: str | Path, default_kind: str = "nllb") -> dict:
    """The MultilingualTokenizer spec of a directory that M2M100Tokenizer, NllbTokenizer or MBart50Tokenizer saved (or
    a Hub download): sentencepiece.bpe.model and tokenizer_config.json, with vocab.json (M2M100) or maybe
    tokenizer.json (NLLB, mBART-50). Without a tokenizer_class, vocab.json means M2M100, else `default_kind`."""
    from model.importers.spm import read_json

    source = Path(directory)
    settings = read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() else {}
    kind = str(settings.get("tokenizer_class", "M2M100" if (source / "vocab.json").is_file() else default_kind))
    kind = kind.removesuffix("Fast").removesuffix("Tokenizer").lower()
    if kind not in KINDS:
        name = settings["tokenizer_class"]
        raise CannotImport(
            f"tokenizer_config.json: {name} is not supported (M2M100Tokenizer, NllbTokenizer or MBart50Tokenizer)"
        )
    if not (source / SPM).is_file():
        raise CannotImport(f"{source / SPM} is missing")
    if kind == "mbart50":
        return mbart50_spec(source, settings)
    tokenizer, pieces, control, scores = convert_bpe(source / SPM, strip=kind == "m2m100")
    if kind == "m2m100":
        vocab = read_json(source / "vocab.json")
        table = settings.get("language_codes", "m2m100")
        if table not in M2M100_LANGUAGES:
            raise CannotImport(f"tokenizer_config.json: language_codes={table!r}; known: {sorted(M2M100_LANGUAGES)}")
        codes = M2M100_LANGUAGES[table]
        languages, other = {c: len(vocab) + i for i, c in enumerate(codes)}, {}
        tokens = {c: f"__{c}__" for c in codes}
        size = len(vocab) + len(codes) + int(settings.get("num_madeup_words", 8))
        language_at, default = "prefix", "en"
    else:
        vocab = {t: i for i, t in enumerate(FAIRSEQ_SPECIALS)}
        for p in scores:  # the normal pieces, in the SentencePiece model's order
            vocab.setdefault(p, len(vocab))
        languages, other = added_languages(source, settings, len(vocab))
        tokens = {c: c for c in languages}
        size = max([*vocab.values(), *languages.values(), *other.values()]) + 1
        language_at = "suffix" if settings.get("legacy_behaviour", False) else "prefix"
        default = "eng_Latn"
    return finish(
        kind, settings, default, other, tokenizer=tokenizer, pieces=pieces, control=control, vocab=vocab, size=size,
        languages=languages, language_tokens=tokens, language_at=language_at,
    )  # fmt: skip


def finish(kind: str, settings: dict, default: str, other: dict[str, int], **fields: Any) -> dict:
    """The spec's dictionary, once the fairseq ids are checked; `fields`: tokenizer, pieces, control, vocab, size,
    languages, language_tokens, language_at."""
    wrong = [t for i, t in enumerate(FAIRSEQ_SPECIALS) if fields["vocab"].get(t) != i]
    if wrong:
        raise CannotImport(f"the vocabulary does not have {wrong} at fairseq's ids (<s>, <pad>, </s>, <unk> = 0..3)")
    defaults = {side: settings.get(key) or default for side, key in (("source", "src_lang"), ("target", "tgt_lang"))}
    special = {"bos": 0, "pad": 1, "eos": 2, "unk": 3, "decoder_start": 2, "other": other}
    return {"kind": kind, **fields, "default_languages": defaults, "special": special}


def mbart50_spec(source: Path, settings: dict) -> dict:
    """MBart50Tokenizer's: the SentencePiece model as a unigram model (whatever its type, as transformers builds it),
    cutting text as transformers 5 does: no strip, runs of spaces as one, always a "▁" before the text; its pieces at
    their SentencePiece id + 1, then the 52 language codes, then <mask>."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    from model.importers.spm import convert_spm

    proto = read_spm(source / SPM)
    proto.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    proto.normalizer_spec.add_dummy_prefix = proto.normalizer_spec.remove_extra_whitespaces = True
    with tempfile.TemporaryDirectory() as tmp:
        twin = Path(tmp) / SPM
        twin.write_bytes(proto.SerializeToString())
        tokenizer, pieces, control = convert_spm(twin)
    steps = tokenizer["normalizer"]["normalizers"]
    tokenizer["normalizer"]["normalizers"] = [s for s in steps if s["type"] != "Strip"]
    vocab = dict(zip(FAIRSEQ_SPECIALS, range(4)))
    for i, p in enumerate(proto.pieces[3:], start=3):
        vocab.setdefault(p.piece, i + 1)
    languages, other = added_languages(source, settings, len(proto.pieces) + 1, MBART50_LANGUAGES)
    size = max([*vocab.values(), *languages.values(), *other.values()]) + 1
    return finish(
        "mbart50", settings, "en_XX", other, tokenizer=tokenizer, pieces=pieces, control=control, vocab=vocab,
        size=size, languages=languages, language_tokens={c: c for c in languages}, language_at="prefix",
    )  # fmt: skip


def added_languages(
    source: Path, settings: dict, vocab_size: int, known: list[str] | None = None
) -> tuple[dict[str, int], dict[str, int]]:
    """The language codes and the other added tokens (<mask>) with their ids: tokenizer.json's where it is saved,
    else fairseq's layout (the codes after the vocabulary, then <mask>). The codes are tokenizer_config.json's,
    else tokenizer.json's added tokens (NLLB), else `known` (mBART-50's fixed list)."""
    from model.importers.spm import added_tokens, read_json, refuse_added

    codes = settings.get("extra_special_tokens") or settings.get("additional_special_tokens") or known or []
    codes = [c for c in codes if isinstance(c, str) and c not in FAIRSEQ_SPECIALS]
    mask = str(settings.get("mask_token", "<mask>"))
    if (source / "tokenizer.json").is_file():
        added = {t["content"]: t["id"] for t in read_json(source / "tokenizer.json").get("added_tokens", [])}
        codes = codes or [t for t in added if t not in FAIRSEQ_SPECIALS and t != mask]
        if unknown := [c for c in codes if c not in added]:
            raise CannotImport(f"tokenizer.json does not add the language codes {unknown[:5]}")
        refuse_added({t: i for t, i in added.items() if t not in {*codes, *FAIRSEQ_SPECIALS, mask}}, "tokenizer.json")
        return {c: added[c] for c in codes}, ({mask: added[mask]} if mask in added else {})
    if not codes:
        raise CannotImport("tokenizer_config.json names no language codes (additional_special_tokens)")
    others = {t: i for t, i in added_tokens(source, settings).items() if t not in {*codes, *FAIRSEQ_SPECIALS, mask}}
    refuse_added(others, "the tokenizer")
    languages = {c: vocab_size + i for i, c in enumerate(codes)}
    return languages, {mask: vocab_size + len(codes)}


def read_spm(path: Path) -> Any:
    """A SentencePiece model file's ModelProto."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        raise CannotImport(f"converting {path.name} needs sentencepiece: bash scripts/install.sh import ({e})") from e
    try:
        return pb.ModelProto.FromString(path.read_bytes())
    except Exception as e:  # a DecodeError: the file is something else
        raise CannotImport(f"{path} is not a SentencePiece model ({e})") from e


def convert_bpe(path: Path, strip: bool) -> tuple[dict, list[str], list[str], dict]:
    """A SentencePiece BPE model as `tokenizers` JSON, the piece of each of its ids, its control pieces, and the
    scores of its normal pieces; `strip=False` keeps a trailing space, as transformers' NllbTokenizer does."""
    from model.importers.spm import convert_spm

    proto = read_spm(path)
    from sentencepiece import sentencepiece_model_pb2 as pb  # read_spm has checked that it is there

    if proto.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise CannotImport(f"{path.name}: model_type={proto.trainer_spec.model_type} is not supported (needs BPE)")
    # convert_spm checks the options and builds the normalizer and pre-tokenizer; it reads unigram models only, so
    # it is given this model as one (the pieces are the same; only the model that cuts words differs)
    proto.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    with tempfile.TemporaryDirectory() as tmp:
        twin = Path(tmp) / path.name
        twin.write_bytes(proto.SerializeToString())
        tokenizer, _, control = convert_spm(twin)
    kinds = pb.ModelProto.SentencePiece
    pieces = [p.piece for p in proto.pieces]
    names, scores = [], {}
    for p in proto.pieces:
        if p.type == kinds.UNKNOWN:
            names.append(UNKNOWN)
        elif p.type == kinds.NORMAL:
            names.append(p.piece)
            scores[p.piece] = p.score
        else:
            names.append("\U0010fffd" * 4 + p.piece)  # a control piece: no text can match it
    vocab = {p: i for i, p in enumerate(names)}
    tokenizer["model"] = {
        "type": "BPE", "dropout": None, "unk_token": UNKNOWN, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
        "vocab": vocab, "merges": [[a, b] for a, b in merges_of(vocab, scores)],
    }  # fmt: skip
    if not strip:
        steps = tokenizer["normalizer"]["normalizers"]
        tokenizer["normalizer"]["normalizers"] = [s for s in steps if s["type"] != "Strip"]
    return tokenizer, pieces, control, scores


def merges_of(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """Every split of a piece into two pieces, the best-scored piece's first: SentencePiece merges the adjacent pair
    whose union scores best. Ordered as transformers' generate_merges orders them, for the same ids on ties."""
    merges = []
    for piece, score in scores.items():
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in scores and piece[k:] in scores]
        merges += [(left, right, score) for left, right in sorted(splits, key=lambda s: (vocab[s[0]], vocab[s[1]]))]
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]
