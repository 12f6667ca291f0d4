"""Shared fixtures: a tokenizer, a tiny random model and a checkpoint directory, all built in seconds."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from model.checkpoint import save_checkpoint
from model.tokenizer import Tokenizer
from model.transformer import Transformer, TransformerConfig
from tests.synthetic import synthetic_pairs

# The helpers the tests share assert as the tests themselves do: pytest rewrites their asserts too, so that a failing
# one shows its values. (Registered before anything imports them.)
pytest.register_assert_rewrite("tests.app.helpers", "tests.app.files_api", "tests.app.libre")
torch.set_num_threads(1)  # tiny models: threads cost more than they give, and tests run side by side
# Servers in tests (in-process and child processes) run the eager model: compiling the graphs takes
# tens of seconds each time. tests/model/test_compile.py and tests/app/test_compiled.py compile on purpose.
os.environ["NMT_COMPILE"] = "0"
# Compiled graphs (model/compile/) are kept in a directory of this run's own: tests that compile one checkpoint
# with one cache shape share them, and no package from outside the run is ever loaded. Each process (every xdist
# worker) has its own, removed when it exits: tens of MB a run would otherwise pile up in the temporary directory.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="nmt-serve-tests-inductor-")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
# The C++ extension the compiled graphs run through (model/compile/nogil.py) is built once a run, into a directory
# every xdist worker and child server shares (inherited from the process that made it, which removes it).
if "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="nmt-serve-tests-extensions-")
    atexit.register(shutil.rmtree, os.environ["TORCH_EXTENSIONS_DIR"], ignore_errors=True)
# Stored glossaries (app/glossaries.py) too: servers in tests never write to the user's own NMT_GLOSSARY_DIR default.
os.environ["NMT_GLOSSARY_DIR"] = tempfile.mkdtemp(prefix="nmt-serve-tests-glossaries-")
atexit.register(shutil.rmtree, os.environ["NMT_GLOSSARY_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def pairs() -> list[tuple[str, str]]:
    return synthetic_pairs(400, seed=0)


@pytest.fixture(scope="session")
def tokenizer(pairs) -> Tokenizer:
    extra = ["Zwei junge weiße Männer sind im Freien.", "A café, 42 years old — naïve!"]
    return Tokenizer.train([s for p in pairs for s in p] + extra, vocab_size=600, min_frequency=1)


def tiny_config(tokenizer: Tokenizer, **overrides) -> TransformerConfig:
    V = tokenizer.vocab_size
    base = dict(
        src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=64, dropout=0.0, max_positions=512,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


@pytest.fixture(scope="session")
def tiny_model(tokenizer) -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config(tokenizer)).eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_model, tokenizer):
    """A checkpoint directory holding the tiny random model (its translations are gibberish)."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(path, tiny_model, tokenizer, {"name": "tiny", "note": "random weights, for tests"})
    return path


def write_corpus(dir_, pairs, name):
    src, tgt = dir_ / f"{name}.en", dir_ / f"{name}.de"
    src.write_text("".join(e + "\n" for e, _ in pairs))
    tgt.write_text("".join(d + "\n" for _, d in pairs))
    return src, tgt


