"""The M2M100 and mBART loaders (model/importers/m2m100.py, mbart.py): the same logits and greedy tokens as
transformers' M2M100ForConditionalGeneration (NLLB-200's architecture) and MBartForConditionalGeneration (mBART-50's),
or a refusal that names the option or tensor.

The references are tiny models that transformers itself builds with seeded random weights."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from model.batch import decode
from model.decoding import KVCache, greedy_decode
from model.importers import CannotImport, m2m100, mbart
from model.importers.m2m100 import load, model_config, read_config
from model.layers import sinusoidal_table
from model.search import DecodingOptions

transformers = pytest.importorskip("transformers")

VOCAB, PAD, EOS = 96, 1, 2
LANGUAGES = range(88, 96)  # the ids a forced first target token takes, as NLLB's language codes are
BUDGET = 12
VARIANTS = {  # name: (architecture, config options)
    "scaled": ("m2m100", {}),
    "unscaled-untied-gelu": (
        "m2m100", {"scale_embedding": False, "tie_word_embeddings": False, "activation_function": "gelu"}
    ),
    "odd-width": ("m2m100", {"d_model": 35, "encoder_attention_heads": 5, "decoder_attention_heads": 5}),
    "mbart-50": ("mbart", {"scale_embedding": True, "activation_function": "relu"}),  # mBART-50's settings
    "mbart-defaults-untied-bias": ("mbart", {"tie_word_embeddings": False, "logits_bias": True}),
}  # fmt: skip
LOADERS = {"m2m100": m2m100, "mbart": mbart}


def build_m2m100(out: Path, seed: int = 0, architecture: str = "m2m100", **options) -> Path:
    """config.json, generation_config.json and model.safetensors of a tiny M2M100ForConditionalGeneration (or
    MBartForConditionalGeneration; `logits_bias`: a final_logits_bias that is not zero).

    </s>'s embedding (and output row) is scaled up so that some outputs end before the budget; mBART's learned
    position tables and embedding norms are random too, so that a row or a norm taken wrongly shows."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, MBartConfig, MBartForConditionalGeneration

    bias = options.pop("logits_bias", False)
    settings = {
        "vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
        "scale_embedding": True, "pad_token_id": PAD, "bos_token_id": 0, "eos_token_id": EOS,
        "decoder_start_token_id": EOS, "init_std": 0.2, **options,
    }  # fmt: skip
    if architecture == "mbart":
        settings = {**{k: v for k, v in settings.items() if k != "scale_embedding"}, **options}
    torch.manual_seed(seed)
    if architecture == "mbart":
        model = MBartForConditionalGeneration(MBartConfig(**settings)).eval()
    else:
        model = M2M100ForConditionalGeneration(M2M100Config(**settings)).eval()
    with torch.no_grad():
        for table in {model.model.shared.weight, model.lm_head.weight}:  # one table when tied
            table[EOS] *= 5.0
        if architecture == "mbart":
            for side in (model.model.encoder, model.model.decoder):
                side.layernorm_embedding.weight.normal_(1.0, 0.3)
                side.layernorm_embedding.bias.normal_(0.0, 0.3)
            if bias:
                model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=list(VARIANTS))
def m2m100(request, tmp_path_factory):
    """(transformers' model, ours) for each variant."""
    from transformers import AutoModelForSeq2SeqLM

    architecture, options = VARIANTS[request.param]
    path = build_m2m100(tmp_path_factory.mktemp(request.param) / "model", architecture=architecture, **options)
    return AutoModelForSeq2SeqLM.from_pretrained(path).eval(), LOADERS[architecture].load(path)


@pytest.fixture(scope="module")
def m2m100_dir(tmp_path_factory) -> Path:
    return build_m2m100(tmp_path_factory.mktemp("m2m100") / "m2m100")


def random_sources(n: int, seed: int) -> list[list[int]]:
    """n id sequences of 1..24 tokens ending with </s>, as M2M100's tokenizer ends a source."""
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(rng.randint(0, 23))] + [EOS] for _ in range(n)]


