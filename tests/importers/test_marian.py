"""nmt-import marian: the same tokens, text and attention as transformers' MarianMTModel and MarianTokenizer.

The references are transformers' own classes on small Marian models built by tests/importers/marian_fixture.py, one
with a shared vocabulary and one with two; the sentences are Multi30k's test2016 where the data is at hand.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.text import Engine
from model.batch import decode
from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from model.importers import CannotImport, main, resolve
from model.importers.marian import import_marian
from model.options import DecodingOptions
from tests.importers.marian_fixture import build_marian, held_out_sentences

transformers = pytest.importorskip("transformers")
LAYOUTS = ["shared", "separate"]
AWKWARD = [
    "", " ", "  two  spaces  ", "\ttabs\tand\nnewlines\n", "emoji 😀 👍🏽 and a snowman ☃", "中文字符 日本語のテキスト",
    "combining e\u0301 and café and cafe\u0301", "ÄÖÜ äöü ß Straße", "ﬁ ligature ① ２ full-width", "no\u00a0break",
    "zero\u200bwidth", "\u3000ideographic\u3000space", "...!!??;;", "A" * 80, "Ünïcödé ñ ø å", "\u2028line\u2029para",
    "x", "1234567890", "mixed CASE Words", "quotes \"double\" and 'single'",
]  # fmt: skip
BUDGET = 24


@pytest.fixture(scope="module", params=LAYOUTS)
def marian(request, marian_models):
    """(layout, transformers model, MarianTokenizer, our model, our tokenizer, our checkpoint dir)"""
    hf_dir, ours = marian_models[request.param]
    model, tokenizer, _ = load_checkpoint(ours)
    # eager attention: the reference implementation, and the one that returns attention weights
    hf = transformers.MarianMTModel.from_pretrained(hf_dir, attn_implementation="eager").eval()
    return request.param, hf, transformers.MarianTokenizer.from_pretrained(hf_dir), model, tokenizer, ours


@pytest.fixture(scope="module")
def held_out(marian) -> tuple[list[str], list[list[int]]]:
    """The first 200 held-out sentences and transformers' greedy tokens for them: generated once a layout (one
    sentence at a time, ~20 s), for every test that compares with them."""
    _, hf, htok, _, _, _ = marian
    sentences = held_out_sentences("en")[:200]
    return sentences, [reference(hf, htok(s).input_ids) for s in sentences]


def reference(hf, ids: list[int], budget: int = BUDGET) -> list[int]:
    """transformers' greedy decoding, without the decoder start and the final </s>."""
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), num_beams=1, do_sample=False, max_new_tokens=budget)[0].tolist()
    out = out[1:]
    return out[:-1] if out and out[-1] == hf.config.eos_token_id else out


def test_source_and_target_ids_equal_marian_tokenizers(marian):
    _, _, htok, _, tok, _ = marian
    for lang, side in (("en", "source"), ("de", "target")):
        for text in held_out_sentences(lang) + AWKWARD:
            theirs = htok(text).input_ids if side == "source" else htok(text_target=text).input_ids
            assert tok.encode(text, side) == theirs, (side, text)
            tokens = tok.tokenize(text, side)
            assert [t.id for t in tokens] == theirs
            for t in tokens:  # offsets stay inside the text and in order; the </s> is an empty span at the end
                assert 0 <= t.start <= t.end <= len(text)
            assert [t.start for t in tokens] == sorted(t.start for t in tokens)


def test_text_that_spells_special_tokens_is_cut_as_marian_tokenizer_cuts_it_with_split_special_tokens(marian):
    _, _, htok, _, tok, _ = marian
    for text in ("</s>", "<pad>", "<unk>", "a <s>dog</s> runs <pad>.", "</s></s><unk>"):
        for side in ("source", "target"):
            kwargs = {"text": text} if side == "source" else {"text_target": text}
            theirs = htok(**kwargs, split_special_tokens=True).input_ids  # MarianTokenizer itself reads them as such
            assert tok.encode(text, side) == theirs, (side, text)
            assert {tok.eos_id, tok.pad_id}.isdisjoint(theirs[:-1])


