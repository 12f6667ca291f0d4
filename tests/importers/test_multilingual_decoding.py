"""Decoding an imported M2M100, NLLB or mBART-50 checkpoint in any direction: the target language is the decoder's forced start
(DecodingOptions.start), not part of the output, and rows of different directions share one batch. Greedy and beam-4
tokens equal transformers' generate(forced_bos_token_id=...) on 210 sentences in three directions, one direction at a
time and all mixed in one RowBatch; alignments with the start are those of the rows after it."""

from __future__ import annotations

import pytest
import torch

from model.batch import RowBatch, decode, new_search
from model.checkpoint import load_checkpoint
from model.decoding import KVCache
from model.search import DecodingOptions, alignment
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import code_token, import_all, model_directories, short

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
BUDGET = 12
PER_DIRECTION = 70
DIRECTIONS = {"nllb": [("deu_Latn", "fra_Latn"), ("eng_Latn", "deu_Latn"), ("fra_Latn", "eng_Latn")],
              "m2m100": [("de", "fr"), ("en", "de"), ("fr", "en")],
              "mbart50": [("de_DE", "fr_XX"), ("en_XX", "de_DE"), ("fr_XX", "en_XX")]}  # fmt: skip


def padded(sources: list[list[int]], pad: int) -> torch.Tensor:
    """Right-padded (B, S) source ids."""
    src = torch.full((len(sources), max(map(len, sources))), pad, dtype=torch.long)
    for j, ids in enumerate(sources):
        src[j, : len(ids)] = torch.tensor(ids)
    return src


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    sources = model_directories(tmp_path_factory.mktemp("sources"))
    return sources, import_all(sources, tmp_path_factory.mktemp("imported"))


