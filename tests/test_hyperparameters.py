"""Hyperparameter files: their keys, their values' types, and how they join the values a caller gives."""

import pytest

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.training.hyperparameters import (
    FILE_SOURCE,
    apply_hyperparameters,
    hyperparameter_keys,
    read_hyperparameters,
    split_hyperparameters,
)


def test_a_file_may_set_what_is_learned_not_how_the_run_goes():
    keys = hyperparameter_keys()
    assert {"learning_rate", "n_envs", "board_size", "embed_dim", "replay_ratio", "batch_size"} <= set(keys)
    assert not {"episodes", "device", "compile_after", "verbose", "tensorboard_log"} & set(keys)
    assert keys[-1] == "batch_size"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"learning_rat": 0.1}, "hyperparameters: unknown key 'learning_rat'; did you mean learning_rate?"),
        ({"zzz": 1}, "hyperparameters: unknown key 'zzz'; known: n_envs, board_size, seed, countdown,"),
        ({"gamma": "high"}, "hyperparameters: gamma must be a number, got 'high'"),
    ],
)
def test_a_bad_key_or_value_is_a_usage_error(values, message):
    with pytest.raises(UsageError) as raised:
        split_hyperparameters(values)
    assert str(raised.value).startswith(message)


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="hyperparameter file .*missing.json cannot be read"):
        read_hyperparameters(tmp_path / "missing.json")


def test_given_values_win_over_the_file_and_the_file_over_the_env_file():
    from_env_file = OptimizationSettings(batch_size=512, sources={"batch_size": ".env"})
    values, settings = apply_hyperparameters(
        {"learning_rate": 0.002, "gamma": 0.9, "batch_size": 64}, {"gamma": 0.5, "episodes": 3}, from_env_file
    )
    assert values == {"learning_rate": 0.002, "gamma": 0.5, "episodes": 3}
    assert (settings.batch_size, settings.source("batch_size")) == (64, FILE_SOURCE)
    assert settings.source("use_bf16") == from_env_file.source("use_bf16")


def test_a_batch_size_given_as_an_override_wins_over_the_file():
    flag = OptimizationSettings.load(None, batch_size=32)
    _, settings = apply_hyperparameters({"batch_size": 64}, {}, flag)
    assert (settings.batch_size, settings.source("batch_size")) == (32, "override")
    _, unchanged = apply_hyperparameters({"gamma": 0.5}, {}, OptimizationSettings())
    assert unchanged == OptimizationSettings() and unchanged.source("batch_size") == "default"