def right_padded(sources: list[list[int]]) -> torch.Tensor:
    width = max(map(len, sources))
    return torch.tensor([s + [PAD] * (width - len(s)) for s in sources])  # (B, S)


@torch.inference_mode()
def test_teacher_forced_logits_equal_transformers_on_a_right_padded_batch(m2m100):
    hf, ours = m2m100
    src = right_padded(random_sources(8, seed=1))
    gen = torch.Generator().manual_seed(2)
    tgt = torch.cat([torch.full((8, 1), EOS), torch.randint(3, VOCAB, (8, 15), generator=gen)], dim=1)  # (B, T)
    expected = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(ours(src, tgt), expected, atol=1e-5, rtol=0)


@torch.inference_mode()
def test_greedy_decoding_with_a_forced_language_token_gives_generates_tokens(m2m100):
    """Our batched decoding (right-padded sources, KV cache, the language forced as DecodingOptions.prefix) against
    generate(forced_bos_token_id=...) on each source alone: decoder start </s>, then the language, then greedy."""
    hf, ours = m2m100
    sources = random_sources(60, seed=3)
    languages = [LANGUAGES[i % len(LANGUAGES)] for i in range(len(sources))]
    ended = 0
    for language in LANGUAGES:
        idx = [i for i, lang in enumerate(languages) if lang == language]
        got = decode(ours, [sources[i] for i in idx], [BUDGET] * len(idx), DecodingOptions(prefix=(language,)))
        for i, hyps in zip(idx, got):
            out = hf.generate(
                torch.tensor([sources[i]]), num_beams=1, do_sample=False, forced_bos_token_id=language,
                max_new_tokens=BUDGET,
            )[0].tolist()  # fmt: skip
            assert out[:2] == [EOS, language]
            finished = out[-1] == EOS and len(out) > 2
            assert hyps[0].tokens == out[1 : len(out) - finished], (sources[i], language)
            # mBART's forced_eos_token_id ends a text at its budget with </s>: the text was cut all the same
            cut = hf.generation_config.forced_eos_token_id is not None and len(out) == BUDGET + 1
            assert hyps[0].finish_reason == ("eos" if finished and not cut else "length")
            ended += finished and not cut
    assert 0 < ended < len(sources)  # both ways of ending are compared


@torch.inference_mode()
def test_greedy_decoding_without_a_forced_token_gives_generates_tokens(m2m100):
    """The fast greedy path (model.decode_greedy on a KVCache) on one right-padded batch."""
    hf, ours = m2m100
    sources = random_sources(20, seed=4)
    got = greedy_decode(ours, right_padded(sources), BUDGET)
    for source, hyp in zip(sources, got):
        out = hf.generate(torch.tensor([source]), num_beams=1, do_sample=False, max_new_tokens=BUDGET)[0].tolist()
        finished = out[-1] == EOS and len(out) > 1
        assert hyp.tokens == out[1 : len(out) - finished], source


