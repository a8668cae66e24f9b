"""Output checks before any work, and atomic writes."""

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from sb3_snake.common.errors import OutputError
from sb3_snake.common.paths import (
    TEMPORARY_MARK,
    atomic_write,
    check_writable_dir,
    check_writable_file,
    claim_new_path,
    remove_temporary_files,
    write_text_atomically,
)

needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")


def test_claim_new_path_never_takes_an_existing_name(tmp_path):
    (tmp_path / "learning_T.json").write_text("kept")
    files = [claim_new_path(tmp_path, "learning_T", ".json") for _ in range(2)]
    assert [path.name for path in files] == ["learning_T-2.json", "learning_T-3.json"]
    assert (tmp_path / "learning_T.json").read_text() == "kept" and all(path.read_text() == "" for path in files)
    folders = [claim_new_path(tmp_path / "runs", "T", folder=True) for _ in range(2)]
    assert [path.name for path in folders] == ["T", "T-2"] and all(path.is_dir() for path in folders)


def test_atomic_write_replaces_the_file_and_uses_unique_temporary_names(tmp_path):
    target = tmp_path / "summary.json"
    names = []
    for text in ("one", "two"):
        with atomic_write(target) as temporary:
            names.append(temporary.name)
            assert TEMPORARY_MARK in temporary.name and temporary.suffix == ".json"
            temporary.write_text(text)
    assert target.read_text() == "two" and names[0] != names[1] and str(os.getpid()) in names[0]
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    mode = stat.S_IMODE(target.stat().st_mode)
    assert mode & stat.S_IRGRP or os.umask(0o022) & stat.S_IRGRP  # not private like mkstemp's files


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_an_interrupted_write_keeps_the_old_file_and_removes_its_temporary(tmp_path, error):
    target = tmp_path / "model.zip"
    target.write_text("old")
    with pytest.raises(type(error)):
        with atomic_write(target) as temporary:
            temporary.write_text("half")
            raise error
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["model.zip"]


def test_atomic_write_through_a_link_replaces_the_file_it_points_to(tmp_path):
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "curve.png").write_text("old")
    link = tmp_path / "curve.png"
    link.symlink_to(tmp_path / "kept" / "curve.png")
    write_text_atomically(link, "new")
    assert link.is_symlink() and (tmp_path / "kept" / "curve.png").read_text() == "new"
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["curve.png"]


def test_a_failed_atomic_write_is_one_output_error_naming_it_and_leaves_the_old_file(tmp_path):
    target = tmp_path / "game.gif"
    target.write_text("old")
    with pytest.raises(
        OutputError, match=rf"^cannot write {target} \(No space left on device\); it was left as it was$"
    ):
        with atomic_write(target) as temporary:
            temporary.write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["game.gif"]


def test_left_over_temporary_files_are_removed(tmp_path):
    (tmp_path / f"checkpoint{TEMPORARY_MARK}123-abc.zip").write_text("x")
    (tmp_path / "model.zip").write_text("keep")
    removed = remove_temporary_files(tmp_path)
    assert [p.name for p in removed] == [f"checkpoint{TEMPORARY_MARK}123-abc.zip"]
    assert [p.name for p in tmp_path.iterdir()] == ["model.zip"]


def test_writable_dir_checks(tmp_path):
    check_writable_dir(tmp_path)
    check_writable_dir(tmp_path / "new" / "deeper", create=True)
    assert not (tmp_path / "new").exists()  # checked, not created
    (tmp_path / "afile.txt").write_text("x")
    with pytest.raises(ValueError, match="afile.txt is a file, not a folder"):
        check_writable_dir(tmp_path / "afile.txt")
    with pytest.raises(ValueError, match="does not exist; create it first"):
        check_writable_dir(tmp_path / "missing")


@needs_proc
def test_places_that_refuse_new_files_are_found_by_trying(tmp_path):
    with pytest.raises(ValueError, match="is not writable"):
        check_writable_dir(Path("/proc/self"))
    with pytest.raises(ValueError, match="is not writable"):
        check_writable_file(Path("/proc/c.png"), (".png",))
    with pytest.raises(ValueError, match="is not writable"):
        check_writable_dir(Path("/proc/self/new-run"), create=True)


def test_writable_file_checks(tmp_path):
    check_writable_file(tmp_path / "game.gif", (".gif",))
    with pytest.raises(ValueError, match="must end in .gif"):
        check_writable_file(tmp_path / "game.txt", (".gif",))
    with pytest.raises(ValueError, match="folder .*nodir does not exist"):
        check_writable_file(tmp_path / "nodir" / "x.gif", (".gif",))
    (tmp_path / "d.gif").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        check_writable_file(tmp_path / "d.gif", (".gif",))
    write_text_atomically(tmp_path / "t.txt", "text")
    assert (tmp_path / "t.txt").read_text() == "text"


def test_the_cache_folder_is_the_platforms_and_the_environment_variable_wins(monkeypatch, tmp_path):
    from sb3_snake.common.paths import CACHE_ENV, cache_dir

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert cache_dir() == tmp_path / "xdg" / "sb3-snake"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