def expected(source_dir, layout: str, beams: int) -> tuple[list, list[list[int]]]:
    """(each direction's (sources' ids, start, transformers' output tokens without the start and </s>)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    hf = AutoModelForSeq2SeqLM.from_pretrained(source_dir).eval()
    out = []
    for src, tgt in DIRECTIONS[layout]:
        tok = AutoTokenizer.from_pretrained(str(source_dir), src_lang=src, tgt_lang=tgt)
        code = tok.convert_tokens_to_ids(code_token(layout, tgt))
        sentences = held_out_sentences(short(src))[:PER_DIRECTION]
        ids = [tok(t).input_ids for t in sentences]
        wanted = []
        with torch.inference_mode():
            for i in ids:
                got = hf.generate(torch.tensor([i]), forced_bos_token_id=code, max_new_tokens=BUDGET + 1,
                                  num_beams=beams, early_stopping=True, do_sample=False)[0].tolist()  # fmt: skip
                assert got[1] == code
                wanted.append(got[2 : len(got) - (got[-1] == 2 and len(got) > 2)])
        out.append((ids, (code,), wanted))
    return out


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("layout", list(DIRECTIONS))
def test_each_direction_alone_and_all_mixed_in_one_batch_give_generates_tokens(dirs, layout, beams):
    sources, imported = dirs
    model, _, _ = load_checkpoint(imported[layout])
    cases = expected(sources[layout], layout, beams)
    # transformers' max_new_tokens counts the forced code; ours does not (the start is no output token)
    for ids, start, wanted in cases:
        got = decode(model, ids, [BUDGET] * len(ids), DecodingOptions(beam_size=beams, start=start))
        assert [h[0].tokens for h in got] == wanted
    # all directions in one running batch, interleaved, as continuous batching mixes requests
    rows = [(ids, start, want) for ids_, start, wanted in cases for ids, want in zip(ids_, wanted)]
    rows = rows[0::3] + rows[1::3] + rows[2::3]
    cache = KVCache(model, len(rows) * beams, BUDGET + 2, max(len(r[0]) for r in rows))
    batch = RowBatch(model, cache)
    searches = [new_search(DecodingOptions(beam_size=beams, start=start), BUDGET, model.config) for _, start, _ in rows]
    with torch.inference_mode():
        for k in range(0, len(rows), 50):  # admitted in waves, some while others decode
            batch.add(searches[k : k + 50], padded([r[0] for r in rows[k : k + 50]], model.config.source_pad_id))
            for _ in range(3):
                batch.step()
        while len(batch):
            batch.step()
    assert [s.results()[0].tokens for s in searches] == [want for _, _, want in rows]


def test_alignment_after_a_start_is_that_of_the_rows_after_it(dirs):
    _, imported = dirs
    model, tokenizer, _ = load_checkpoint(imported["nllb"])
    src = tokenizer.encode("Ein Mann fährt Fahrrad.", language="deu_Latn")
    code = tokenizer.language_id("fra_Latn")
    ((hyp,),) = decode(model, [src], [BUDGET], DecodingOptions(start=(code,)))
    (got,) = alignment(model, src, [hyp.tokens], start=(code,))
    with torch.inference_mode():
        tgt = torch.tensor([[model.config.bos_id, code, *hyp.tokens]])
        cross = model.attention_weights(torch.tensor([src]), tgt)[2][0].mean(1)[0]  # one decoder layer
    text = cross[:, 1:-1]  # the source's language code and </s> left out
    assert got == [1 + i for i in text.argmax(-1).tolist()[1 : 1 + len(hyp.tokens)]]
    assert len(got) == len(hyp.tokens)


@pytest.mark.compiles
def test_compiled_graphs_decode_mixed_directions_as_the_eager_model(dirs, tmp_path, monkeypatch):
    """mBART-50's learned positions and embedding norms in AOTInductor graphs (model/compile/): greedy rows of
    three directions, two rows a step, each row with another direction's beside it, give the eager model's tokens
    with no step falling back (the full step's graphs compile the same model code; tests/model/test_compile.py).
    Only the graphs these batches run are built: the random model runs every row to the budget, so each step has two
    rows, and each pair's sources differ in length, so they are packed; the padded prefill has no graph, and any
    call of it, like a step of another row count, counts as missed."""
    from model.compile import CompiledPrefill, adopt, compile_graphs, graphs_for, runtime

    used = ["greedy_step-2-2", "prefill_packed-2-2"]
    monkeypatch.setattr(runtime, "graphs_for", lambda *a, **k: [g for g in graphs_for(*a, **k) if g.name in used])
    _, imported = dirs
    eager, tokenizer, _ = load_checkpoint(imported["mbart50"])
    compiled = load_checkpoint(imported["mbart50"])[0]
    rows = []
    for src, tgt in DIRECTIONS["mbart50"]:
        for text in held_out_sentences(short(src))[:6]:
            rows.append((tokenizer.encode(text, language=src), (tokenizer.language_id(tgt),)))
    rows = rows[0::3] + rows[1::3] + rows[2::3]  # directions interleaved
    cache = KVCache(compiled, max_batch=2, max_len=BUDGET + 2, max_src_len=max(len(r[0]) for r in rows))
    graphs = compile_graphs(compiled, cache, steps=("greedy",), directory=tmp_path, mode="default")
    assert graphs.built == used
    graphs.functions["prefill"] = CompiledPrefill(compiled, "prefill")  # no graph: each call of it is a miss
    adopt(compiled, graphs)
    for first, second in zip(rows[0::2], rows[1::2]):  # each of another direction than the other
        pair = [first, second]
        options = [DecodingOptions(start=r[1]) for r in pair]
        want = [decode(eager, [r[0]], [BUDGET], o)[0][0].tokens for r, o in zip(pair, options)]
        batch = RowBatch(compiled, cache)
        searches = [new_search(o, BUDGET, compiled.config) for o in options]
        with torch.inference_mode():
            batch.add(searches, padded([r[0] for r in pair], compiled.config.source_pad_id))
            while len(batch):
                batch.step()
        assert [s.results()[0].tokens for s in searches] == want
    assert graphs.missed == 0, "a step or a prefill fell back to the eager model"
