"""bench/beam_cross.py's grouped cross-attention step equals the model's own step over duplicated cross K/V."""

from __future__ import annotations

import torch

from bench import beam_cross


def test_variants_agree_and_every_figure_is_reported(tiny_model):
    threads = torch.get_num_threads()
    row = beam_cross.run(tiny_model, groups=3, beam=4, src_len=7, tgt_len=5, rounds=2)
    assert torch.get_num_threads() == threads
    assert row["gathered_max_abs_diff"] <= 1e-5 and row["grouped_max_abs_diff"] <= 1e-5
    assert row["rows"] == 12 and row["duplicated_bytes"] == 4 * row["shared_bytes"]
    assert "kvcache_duplicate_ms" in row or "kvcache_duplicate_error" in row
    for key in ("duplicated_ms", "gathered_ms", "grouped_ms", "index_copy_ms"):
        assert row[key] > 0


@torch.inference_mode()
def test_grouped_step_matches_step_with_rows_at_different_positions(tiny_model):
    x = beam_cross.make_inputs(tiny_model, groups=2, beam=3, src_len=6, tgt_len=4, seed=1)
    x["positions"] = torch.tensor([0, 1, 4, 2, 3, 4])  # past_keep differs per row
    fns = beam_cross.step_fns(tiny_model, x)
    assert set(beam_cross.check(fns)) == {"gathered", "grouped"}
