import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from model.decoding import greedy_decode


def test_save_load_round_trip_gives_identical_outputs(tmp_path, tiny_model, tokenizer):
    save_checkpoint(tmp_path / "ck", tiny_model, tokenizer, {"note": "x"})
    model, tok, meta = load_checkpoint(tmp_path / "ck")
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    tgt = torch.tensor([[1, 9, 10], [1, 11, 12]])
    assert torch.equal(model(src, tgt), tiny_model(src, tgt))
    assert [h.tokens for h in greedy_decode(model, src, 8)] == [h.tokens for h in greedy_decode(tiny_model, src, 8)]
    assert meta == {"note": "x"} and tok.vocab_size == tokenizer.vocab_size
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [
        "config.json", "metadata.json", "model.safetensors", "tokenizer.json"
    ]  # fmt: skip


def test_load_casts_to_the_requested_dtype(tiny_checkpoint):
    model, _, _ = load_checkpoint(tiny_checkpoint, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def _copy(tmp_path, tiny_checkpoint):
    dst = tmp_path / "ck"
    dst.mkdir()
    for f in tiny_checkpoint.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_missing_tensor_is_named(tmp_path, tiny_checkpoint):
    ck = _copy(tmp_path, tiny_checkpoint)
    tensors = load_file(ck / "model.safetensors")
    del tensors["decoder_layers.1.ffn.w2.weight"]
    save_file(tensors, ck / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors \['decoder_layers.1.ffn.w2.weight'\]"):
        load_checkpoint(ck)


def test_wrong_shape_is_named(tmp_path, tiny_checkpoint):
    ck = _copy(tmp_path, tiny_checkpoint)
    config = json.loads((ck / "config.json").read_text())
    config["d_ff"] = 48
    (ck / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"encoder_layers.0.ffn.w1.weight has shape \[64, 32\], config expects \[48, 32\]"):
        load_checkpoint(ck)


def test_missing_files_and_directories_are_named(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    ck = _copy(tmp_path, tiny_checkpoint)
    (ck / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="missing tokenizer.json"):
        load_checkpoint(ck)