def test_decoding_equals_marian_tokenizer_with_and_without_special_tokens(marian):
    _, _, htok, model, tok, _ = marian
    rng, vocab = random.Random(0), model.config.tgt_vocab_size
    for _ in range(1000):
        ids = [rng.randrange(vocab) for _ in range(rng.randrange(0, 14))]
        for skip in (True, False):
            assert tok.decode(ids, skip) == htok.decode(ids, skip_special_tokens=skip), (ids, skip)
    # SentencePiece drops the leading "▁" of every piece until some text is out: "▁", "▁", "▁a" decodes to "a"
    space = [i for i in range(vocab) if tok.id_to_token(i) == "▁"]
    word = next(i for i in range(vocab) if tok.id_to_token(i).startswith("▁") and len(tok.id_to_token(i)) > 1)
    for ids in ([*space, *space, word], [*space, word, *space, *space, word], [tok.eos_id, *space, *space, word]):
        for skip in (True, False):
            assert tok.decode(ids, skip) == htok.decode(ids, skip_special_tokens=skip), (ids, skip)


def test_greedy_decoding_gives_transformers_tokens_alone_and_in_a_batch(marian, held_out):
    _, _, _, model, tok, _ = marian
    sentences, expected = held_out
    alone = [greedy_decode(model, torch.tensor([tok.encode(s)]), BUDGET)[0].tokens for s in sentences[:50]]
    assert alone == expected[:50]
    ids = [tok.encode(s) for s in sentences]
    batch = torch.full((len(ids), max(map(len, ids))), model.config.source_pad_id)
    for row, seq in enumerate(ids):
        batch[row, : len(seq)] = torch.tensor(seq)
    assert [h.tokens for h in greedy_decode(model, batch, BUDGET)] == expected
    # the budget's last token is </s> (forced_eos_token_id), as transformers makes it
    assert any(len(e) == BUDGET - 1 for e in expected)
    assert all(len(e) < BUDGET for e in expected)


def test_beam_search_gives_transformers_tokens_and_scores_where_the_budget_ends_hypotheses(tmp_path):
    """Small budgets, where hypotheses that end with </s> compete with those the budget ends with its forced </s>
    (forced_eos_token_id): that </s> counts in the length, and the beams reach it a step after the others end, as in
    transformers (left out, such hypotheses scored too low and beam search gave another translation, or none)."""
    hf_dir = build_marian(tmp_path / "hf", seed=3, eos_bias=5.0)  # </s> likely early: both endings compete
    model, _, _ = load_checkpoint(import_marian(hf_dir, tmp_path / "ours", {"name": "eos", "path": str(hf_dir)}))
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    htok = transformers.MarianTokenizer.from_pretrained(hf_dir)
    endings = set()
    for sentence in held_out_sentences("en")[:8]:
        ids = htok(sentence).input_ids
        for budget in range(2, 8):
            with torch.no_grad():
                out = hf.generate(torch.tensor([ids]), max_new_tokens=budget, num_beams=4, early_stopping=True,
                                  do_sample=False, output_scores=True, return_dict_in_generate=True)  # fmt: skip
            want = out.sequences[0].tolist()[1:]
            want = want[:-1] if want and want[-1] == hf.config.eos_token_id else want
            ((hyp, *_),) = decode(model, [ids], [budget], DecodingOptions(beam_size=4))
            assert hyp.tokens == want, (sentence, budget)
            assert hyp.score == pytest.approx(out.sequences_scores[0].item(), abs=1e-3), (sentence, budget)
            endings.add(hyp.finish_reason)
    assert endings == {"eos", "length"}


