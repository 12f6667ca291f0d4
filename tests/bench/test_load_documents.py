"""bench/load.py --documents, the parts that need no server: the documents it builds, its arguments, its verdict;
and --mps's daemon, with a stand-in for NVIDIA's control program."""

from __future__ import annotations

import os

import pytest

from app.segment import segment
from bench import load
from tests.bench.helpers import pretend_a_gpu, pretend_no_gpu, without_ctranslate2

SENTENCES = ["A dog runs.", "Two men wearing black in a city", "Is it raining?", "  A child swims!  ", "A cat sits."]


def test_documents_are_runs_of_consecutive_sentences_and_the_splitter_finds_each_one():
    docs = load.documents(SENTENCES, 2)
    assert docs == ["A dog runs. Two men wearing black in a city.", "Is it raining? A child swims!"]  # short tail out
    assert [len(segment(d)) for d in docs] == [2, 2]  # the full stop added where there was none
    assert load.documents(SENTENCES, 1) == [
        "A dog runs.", "Two men wearing black in a city.", "Is it raining?", "A child swims!", "A cat sits."
    ]  # fmt: skip
    assert load.documents(SENTENCES, 6) == []


def test_a_paragraph_break_comes_after_every_paragraph_sentences_never_at_the_end():
    (doc,) = load.documents(SENTENCES[:4], 4, paragraph=2)
    assert doc == "A dog runs. Two men wearing black in a city.\n\nIs it raining? A child swims!"
    assert load.documents(SENTENCES[:4], 4, paragraph=4) == load.documents(SENTENCES[:4], 4, paragraph=0)
    assert [len(segment(d)) for d in load.documents(SENTENCES, 5, paragraph=1)] == [5]


def row(size: int, concurrency: int, p50: float) -> dict:
    return load.document_row(size, concurrency, size * 10, 10, 2.0, [p50 / 1000] * 10, 0)


def test_a_row_counts_documents_and_sentences_per_second():
    r = load.document_row(5, 32, 48, 10, 4.0, [0.1, 0.2, 0.3], 1)
    assert (r["doc_s"], r["sent_s"], r["p50_ms"], r["p99_ms"], r["errors"]) == (2.5, 12.0, 200.0, 300.0, 1)


@pytest.mark.parametrize("big_p50, verdict", [(290.0, "met"), (300.0, "missed")])
def test_the_goal_is_twenty_sentences_in_under_three_times_one_sentences_p50(big_p50, verdict):
    rows = [row(1, 1, 100.0), row(5, 1, 150.0), row(20, 1, big_p50), row(1, 32, 5.0), row(20, 32, 9000.0)]
    ratio, line = load.document_goal(rows)
    assert ratio == big_p50 / 100
    assert line == (f"a 20-sentence document over a 1-sentence one, p50 at concurrency 1: {big_p50} / 100.0 ms = "
                    f"{ratio}x (goal < 3x: {verdict})")  # fmt: skip


def test_other_sizes_get_the_ratio_without_the_goal_and_one_size_gets_none():
    ratio, line = load.document_goal([row(2, 1, 100.0), row(10, 1, 250.0)])
    assert ratio == 2.5 and "goal" not in line and line.startswith("a 10-sentence document over a 2-sentence one")
    assert load.document_goal([row(20, 1, 100.0), row(1, 32, 10.0)]) is None


def test_documents_switch_the_levels_and_the_queue_and_leave_the_default_as_it_was():
    args, levels, _, settings = load.parse_args(["--src", "x", "--documents", "1,5,20"])
    assert args.documents == [1, 5, 20] and levels == [1, 32] and settings["NMT_MAX_QUEUE"] == str(32 * 20)
    args, levels, _, settings = load.parse_args(["--src", "x"])
    assert args.documents == [] and levels == [1, 8, 32, 64] and settings["NMT_MAX_QUEUE"] == "256"
    assert load.parse_args(["--src", "x", "--documents", "1,20", "--levels", "4"])[1] == [4]


def test_a_size_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x", "--documents", "1,0"])
    assert "argument --documents: '1,0': comma-separated whole numbers, each at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("levels", ["0", "1,0,32", "1,x", ""])
def test_a_level_below_one_or_not_a_number_is_refused_as_the_workers_are(levels, capsys):
    with pytest.raises(SystemExit) as stopped:
        load.parse_args(["--src", "x", "--levels", levels])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"argument --levels: {levels!r}: comma-separated whole numbers" in err
    assert "Traceback" not in err


