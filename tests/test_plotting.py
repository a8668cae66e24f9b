"""The learning-curve plot."""

import json

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