@torch.inference_mode()
def test_cached_steps_equal_transformers_incremental_decoding_with_padding_among_the_tokens(m2m100):
    """Token by token over a KV cache, as generate feeds them: a token's position is the past length (+ 2 in either
    table), and a <pad> among the target tokens (a model may generate one) takes M2M100's zero position row, and
    mBART's row of its position."""
    hf, ours = m2m100
    src = right_padded(random_sources(1, seed=5))
    encoded = hf.get_encoder()(input_ids=src)
    tokens = [EOS, LANGUAGES[0], 7, PAD, 9, PAD, PAD, 11, 12, EOS, 13]
    cache = KVCache(ours, 1, len(tokens) + 1, src.size(1))
    cache.add(ours, src)
    past = None
    for token in tokens:
        step = torch.tensor([[token]])
        out = hf(encoder_outputs=encoded, decoder_input_ids=step, past_key_values=past, use_cache=True)
        past = out.past_key_values
        torch.testing.assert_close(ours.decode_step(step[0], cache), out.logits[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("d_model", [32, 35, 1024])
def test_the_position_table_is_m2m100s(d_model):
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    expected = M2M100SinusoidalPositionalEmbedding.get_embedding(130, d_model)
    assert torch.equal(sinusoidal_table(130, d_model, "fairseq"), expected)


def test_the_config_maps_to_our_options(m2m100_dir):
    c = model_config(read_config(m2m100_dir))
    assert (c.positions, c.position_offset, c.pad_position_zero, c.norm_first) == ("fairseq", PAD + 1, True, True)
    assert (c.pad_id, c.bos_id, c.eos_id, c.share_embeddings, c.tie_output) == (PAD, EOS, EOS, True, True)


# ---- what the loader refuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"some_new_option": 1}, "options this importer does not know: ['some_new_option']"),
        ({"activation_function": "tanh"}, "activation_function='tanh' is not supported"),
        ({"encoder_attention_heads": 2}, "encoder_attention_heads=2 differs from the decoder's head count"),
        ({"encoder_ffn_dim": 32}, "encoder_ffn_dim=32 differs from the decoder's feed-forward width"),
        ({"is_decoder": True}, "is_decoder=True is not supported"),
        ({"forced_eos_token_id": 5}, "forced_eos_token_id=5 differs from eos_token_id=2"),
        ({"eos_token_id": [2, 3]}, "eos_token_id=[2, 3]"),
        ({"architectures": ["M2M100Model"]}, "architectures ['M2M100Model']"),
        ({"model_type": "mbart"}, "model_type is 'mbart'"),
        ({"d_model": 30}, "d_model=30 is not divisible by n_heads=4"),
    ],
)
def test_config_options_that_cannot_be_loaded_exactly_are_refused_by_name(m2m100_dir, tmp_path, change, message):
    src = shutil.copytree(m2m100_dir, tmp_path / "src")
    generation = json.loads((src / "generation_config.json").read_text())  # its decoding ids win over config.json's
    generation.update({k: v for k, v in change.items() if k in generation})
    (src / "generation_config.json").write_text(json.dumps(generation))
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CannotImport, match=message.replace("[", r"\[").replace("(", r"\(")):
        load(src)


def rewrite_weights(src: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(src / "model.safetensors"))
    change(weights)
    save_file(weights, str(src / "model.safetensors"))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop("model.encoder.layer_norm.weight"), "no tensor 'model.encoder.layer_norm.weight'"),
        (lambda w: w.pop("model.decoder.layers.1.encoder_attn.v_proj.bias"), "encoder_attn.v_proj.bias"),
        (lambda w: w.pop("model.shared.weight"), "no tensor 'model.shared.weight'"),
        (lambda w: w.update(extra=torch.zeros(3)), r"does not know: \['extra'\]"),
        (
            lambda w: w.update({"model.decoder.layers.0.fc1.weight": torch.zeros(63, 32)}),
            r"model.decoder.layers.0.fc1.weight: the weights give shape \[63, 32\], the config needs \[64, 32\]",
        ),
        (
            lambda w: w.update({"lm_head.weight": torch.zeros(VOCAB, 32)}),
            r"lm_head.weight \(tied to model.shared.weight\) differs",
        ),
        (
            lambda w: w.update({"model.decoder.embed_positions.weights": torch.ones(66, 32)}),
            "model.decoder.embed_positions.weights is not the sinusoidal table M2M100 computes",
        ),
    ],
)
def test_missing_extra_misshaped_and_untied_weights_are_refused_by_name(m2m100_dir, tmp_path, change, message):
    src = shutil.copytree(m2m100_dir, tmp_path / "src")
    rewrite_weights(src, change)
    with pytest.raises(CannotImport, match=message):
        load(src)


def test_tied_copies_and_the_saved_position_table_of_older_saves_are_accepted(m2m100_dir, tmp_path):
    """transformers 4 saved the tied tables (and fairseq conversions the position table) beside model.shared."""
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    def add_copies(w):
        for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
            w[name] = w["model.shared.weight"].clone()
        w["model.decoder.embed_positions.weights"] = M2M100SinusoidalPositionalEmbedding.get_embedding(66, 32, PAD)

    src = shutil.copytree(m2m100_dir, tmp_path / "src")
    rewrite_weights(src, add_copies)
    ids = torch.tensor([[5, 6, 7, EOS]])
    assert torch.equal(load(src)(ids, ids), load(m2m100_dir)(ids, ids))