def train_args(dir_, pairs, out, epochs: int) -> list[str]:
    """nmt-train arguments for a seconds-long run on the synthetic corpus."""
    train_src, train_tgt = write_corpus(dir_, pairs[:360], "train")
    valid_src, valid_tgt = write_corpus(dir_, pairs[360:], "valid")
    return [
        "--train-src", str(train_src), "--train-tgt", str(train_tgt),
        "--valid-src", str(valid_src), "--valid-tgt", str(valid_tgt), "--out", str(out),
        "--vocab-size", "400", "--d-model", "32", "--heads", "4", "--d-ff", "64",
        "--encoder-layers", "2", "--decoder-layers", "2", "--dropout", "0.0", "--lr", "5e-3", "--warmup", "30",
        "--batch-tokens", "1200", "--epochs", str(epochs), "--seed", "1",
    ]  # fmt: skip


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The directory `name`, filled by `make` once a run however many workers run the tests (pytest-xdist gives each
    a temporary directory of its own, the run's their parent): the first worker to ask makes it, holding a lock, and
    the others wait for it and take it as made. A make that fails leaves nothing the next one would take."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path, done = root / name, root / f"{name}.done"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            make(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory, pairs):
    """A tiny model trained for a few seconds with nmt-train: it ends sentences with </s> at varied lengths. Trained
    once a run (tests only read it)."""
    from model.train import main as train_main

    trained = made_once(tmp_path_factory, "trained", lambda d: train_main(train_args(d, pairs, d / "ckpt", epochs=12)))
    return trained / "ckpt"


# The one-row cache whose graphs one_row_packages builds; a server with these limits (NMT_MAX_BATCH_SIZE=1,
# NMT_MAX_NEW_TOKENS=31, NMT_MAX_INPUT_TOKENS=16, NMT_SCREEN_LOGITS=0 and one thread, as tests/app/live.py's env())
# runs the same graphs, so it loads these packages rather than building them
ONE_ROW = {"max_batch": 1, "max_len": 31, "max_src_len": 16}


ONE_ROW_GRAPHS = ["greedy_step-1-1", "prefill-1-1"]


def build_one_row(checkpoint: Path, directory: Path, quantize: bool = False) -> None:
    from model.checkpoint import load_checkpoint
    from model.compile import compile_graphs
    from model.decoding import KVCache
    from model.quantize import quantize_int8

    model = load_checkpoint(checkpoint)[0]
    if quantize:
        quantize_int8(model)
    graphs = compile_graphs(model, KVCache(model, **ONE_ROW), steps=("greedy",), directory=directory, mode="default",
                            jobs=2)  # fmt: skip
    assert graphs.built == ONE_ROW_GRAPHS and graphs.loaded == [] and graphs.jobs == 2  # in child processes


@pytest.fixture(scope="session")
def one_row_packages(trained_checkpoint, tmp_path_factory):
    """The trained model's one-row graphs (the greedy step and the prefill: float32, unscreened, "default" mode, one
    thread), built once a run: (their directory, their names). Tests copy them rather than build them again: the
    directory holds the weights' digest's directory, as compile_graphs' `directory` and a server's
    NMT_COMPILE_CACHE_DIR/compiled do."""
    return made_once(tmp_path_factory, "one-row", lambda d: build_one_row(trained_checkpoint, d)), ONE_ROW_GRAPHS


@pytest.fixture(scope="session")
def one_row_int8_packages(trained_checkpoint, tmp_path_factory):
    """The same graphs of the trained model with its linears in int8 (model/quantize.py; NMT_QUANTIZE=int8), built
    once a run: (their directory, their names)."""
    return made_once(
        tmp_path_factory, "one-row-int8", lambda d: build_one_row(trained_checkpoint, d, True)
    ), ONE_ROW_GRAPHS


@pytest.fixture(scope="session")
def marian_models(tmp_path_factory):
    """Two small Marian models in OPUS-MT's layout (transformers' own, seeded random weights) and their nmt-serve
    imports: {"shared": (hf_dir, our_dir), "separate": (...)}, one with a shared vocabulary, one with two."""
    pytest.importorskip("transformers", reason="the Marian tests need the test extra (transformers)")
    pytest.importorskip("sentencepiece", reason="the Marian tests need the test extra (sentencepiece)")
    from model.importers.marian import import_marian
    from tests.importers.marian_fixture import build_marian

    root = tmp_path_factory.mktemp("marian")
    out = {}
    for layout in ("shared", "separate"):
        hf = build_marian(root / f"{layout}-hf", shared=layout == "shared", seed=len(out))
        out[layout] = (
            hf,
            import_marian(hf, root / f"{layout}-ours", {"name": f"tiny-marian-{layout}", "path": str(hf)}),
        )
    return out


def pytest_collection_modifyitems(items):
    """The files that compile graphs first, the most compiling tests first, then those with slow tests: run on
    several workers (scripts/test.sh, each file whole on one worker), the longest files start early instead of ending
    the run alone."""
    compiling = Counter(item.path for item in items if item.get_closest_marker("compiles"))
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: (-compiling[item.path], -slow[item.path]))  # stable: a file's tests keep their order