@pytest.mark.anyio
@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.compiles)], ids=["eager", "compiled"])
async def test_the_engine_translates_as_transformers_batched_and_alone(marian, held_out, compiled, monkeypatch):
    layout, hf, htok, model, tok, _ = marian
    if compiled and layout == "separate":
        pytest.skip("compiling is checked on one layout: the step is the same code")
    if compiled:  # greedy requests only: the full step (beam search, sampling) never runs, so its graph is not built
        from model.compile import graphs_for, runtime

        monkeypatch.setattr(runtime, "graphs_for", lambda m, cache, steps: graphs_for(m, cache, ("greedy",)))
    sentences, expected = held_out
    engine = Engine.local(
        model, tok, max_input_tokens=128, max_new_tokens=64, max_batch_texts=200,
        max_batch_size=1 if compiled else 32,  # compiled: the one-row graphs (tests/model/test_compile.py has more)
        compile="blocking" if compiled else "off", compile_mode="default", screen_logits=True,
    )  # fmt: skip
    await engine.start()
    try:
        batched = await engine.translate(sentences, max_new_tokens=BUDGET)
        alone = [(await engine.translate(s, max_new_tokens=BUDGET))[0] for s in sentences[:40]]
        if compiled:
            assert engine.compiled and model.steps.greedy_step.missed == 0 and model.steps.prefill.missed == 0
    finally:
        engine.stop()
    assert [t.token_ids for t in batched] == expected
    assert [t.token_ids for t in alone] == expected[:40]
    for t, e in zip(batched, expected):
        assert t.text == htok.decode(e, skip_special_tokens=True)
        assert t.finish_reason == ("eos" if len(e) < BUDGET - 1 else "length")
    # a budget of one token is the forced </s> alone, as transformers gives it
    (one,) = await _translate_once(model, tok, sentences[0], 1)
    assert one.token_ids == reference(hf, htok(sentences[0]).input_ids, 1) == []


async def _translate_once(model, tok, text, budget):
    engine = Engine.local(model, tok, max_input_tokens=128, max_new_tokens=64)
    await engine.start()
    try:
        return await engine.translate(text, max_new_tokens=budget)
    finally:
        engine.stop()


def test_attention_equals_transformers_output_attentions(marian):
    _, hf, htok, model, _, _ = marian
    for text in held_out_sentences("en")[:20]:
        src = htok(text).input_ids
        tgt = [hf.config.decoder_start_token_id, *reference(hf, src)]
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt]), output_attentions=True)
            src_ids, tgt_ids = torch.tensor([src]), torch.tensor([tgt])
            mask = torch.ones(1, 1, 1, len(src), dtype=torch.bool)
            memory, enc = model.encode(src_ids, mask, need_weights=True)
            causal = torch.ones(len(tgt), len(tgt), dtype=torch.bool).tril()[None, None]
            _, dec, cross = model.decode(tgt_ids, memory, mask, causal, need_weights=True)
        for ours, theirs in (
            (enc, out.encoder_attentions),
            (dec, out.decoder_attentions),
            (cross, out.cross_attentions),
        ):
            for a, b in zip(ours, theirs, strict=True):
                assert torch.allclose(a, b, atol=1e-5), float((a - b).abs().max())


def test_compiled_and_screened_steps_pick_the_same_tokens(marian):
    """The logit screen (bfloat16 output projection, confirmed in float32) with the model's logit bias and the
    suppressed <pad>: the same ids as the float32 projection, on every step of a 32-row batch."""
    _, _, _, model, _, _ = marian
    from model.screen import LogitScreen

    hidden = torch.randn(32, model.config.d_model) * 3
    plain = model.generator(hidden).argmax(-1)
    screen = LogitScreen(model.generator_weight, model.output_bias)
    ids, _ = LogitScreen.confirm(*screen(hidden, model.generator_weight), hidden, model.generator)
    assert torch.equal(ids, plain)
    assert model.config.pad_id not in ids.tolist()


# ---- what the import writes, and what it refuses --------------------------------------------------------------


def test_the_checkpoint_records_where_it_came_from(marian_models):
    hf_dir, ours = marian_models["shared"]
    meta = json.loads((ours / "metadata.json").read_text())
    assert meta["architecture"] == "marian" and meta["imported_from"]["path"] == str(hf_dir)
    assert (meta["source_language"], meta["target_language"]) == ("en", "de")
    config = json.loads((ours / "config.json").read_text())
    assert config["positions"] == "halves" and config["activation"] == "silu" and config["force_eos"]
    assert sorted(p.name for p in ours.iterdir()) == [
        "config.json",
        "metadata.json",
        "model.safetensors",
        "spm_tokenizer.json",
    ]


def copy_of(marian_models, tmp_path, layout="shared"):
    src = tmp_path / "src"
    shutil.copytree(marian_models[layout][0], src)
    return src


