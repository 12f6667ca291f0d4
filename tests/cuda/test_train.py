"""nmt-train on the GPU: a short run learns there, its checkpoint translates on the CPU, a stopped run resumes on the
device with the optimizer's state, and a student distils from a teacher on the device under bfloat16 autocast.

The runs are the CPU tests' seconds-long ones (tests/model/test_train.py) with `--device`; their bounds are the same.
"""

from __future__ import annotations

import json

from model.checkpoint import load_checkpoint
from model.evaluate import score, translate_corpus
from model.train import main as train_main
from tests.conftest import train_args
from tests.cuda.conftest import CUDA, DEVICE

pytestmark = CUDA


def test_a_run_on_the_device_learns_and_its_checkpoint_translates_on_the_cpu(tmp_path, pairs):
    train_main([*train_args(tmp_path, pairs, tmp_path / "ck", epochs=12), "--device", DEVICE])
    state = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    losses = [h["valid_loss"] for h in state["history"]]
    assert losses[-1] < losses[0] / 5, losses
    model, tok, meta = load_checkpoint(tmp_path / "ck")  # on the CPU
    assert f"--device {DEVICE}" in meta["command"] and meta["valid"]["valid_bleu"] > 60, meta
    valid_src, valid_ref = zip(*pairs[360:], strict=True)
    on_cpu = score(translate_corpus(model, tok, list(valid_src)), list(valid_ref))
    assert on_cpu["bleu"] > 60, on_cpu


def test_a_run_stopped_on_the_device_resumes_there(tmp_path, pairs):
    args = [*train_args(tmp_path, pairs, tmp_path / "ck", epochs=1), "--device", DEVICE]
    train_main(args)
    first = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    epochs = args.index("--epochs")
    train_main([*args[:epochs], "--epochs", "2", *args[epochs + 2 :], "--resume"])
    second = json.loads((tmp_path / "ck" / "train_state" / "state.json").read_text())
    assert [h["epoch"] for h in second["history"]] == [1, 2]
    assert second["history"][0] == first["history"][0] and second["step"] == 2 * first["step"]
    assert second["history"][1]["valid_loss"] < first["history"][0]["valid_loss"]


def test_a_student_distils_from_its_teacher_on_the_device_under_bfloat16(tmp_path, trained_checkpoint, pairs):
    """--kd-alpha 1 --bf16: the teacher runs on the device beside the student, inside the autocast."""
    args = train_args(tmp_path, pairs, tmp_path / "student", epochs=12)
    train_main([*args, "--teacher", str(trained_checkpoint), "--kd-alpha", "1", "--bf16", "--device", DEVICE])
    teacher, teacher_tok, _ = load_checkpoint(trained_checkpoint)
    student, student_tok, meta = load_checkpoint(tmp_path / "student")
    assert meta["distillation"] == {"teachers": [str(trained_checkpoint)], "kd_alpha": 1.0}
    valid = [s for s, _ in pairs[360:]]
    same = sum(a == b for a, b in zip(translate_corpus(student, student_tok, valid),
                                      translate_corpus(teacher, teacher_tok, valid)))  # fmt: skip
    assert meta["valid"]["valid_bleu"] > 50 and same >= 3 * len(valid) // 4, (meta["valid"], same, len(valid))
