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


@pytest.fixture(autouse=True)
def no_batch_size_in_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("OPTIMAL_BATCH_SIZE", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env in reach unless a test writes one


def test_options_over_a_hyperparameter_file_over_the_defaults(tmp_path):
    path = tmp_path / "hyper.json"
    path.write_text(json.dumps({"algo": "dqn", "gamma": 0.9, "dueling": True, "batch_size": 64}))
    config, settings = configure_run({"gamma": 0.5, "episodes": 3}, OptimizationSettings(), hyperparameters=path)
    assert config == TrainConfig(algo="dqn", gamma=0.5, episodes=3, dueling=True, batch_size=64)
    assert (config.batch_size, config.source("batch_size")) == (64, "hyperparams file")
    assert settings == OptimizationSettings()
    assert configure_run({}, FAST) == (TrainConfig(), FAST)


def test_a_file_batch_size_is_under_the_flag_and_over_the_environment_and_env_file(tmp_path, monkeypatch):
    path = tmp_path / "hyper.json"
    path.write_text(json.dumps({"batch_size": 64}))
    (tmp_path / ".env").write_text("OPTIMAL_BATCH_SIZE=512\n")
    flag, _ = configure_run({"batch_size": 32}, FAST, hyperparameters=path)
    assert (flag.batch_size, flag.source("batch_size")) == (32, "override")
    monkeypatch.setenv("OPTIMAL_BATCH_SIZE", "256")
    from_file, _ = configure_run({}, FAST, hyperparameters=path)
    assert (from_file.batch_size, from_file.source("batch_size")) == (64, "hyperparams file")
    environment, _ = configure_run({}, FAST)
    assert (environment.batch_size, environment.source("batch_size")) == (256, "environment")
    monkeypatch.delenv("OPTIMAL_BATCH_SIZE")
    env_file, _ = configure_run({}, FAST)
    assert (env_file.batch_size, env_file.source("batch_size")) == (512, ".env")
    other = tmp_path / "other.env"
    other.write_text("OPTIMAL_BATCH_SIZE=auto\n")
    assert configure_run({}, FAST, env_file=other)[0].batch_size == "auto"


def test_a_resumed_run_keeps_its_model_batch_size_unless_one_is_given(tmp_path, monkeypatch):
    """Over the environment and .env, as over the defaults; a flag or a file changes it."""
    train(tiny_config(episodes=2), FAST, tmp_path / "a")
    model = tmp_path / "a" / "model.zip"
    (tmp_path / ".env").write_text("OPTIMAL_BATCH_SIZE=512\n")
    monkeypatch.setenv("OPTIMAL_BATCH_SIZE", "256")
    kept, _ = configure_run({"episodes": 2}, FAST, resume=model)
    assert (kept.batch_size, kept.source("batch_size")) == (16, "resumed model")
    flag, _ = configure_run({"batch_size": 8}, FAST, resume=model)
    assert (flag.batch_size, flag.source("batch_size")) == (8, "override")
    path = tmp_path / "hyper.json"
    path.write_text(json.dumps({"batch_size": 32}))
    from_file, _ = configure_run({}, FAST, hyperparameters=path, resume=model)
    assert (from_file.batch_size, from_file.source("batch_size")) == (32, "hyperparams file")
    summary = train(kept, FAST, tmp_path / "b", resume=model)
    assert summary["hyperparameters"]["batch_size"] == 16
    assert summary["batch_size"] == {"value": 16, "source": "resumed model"}


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
