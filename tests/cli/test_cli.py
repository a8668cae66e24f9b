"""The command line as a whole: bad input to any command is one line, and the installed program runs."""

import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from sb3_snake.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_installed_program_shows_help():
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    completed = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0
    assert "benchmark-env" in completed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--episodes", "0"], "episodes must be at least 1"),
        (["train", "--board-size", "3"], "board_size must be from 4 to 256, got 3"),
        (["train", "--device", "tpu"], "Invalid value for '--device': 'tpu' is not one of 'auto', 'cpu', 'cuda'"),
        (["train", "--wandb-mode", "sometimes"], "Invalid value for '--wandb-mode': 'sometimes' is not one of"),
        (["train", "--n-envs", "x"], "Invalid value for '--n-envs'"),
        (["train", "--bogus"], "No such option: --bogus"),
        (["eval", "missing.zip"], "model file missing.zip does not exist"),
        (["play", "missing.zip"], "model file missing.zip does not exist"),
        (["eval", "missing.zip", "--episodes", "0"], "episodes must be at least 1"),
        (["eval", "missing.zip", "--seed", "99999999999999999999"], "seed must be from 0 to 4294967295"),
        (["train", "--timesteps", "0"], "timesteps must be at least 1"),
        (["train", "--time-limit", "-1"], "time limit must be a positive number of minutes"),
        (["train", "--time-limit", "nan"], "time limit must be a positive number of minutes, got nan"),
        (["train", "--learning-rate", "inf"], "learning_rate must be from 1e-12 to 10, got inf"),
        (["train", "--algo", "dqn", "--replay-ratio", "inf"], "replay_ratio must be from 0.001 to 4096, got inf"),
        (
            ["train", "--algo", "dqn", "--batch-size", "4096", "--buffer-size", "512"],
            "batch size 4096 is larger than the replay buffer",
        ),
        (["train", "--board-size", "1000"], "board_size must be from 4 to 256, got 1000"),
        (["train", "--n-envs", "100000000"], "n_envs must be from 1 to 1048576, got 100000000"),
        (["train", "--n-envs", "1048576", "--board-size", "64"], "this run needs about"),
        (["train", "--threads", "100000"], "--threads '100000': expected auto or an integer from 1 to"),
        (["train", "--seed", "-1"], "seed must be from 0 to 4294967295"),
        (["train", "--compile-mode", "fast"], "Invalid value for '--compile-mode'"),
        (["plot", "no-such-run"], "episodes.json does not exist"),
        (["plot", ".", "--output", "/proc/c.png"], "plot output /proc/c.png: folder /proc is not writable"),
        (["benchmark-env", "--threads", "100000"], "--threads '100000'"),
        (["benchmark-grad", "--device", "tpu"], "Invalid value for '--device'"),
        (["tune", "--n-trials", "0"], "n_trials must be at least 1"),
        (["tune", "--sampler", "grid"], "Invalid value for '--sampler'"),
        (["tune", "--storage", "study.db"], "give a journal file ending in .log or a URL"),
        (["tune", "--storage", "mysql+nosuchdriver://u@localhost/x"], "storage mysql+nosuchdriver://"),
        (["tune", "--report", "--study-name", "no-such-study"], "no study journal"),
        (["train", "--algo", "dqn", "--embed-dim", "7"], "embed_dim must be an even number"),
        (["train", "--algo", "dqn", "--num-layers", "-1"], "num_layers must be from 0 to 64, got -1"),
        (
            ["train", "--flash-attention", "--sdpa-backend", "math"],
            "SDPA_BACKEND=math (from --sdpa-backend) contradict",
        ),
        (["train", "--sdpa-backend", "fastest"], "Invalid value for '--sdpa-backend'"),
        (["train", "--batch-size", "many"], "--batch-size 'many': expected an integer from 1 to 1048576 or auto"),
        (["benchmark", "--batch-size", "many"], "--batch-size 'many': expected an integer from 1 to 1048576 or auto"),
        (["tune", "--batch-size", "64"], "--batch-size does not apply to tune: every trial draws its own"),
        (["benchmark-learning", "--minutes", "0"], "--minutes must be a positive number, got 0"),
        (["benchmark-learning", "--minutes", "inf"], "--minutes must be a positive number, got inf"),
        (["benchmark-learning", "--every", "-5"], "--every must be a number of seconds of at least 1, got -5"),
        (["benchmark-learning", "--seeds", "0"], "Invalid value for '--seeds'"),
        (["benchmark-learning", "--first-seed", "-1"], "Invalid value for '--first-seed'"),
        (["benchmark-learning", "--hyperparams", "missing.json"], "hyperparameter file missing.json cannot be read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
