"""A process's own directory (model/workspace.py): removed when it is done, and once abandoned (its process killed)
by the next one made beside it; never while its owner lives, nor while it is being made."""

import os
import subprocess
import sys
import time

from model.workspace import Workspace, remove_abandoned

LONG_AGO = time.time() - 3600


def aged(*paths) -> None:
    for path in paths:
        os.utime(path, (LONG_AGO, LONG_AGO))


def test_a_workspace_is_removed_when_done_and_kept_while_its_owner_lives_however_old(tmp_path):
    with Workspace(tmp_path, "w-") as path:
        (path / "data").write_text("x")
        aged(path / "owner", path)
        assert remove_abandoned(tmp_path, "w-") == [] and (path / "data").exists()
    assert list(tmp_path.iterdir()) == []


def test_one_left_by_a_killed_process_is_removed_by_the_next_once_its_lock_is_free_for_a_minute(tmp_path):
    code = (f"import pathlib, time; from model.workspace import Workspace; w = Workspace(pathlib.Path({str(tmp_path)!r}), "
            "'w-'); print(w.path, flush=True); time.sleep(60)")  # fmt: skip
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        left = tmp_path / os.path.basename(owner.stdout.readline().strip())
        aged(left / "owner", left)
        assert remove_abandoned(tmp_path, "w-") == [] and left.exists()  # alive: its lock is held
    finally:
        owner.kill()
        owner.wait()
    os.utime(left / "owner")  # its lock freed just now, as if made a moment ago: its maker is about to lock it
    assert remove_abandoned(tmp_path, "w-") == [] and left.exists()
    aged(left / "owner")
    with Workspace(tmp_path, "w-") as mine:
        assert not left.exists() and mine.exists()


def test_a_directory_without_its_lock_file_is_left_while_new(tmp_path):
    (tmp_path / "w-new").mkdir()  # being made: the lock file comes a moment later
    (tmp_path / "w-old").mkdir()
    aged(tmp_path / "w-old")
    (tmp_path / "other").mkdir()
    aged(tmp_path / "other")
    assert remove_abandoned(tmp_path, "w-") == [tmp_path / "w-old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "w-new"]