def edit_config(src, **changes):
    for name in ("config.json", "generation_config.json"):  # generation_config.json's decoding settings win
        path = src / name
        config = json.loads(path.read_text())
        config.update({k: v for k, v in changes.items() if name == "config.json" or k in config})
        path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "bart"}, "model_type is 'bart'"),
        ({"architectures": ["MarianForCausalLM"]}, "only MarianMTModel"),
        ({"normalize_before": True}, "normalize_before=True is not supported"),
        ({"some_new_option": 1}, "options this importer does not know: ['some_new_option']"),
        ({"activation_function": "tanh"}, "activation_function='tanh'"),
        ({"forced_eos_token_id": 5}, "forced_eos_token_id=5 differs"),
        ({"encoder_attention_heads": 2}, "encoder_attention_heads=2 differs"),
        ({"d_model": 32}, "shape"),
    ],
)
def test_config_options_that_cannot_be_imported_exactly_are_refused_by_name(marian_models, tmp_path, change, message):
    src = copy_of(marian_models, tmp_path)
    edit_config(src, **change)
    with pytest.raises(CannotImport, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        import_marian(src, tmp_path / "out", {})
    assert not (tmp_path / "out").exists()


def test_missing_files_and_corrupt_weights_are_refused_clearly(marian_models, tmp_path):
    src = copy_of(marian_models, tmp_path)
    (src / "target.spm").unlink()
    with pytest.raises(CannotImport, match=r"target\.spm is missing"):
        import_marian(src, tmp_path / "a", {})
    src = copy_of(marian_models, tmp_path / "b")
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CannotImport, match=r"model\.safetensors could not be read"):
        import_marian(src, tmp_path / "b" / "out", {})
    src = copy_of(marian_models, tmp_path / "c")
    (src / "source.spm").write_bytes(b"not a sentencepiece model")
    with pytest.raises(CannotImport, match="is not a SentencePiece model"):
        import_marian(src, tmp_path / "c" / "out", {})


def test_tokens_added_by_a_fine_tuning_are_refused_and_a_saved_tokenizer_s_own_specials_are_not(
    marian_models, tmp_path
):
    """tokenizer.add_tokens then resize_token_embeddings: transformers matches "<brand>" whole, nmt-serve's tokenizer
    cut it into pieces and decoded its id to nothing, silently. A tokenizer saved again lists its specials
    (added_tokens_decoder), which the vocabulary has: that one imports."""
    hf_dir, _ = marian_models["shared"]
    tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
    model = transformers.MarianMTModel.from_pretrained(hf_dir)
    tokenizer.save_pretrained(tmp_path / "saved")
    model.save_pretrained(tmp_path / "saved")
    import_marian(tmp_path / "saved", tmp_path / "saved-out", {"name": "saved", "path": "saved"})
    tokenizer.add_tokens(["<brand>"])
    model.resize_token_embeddings(len(tokenizer))
    tokenizer.save_pretrained(tmp_path / "added")
    model.save_pretrained(tmp_path / "added")
    with pytest.raises(CannotImport, match=f"adds 1 token\\(s\\) .*\\('<brand>' at {len(tokenizer) - 1}\\)"):
        import_marian(tmp_path / "added", tmp_path / "added-out", {"name": "added", "path": "added"})


def test_untied_tables_of_a_shared_vocabulary_are_refused_saying_why(marian_models, tmp_path):
    """tie_word_embeddings false: transformers 5 gives the encoder, the decoder and the output layer tables of their
    own; the refusal blamed the weights alone."""
    hf_dir, _ = marian_models["shared"]
    source = shutil.copytree(hf_dir, tmp_path / "source")
    model = transformers.MarianMTModel.from_pretrained(hf_dir, tie_word_embeddings=False)
    with torch.no_grad():
        model.model.encoder.embed_tokens.weight.add_(0.1)
    model.save_pretrained(source)
    with pytest.raises(CannotImport, match="tie_word_embeddings is false, and transformers 5 then gives the encoder"):
        import_marian(source, tmp_path / "out", {"name": "untied", "path": str(source)})


def test_a_weight_the_importer_does_not_know_is_refused(marian_models, tmp_path):
    from safetensors.torch import load_file, save_file

    src = copy_of(marian_models, tmp_path)
    tensors = load_file(str(src / "model.safetensors"))
    tensors["model.encoder.layernorm_embedding.weight"] = torch.ones(4)
    save_file(tensors, str(src / "model.safetensors"))
    with pytest.raises(CannotImport, match="does not know: \\['model.encoder.layernorm_embedding.weight'\\]"):
        import_marian(src, tmp_path / "out", {})