def test_device_cuda_without_a_gpu_is_refused_as_peers_refuses_it(monkeypatch, capsys):
    pretend_no_gpu(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        load.parse_args(["--src", "x", "--device", "cuda", "--levels", "1,32"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "--device cuda: PyTorch finds no CUDA device here" in err
    assert "leave out --device to run on the CPU" in err
    pretend_a_gpu(monkeypatch)
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x", "--device", "cuda:3"])
    err = capsys.readouterr().err
    assert "--device cuda:3: there is no such device here; PyTorch finds 1 (cuda:0 to cuda:0)" in err
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x", "--device", "gpu"])
    assert "--device gpu: not a device; use cpu, cuda or cuda:N" in capsys.readouterr().err


def test_without_ctranslate2_its_rounds_are_refused_before_any_work_and_the_way_out_is_named(monkeypatch, capsys):
    without_ctranslate2(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        load.parse_args(["--src", "x"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "CTranslate2 is not installed" in err
    assert "bash scripts/install.sh bench" in err and "--ct2-rounds 0" in err
    assert load.parse_args(["--src", "x", "--ct2-rounds", "0"])[0].ct2_rounds == 0
    assert load.parse_args(["--src", "x", "--documents", "1,5"])[0].documents == [1, 5]  # documents race no peer


def test_quantize_reaches_the_server_and_isa_is_a_known_limit():
    args, _, _, settings = load.parse_args(["--src", "x.txt", "--quantize", "int8", "--isa", "avx2"])
    assert settings["NMT_QUANTIZE"] == "int8" and args.quantize == "int8"
    assert load.ISA_LIMITS[args.isa]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert load.parse_args(["--src", "x.txt"])[3]["NMT_QUANTIZE"] == "none"  # float32 by default
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x.txt", "--quantize", "int8", "--device", "cuda"])  # int8 is the CPU's
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x.txt", "--isa", "sse2"])


def test_on_a_gpu_documents_are_raced_against_a_batch_of_what_the_highest_level_keeps_in_flight(monkeypatch):
    pretend_a_gpu(monkeypatch)
    _, levels, batch, _ = load.parse_args(["--src", "x", "--device", "cuda", "--documents", "1,8", "--levels", "32"])
    assert (levels, batch) == ([32], 32 * 8)
    assert load.parse_args(["--src", "x", "--device", "cuda", "--levels", "1,32,256"])[2] == 256
    assert load.parse_args(["--src", "x", "--documents", "1,8", "--levels", "32"])[2] == 0  # the CPU: not asked for
    assert load.parse_args(["--src", "x", "--documents", "8", "--in-process-batch", "64"])[2] == 64


def test_rows_at_the_highest_level_get_their_share_of_in_process_decoding():
    rows = [{**row(8, 1, 50.0), "workers": 1}, {**row(8, 32, 90.0), "workers": 1}, {**row(8, 32, 60.0), "workers": 4}]
    rows[1]["sent_s"], rows[2]["sent_s"] = 2000.0, 5000.0
    lines = load.against_in_process(rows, 32, 7000.0)
    assert [r.get("sent_s_over_in_process") for r in rows] == [None, 0.29, 0.71]
    head = "sentences/document at concurrency 32 / in-process batched"
    assert lines == [f"workers 1, 8 {head}: 2000.0 / 7000.0 sent/s = 0.29x",
                     f"workers 4, 8 {head}: 5000.0 / 7000.0 sent/s = 0.71x"]  # fmt: skip


@pytest.fixture
def fake_mps_control(tmp_path, monkeypatch):
    """A stand-in for NVIDIA's nvidia-cuda-mps-control on the PATH that writes down each call: its arguments, what it
    read on standard input and the directories it was given."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(f'#!/bin/sh\nif [ "$1" = -d ]; then echo "daemon $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY"'
                       f' >> {calls}; else echo "command $(cat) $CUDA_MPS_PIPE_DIRECTORY" >> {calls}; fi\n')  # fmt: skip
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.delenv("CUDA_MPS_LOG_DIRECTORY", raising=False)
    return calls


def test_mps_starts_a_daemon_of_its_own_makes_this_run_its_client_and_stops_it(fake_mps_control, tmp_path):
    pipe, log = tmp_path / "mps" / "pipe", tmp_path / "mps" / "log"
    with load.mps_daemon(tmp_path / "mps") as variables:
        assert variables == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log)}
        assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe) and pipe.is_dir() and log.is_dir()
        assert fake_mps_control.read_text().splitlines() == [f"daemon {pipe} {log}"]
    assert fake_mps_control.read_text().splitlines() == [f"daemon {pipe} {log}", f"command quit {pipe}"]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ and "CUDA_MPS_LOG_DIRECTORY" not in os.environ


def test_mps_is_stopped_when_the_run_fails(fake_mps_control, tmp_path):
    with pytest.raises(RuntimeError), load.mps_daemon(tmp_path):
        raise RuntimeError("a level failed")
    assert fake_mps_control.read_text().splitlines()[-1] == f"command quit {tmp_path / 'pipe'}"


def test_mps_without_its_control_program_or_without_a_gpu_is_refused(tmp_path, monkeypatch, capsys):
    pretend_a_gpu(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="no nvidia-cuda-mps-control on the PATH"), load.mps_daemon(tmp_path):
        pass
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x", "--mps"])
    assert "--mps needs --device cuda" in capsys.readouterr().err
    assert load.parse_args(["--src", "x", "--device", "cuda", "--mps"])[0].mps
    with pytest.raises(SystemExit):
        load.parse_args(["--src", "x", "--device", "cuda", "--mps", "--isa", "avx2"])
    assert "leave the MPS daemon behind" in capsys.readouterr().err
