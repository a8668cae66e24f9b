"""The learning-curve plot."""

import json
from pathlib import Path

import numpy as np
import pytest

from sb3_snake.training.plotting import moving_average, plot_learning_curve


def test_moving_average():
    np.testing.assert_allclose(moving_average(np.array([1, 2, 3, 4, 5]), 2), [1, 1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(moving_average(np.array([4, 0]), 10), [4, 2])


def test_plot_writes_a_png(tmp_path):
    record = {
        "scores": [0, 1, 2, 3],
        "lengths": [5, 6, 7, 8],
        "env_steps": [5, 11, 18, 26],
        "wall_seconds": [0.1, 0.2, 0.3, 0.4],
    }
    (tmp_path / "episodes.json").write_text(json.dumps(record))
    path = plot_learning_curve(tmp_path, window=2)
    assert path == tmp_path / "learning_curve.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_needs_a_run_directory(tmp_path):
    with pytest.raises(ValueError, match="episodes.json does not exist"):
        plot_learning_curve(tmp_path)
    (tmp_path / "episodes.json").write_text(
        json.dumps({"scores": [], "lengths": [], "env_steps": [], "wall_seconds": []})
    )
    with pytest.raises(ValueError, match="no finished episode"):
        plot_learning_curve(tmp_path)


RECORD = {"scores": [0, 1, 2], "lengths": [3, 4, 5], "env_steps": [5, 11, 18], "wall_seconds": [0.1, 0.2, 0.3]}


def plot_command(*args):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    return CliRunner().invoke(app, ["plot", *map(str, args)])


def assert_one_line(result, code, *words):
    """Exit ``code`` without a traceback (not a bug's exception), one ``error:`` line holding ``words``."""
    assert result.exit_code == code and isinstance(result.exception, SystemExit), result.output
    assert len(result.output.splitlines()) == 1 and "Traceback" not in result.output, result.output
    assert result.output.startswith("error: ") and all(word in result.output for word in words), result.output


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[]",
        "null",
        '"scores"',
        "[" * 100_000 + "]" * 100_000,
        '{"scores": [1, 2',
        json.dumps({**RECORD, "scores": None}),
        json.dumps({**RECORD, "env_steps": ["5", "11", "18"]}),
        json.dumps({**RECORD, "scores": [[0], [1], [2]]}),
        json.dumps({**RECORD, "wall_seconds": [0.1, float("nan"), 0.3]}),
        json.dumps({**RECORD, "scores": [0, 1, 10**400]}),
        json.dumps({**RECORD, "env_steps": [5, 11]}),
    ],
    ids=lambda text: text[:30],
)
def test_a_corrupt_episodes_file_is_one_line_naming_it(tmp_path, text):
    (tmp_path / "episodes.json").write_text(text)
    result = plot_command(tmp_path)
    assert_one_line(result, 2, str(tmp_path / "episodes.json"))
    assert not (tmp_path / "learning_curve.png").exists()


def test_an_episodes_file_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    (tmp_path / "episodes.json").write_bytes(b"\xff\xfe{}")
    assert_one_line(plot_command(tmp_path), 2, str(tmp_path / "episodes.json"), "not the JSON that training writes")


def test_a_full_disk_while_writing_the_png_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    import errno

    from matplotlib.figure import Figure

    def full_disk(self, path, **kwargs):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    (tmp_path / "episodes.json").write_text(json.dumps(RECORD))
    output = tmp_path / "curve.png"
    result = plot_command(tmp_path, "--output", output)
    assert_one_line(result, 1, f"cannot write {output} (No space left on device)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["episodes.json"]
