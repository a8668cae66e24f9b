"""A run's config and settings from a caller's options, as ``sb3-snake train`` builds them."""

import json
import sys

import pytest

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.options import configure_run
from sb3_snake.training.run import train
from tests.conftest import FAST, tiny_config


def test_options_over_a_hyperparameter_file_over_the_defaults(tmp_path):
    path = tmp_path / "hyper.json"
    path.write_text(json.dumps({"gamma": 0.9, "dueling": True, "batch_size": 64}))
    config, settings = configure_run({"gamma": 0.5, "episodes": 3}, OptimizationSettings(), hyperparameters=path)
    assert config == TrainConfig(gamma=0.5, episodes=3, dueling=True)
    assert (settings.batch_size, settings.source("batch_size")) == (64, "hyperparams file")
    assert configure_run({}, FAST) == (TrainConfig(), FAST)


def test_on_resume_the_model_fills_in_what_the_options_and_the_file_leave_out(tmp_path):
    train(tiny_config(episodes=2, gamma=0.8, learning_rate=0.003), FAST, tmp_path / "a")
    path = tmp_path / "hyper.yaml"
    path.write_text("learning_rate: 0.001\n")
    config, _ = configure_run({"episodes": 5}, FAST, hyperparameters=path, resume=tmp_path / "a" / "model.zip")
    assert (config.episodes, config.learning_rate, config.gamma, config.board_size) == (5, 0.001, 0.8, 5)


def test_a_tensorboard_folder_without_tensorboard_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(UsageError, match=r'needs TensorBoard: pip install "sb3-snake\[tensorboard\]"'):
        configure_run({"tensorboard_log": str(tmp_path / "tb")}, FAST)