# ---- mBART ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mbart_dir(tmp_path_factory) -> Path:
    return build_m2m100(tmp_path_factory.mktemp("mbart") / "mbart", architecture="mbart", **VARIANTS["mbart-50"][1])


def test_mbarts_config_maps_to_our_options(mbart_dir):
    c = mbart.model_config(mbart.read_config(mbart_dir))
    assert (c.positions, c.position_offset, c.pad_position_zero, c.embed_norm) == ("learned", 0, False, True)
    assert (c.norm_first, c.scale_embedding, c.activation, c.force_eos, c.logits_bias) == (
        True, True, "relu", True, False,
    )  # fmt: skip
    assert (c.pad_id, c.bos_id, c.eos_id, c.share_embeddings, c.tie_output) == (PAD, EOS, EOS, True, True)
    model = mbart.load(mbart_dir)
    assert model.tgt_embed is not model.src_embed and model.tgt_embed.token is model.src_embed.token


@pytest.mark.parametrize(
    "change, message",
    [
        ({"normalize_before": False}, "normalize_before=False is not supported; only True is (pre-LN"),
        ({"add_final_layer_norm": False}, "add_final_layer_norm=False is not supported"),
        ({"normalize_embedding": False}, "normalize_embedding=False is not supported"),
        ({"static_position_embeddings": True}, "static_position_embeddings=True is not supported"),
        ({"extra_pos_embeddings": 1}, "extra_pos_embeddings=1 is not supported; only 2 is"),
        ({"decoder_start_token_id": None}, "decoder_start_token_id=None; a single token id is supported"),
        ({"some_new_option": 1}, "options this importer does not know: ['some_new_option']"),
        ({"architectures": ["MBartForCausalLM"]}, "architectures ['MBartForCausalLM']"),
    ],
)
def test_mbart_options_that_cannot_be_loaded_exactly_are_refused_by_name(mbart_dir, tmp_path, change, message):
    src = shutil.copytree(mbart_dir, tmp_path / "src")
    (src / "generation_config.json").unlink()  # its decoding ids would win over config.json's
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CannotImport, match=message.replace("[", r"\[").replace("(", r"\(")):
        mbart.load(src)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda w: w.pop("model.encoder.layernorm_embedding.bias"),
            "no tensor 'model.encoder.layernorm_embedding.bias'",
        ),
        (lambda w: w.pop("model.decoder.embed_positions.weight"), "no tensor 'model.decoder.embed_positions.weight'"),
        (
            lambda w: w.update({"model.encoder.embed_positions.weight": torch.zeros(64, 32)}),
            r"model.encoder.embed_positions.weight: the weights give shape \[64, 32\], the config needs \[66, 32\]",
        ),
    ],
)
def test_missing_and_misshaped_mbart_weights_are_refused_by_name(mbart_dir, tmp_path, change, message):
    src = shutil.copytree(mbart_dir, tmp_path / "src")
    rewrite_weights(src, change)
    with pytest.raises(CannotImport, match=message):
        mbart.load(src)


@torch.inference_mode()
def test_mbarts_positions_start_at_row_two_of_its_tables(mbart_dir):
    """Position p is row p + 2 of transformers' table, on each side; the two rows before are never read."""
    from transformers import MBartForConditionalGeneration

    hf, ours = MBartForConditionalGeneration.from_pretrained(mbart_dir), mbart.load(mbart_dir)
    for theirs, mine in ((hf.model.encoder, ours.src_embed), (hf.model.decoder, ours.tgt_embed)):
        assert torch.equal(mine.pe, theirs.embed_positions.weight[2:])
    assert not torch.equal(ours.src_embed.pe, ours.tgt_embed.pe)