def test_a_hub_name_without_network_says_to_download_elsewhere(monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # read at import: set the constant itself
    with pytest.raises(CannotImport, match="download the directory .* and pass DIR instead"):
        resolve("Helsinki-NLP/opus-mt-xx-yy", None)
    with pytest.raises(CannotImport, match="neither a directory nor a Hugging Face Hub model name"):
        resolve("/no/such/dir", None)


def test_the_command_line_imports_and_will_not_overwrite(marian_models, tmp_path, capsys):
    out = tmp_path / "ckpt"
    main(["marian", str(marian_models["separate"][0]), "--out", str(out)])
    assert "NMT_MODEL_DIR=" in capsys.readouterr().out
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["imported_from"]["command"].startswith("nmt-import marian ")
    with pytest.raises(SystemExit, match="is not empty; pass --force"):
        main(["marian", str(marian_models["separate"][0]), "--out", str(out)])


def test_decoding_settings_for_generate_are_said_at_import_and_kept_in_the_metadata(marian_models, tmp_path, capsys):
    """An OPUS-MT generation_config.json asks generate() for num_beams=4 and max_length=512; another may add a
    no_repeat_ngram_size: nmt-serve decodes as each request asks and applies none of them, which the import said
    nowhere (the docs called them unimportant at inference)."""
    source = shutil.copytree(marian_models["shared"][0], tmp_path / "source")
    generation = json.loads((source / "generation_config.json").read_text())
    generation |= {"num_beams": 4, "max_length": 512, "no_repeat_ngram_size": 2, "renormalize_logits": False}
    (source / "generation_config.json").write_text(json.dumps(generation))
    main(["marian", str(source), "--out", str(tmp_path / "ckpt")])
    said = capsys.readouterr().out
    assert "Per request: num_beams=4, max_length=512 (as beam_size" in said
    assert "Not applied by nmt-serve: no_repeat_ngram_size=2 (its translations may differ" in said
    meta = json.loads((tmp_path / "ckpt" / "metadata.json").read_text())
    assert meta["generation_config"] == {"num_beams": 4, "max_length": 512, "no_repeat_ngram_size": 2}
    main(["marian", str(marian_models["shared"][0]), "--out", str(tmp_path / "plain")])  # generate()'s defaults
    assert "generation_config" not in capsys.readouterr().out
    assert "generation_config" not in json.loads((tmp_path / "plain" / "metadata.json").read_text())


def test_force_over_another_checkpoint_leaves_nothing_of_it_and_the_source_is_never_the_out(
    marian_models, tiny_checkpoint, tmp_path
):
    """--force over a checkpoint of our own (tokenizer.json) with a calibration: the import loads and serves, with
    neither of them left (both stayed: the server refused it, two tokenizers; a calibration of other weights)."""
    from model.checkpoint import load_checkpoint

    out = shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")
    (out / "confidence.json").write_text("{}")
    main(["marian", str(marian_models["separate"][0]), "--out", str(out), "--force"])
    assert not (out / "tokenizer.json").exists() and not (out / "confidence.json").exists()
    assert load_checkpoint(out)[0].config.src_vocab_size != load_checkpoint(tiny_checkpoint)[0].config.src_vocab_size
    source = shutil.copytree(marian_models["separate"][0], tmp_path / "hf")
    with pytest.raises(SystemExit, match="is the source"):
        main(["marian", str(source), "--out", str(source), "--force"])
    with pytest.raises(SystemExit, match="is a file"):
        main(["marian", str(source), "--out", str(source / "config.json")])


def test_serving_an_imported_model_never_imports_transformers_or_sentencepiece(marian_models):
    probe = (
        "import sys, asyncio\n"
        "from app.loading import load_engine\n"
        "from app.settings import Settings\n"
        f"engine = load_engine(Settings(model_dir={str(marian_models['shared'][1])!r}, compile=False))\n"
        "async def run():\n"
        "    await engine.start()\n"
        "    print((await engine.translate('A dog runs.'))[0].text != None)\n"
        "    engine.stop()\n"
        "asyncio.run(run())\n"
        "print(sorted(m for m in ('transformers', 'sentencepiece') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=True
    )
    assert out.stdout.split() == ["True", "[]"], out.stdout + out.stderr
