"""Run folders: no collisions, no silent overwrite, one run at a time, clean failed starts."""

import multiprocessing
import os
import socket
from datetime import datetime

import pytest

import sb3_snake.training.run_directory as run_directory
from sb3_snake.common.paths import TEMPORARY_MARK
from sb3_snake.training.run_directory import LOCK_NAME, RunDirectoryError, claim_run_directory

FROZEN = datetime(2026, 11, 22, 11, 0, 0)


def test_runs_without_a_name_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(run_directory, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(run_directory, "datetime", type("Frozen", (), {"now": staticmethod(lambda: FROZEN)}))
    with claim_run_directory(None) as first, claim_run_directory(None) as second:
        assert (first.name, second.name) == ("20261122-110000", "20261122-110000-2")
        assert first.parent == second.parent == tmp_path / "runs"


def _claim(path, queue):
    try:
        with claim_run_directory(None if path is None else path) as folder:
            queue.put(str(folder))
    except RunDirectoryError as error:
        queue.put(f"error: {error}")


def test_processes_starting_together_never_share_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    queue = multiprocessing.get_context("fork").Queue()
    workers = [multiprocessing.get_context("fork").Process(target=_claim, args=(None, queue)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    folders = [queue.get(timeout=5) for _ in workers]
    assert len(set(folders)) == 4 and not any(f.startswith("error") for f in folders)


def test_a_folder_holding_a_run_is_refused_unless_overwritten_or_resumed(tmp_path):
    (tmp_path / "model.zip").write_text("old model")
    (tmp_path / "checkpoint.zip").write_text("old checkpoint")
    with pytest.raises(
        RunDirectoryError,
        match=r"holds a run \(model.zip, checkpoint.zip\): .*; pass overwrite=True or pass resume=.* or change run_dir",
    ):
        with claim_run_directory(tmp_path):
            pass
    assert (tmp_path / "model.zip").read_text() == "old model" and not (tmp_path / LOCK_NAME).exists()
    with claim_run_directory(tmp_path, resuming=True):
        assert (tmp_path / "checkpoint.zip").exists()  # a resumed run keeps its files
    with claim_run_directory(tmp_path, overwrite=True):
        assert not (tmp_path / "model.zip").exists() and not (tmp_path / "checkpoint.zip").exists()


def test_overwrite_keeps_the_file_being_resumed_from(tmp_path):
    (tmp_path / "checkpoint.zip").write_text("resume me")
    (tmp_path / "model.zip").write_text("old")
    with claim_run_directory(tmp_path, overwrite=True, keep=(tmp_path / "checkpoint.zip",)):
        assert (tmp_path / "checkpoint.zip").exists() and not (tmp_path / "model.zip").exists()


def test_a_folder_in_use_is_refused_and_a_dead_runs_lock_is_taken_over(tmp_path):
    with claim_run_directory(tmp_path):
        (tmp_path / LOCK_NAME).write_text("1")  # pid 1 is alive: another run holds it
        with pytest.raises(RunDirectoryError, match=r"is in use by another sb3-snake run \(pid 1\)"):
            with claim_run_directory(tmp_path):
                pass
    (tmp_path / LOCK_NAME).write_text("999999999")  # no such process: its run was killed
    with claim_run_directory(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text() == f"{socket.gethostname()}:{os.getpid()}"
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_held_from_another_machine_is_never_taken_over(tmp_path):
    """Whether a pid lives can be asked on its own machine only (a folder on a shared file system)."""
    (tmp_path / LOCK_NAME).write_text("elsewhere.example:999999999")
    with pytest.raises(RunDirectoryError, match=r"in use by an sb3-snake run on elsewhere.example \(pid 999999999\)"):
        with claim_run_directory(tmp_path):
            pass
    (tmp_path / LOCK_NAME).write_text(f"{socket.gethostname()}:999999999")  # this machine's, and gone
    with claim_run_directory(tmp_path):
        pass


def test_left_over_temporary_files_are_cleaned_at_start(tmp_path):
    left_over = tmp_path / f"checkpoint{TEMPORARY_MARK}4242-aa.zip"
    left_over.write_text("half")
    with claim_run_directory(tmp_path):
        assert not left_over.exists()


def test_a_failed_start_removes_the_empty_folder_it_made(tmp_path):
    with pytest.raises(RuntimeError):
        with claim_run_directory(tmp_path / "new"):
            raise RuntimeError("build failed")
    assert not (tmp_path / "new").exists()
    with pytest.raises(RuntimeError):
        with claim_run_directory(tmp_path):  # existed before: kept
            raise RuntimeError("build failed")
    assert tmp_path.is_dir() and not (tmp_path / LOCK_NAME).exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_an_unwritable_output_is_refused_before_anything_runs():
    with pytest.raises(RunDirectoryError, match="is not writable"):
        with claim_run_directory(__import__("pathlib").Path("/proc/self/run")):
            pass
