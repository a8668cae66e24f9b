"""Hyperparameter files: their keys, their values' types, and how they join the values a caller gives."""

import pytest

from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import HYPERPARAMETER_FIELDS
from sb3_snake.training.hyperparameters import (
    apply_hyperparameters,
    check_hyperparameters,
    hyperparameter_keys,
    read_hyperparameters,
)


def test_a_file_may_set_what_is_learned_not_how_the_run_goes():
    keys = hyperparameter_keys()
    assert {"learning_rate", "n_envs", "board_size", "embed_dim", "replay_ratio", "batch_size"} <= set(keys)
    assert not {"episodes", "device", "compile_after", "verbose", "tensorboard_log"} & set(keys)
    assert keys == list(HYPERPARAMETER_FIELDS)  # the batch size is one of TrainConfig's fields, not a setting


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"learning_rat": 0.1}, "hyperparameters: unknown key 'learning_rat'; did you mean learning_rate?"),
        ({"zzz": 1}, "hyperparameters: unknown key 'zzz'; known: n_envs, board_size, seed, countdown,"),
        ({"gamma": "high"}, "hyperparameters: gamma must be a number, got 'high'"),
        ({"batch_size": 0}, "hyperparameters: batch_size must be integer from 1 to 1048576, or auto, got 0"),
        ({"batch_size": "big"}, "hyperparameters: batch_size must be integer from 1 to 1048576, or auto, got 'big'"),
    ],
)
def test_a_bad_key_or_value_is_a_usage_error(values, message):
    with pytest.raises(UsageError) as raised:
        check_hyperparameters(values)
    assert str(raised.value).startswith(message)


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="hyperparameter file .*missing.json cannot be read"):
        read_hyperparameters(tmp_path / "missing.json")


def test_given_values_win_over_the_file():
    """The file's batch size joins the config values, under a flag (the environment and .env
    come below both: training.options)."""
    values = apply_hyperparameters(
        {"learning_rate": 0.002, "gamma": 0.9, "batch_size": 64}, {"gamma": 0.5, "episodes": 3}
    )
    assert values == {"learning_rate": 0.002, "gamma": 0.5, "batch_size": 64, "episodes": 3}
    assert apply_hyperparameters({"batch_size": 64}, {"batch_size": 32}) == {"batch_size": 32}
    assert apply_hyperparameters({"batch_size": "auto"}, {}) == {"batch_size": "auto"}


def test_a_fifo_hyperparameter_file_is_refused_without_blocking(tmp_path):
    import os
    import signal

    from sb3_snake.common.errors import UsageError
    from sb3_snake.training.hyperparameters import read_hyperparameters

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("reading the hyperparameter file blocked on a FIFO"))
    signal.alarm(20)
    try:
        with pytest.raises(UsageError, match=rf"hyperparameter file {fifo} is a FIFO, not a regular file"):
            read_hyperparameters(fifo)
    finally:
        signal.alarm(0)
