"""What every command shares (``sb3_snake.cli.common``): user errors as one line, bugs with their
traceback, and signals."""

import json
import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import sb3_snake.training.evaluation as evaluation
from sb3_snake.cli import app
from sb3_snake.cli.common import signal_exit_code, stop_on_signals
from sb3_snake.common.errors import UsageError
from sb3_snake.training.callbacks import StopRequest

runner = CliRunner()


def test_second_signal_aborts_and_signals_before_training_abort_at_once():
    # raise_signal runs the handler before it returns, so what the handler did can be asserted at once.
    stop = StopRequest()
    with stop_on_signals(stop) as received:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # still preparing: abort at once
    assert received == [signal.SIGINT] and stop.requested
    for phase in ("training", "saving"):
        stop = StopRequest()
        stop.phase = phase
        with stop_on_signals(stop) as received:
            signal.raise_signal(signal.SIGTERM)  # first: honoured after this step / this save
            assert stop.requested and stop.reason == "SIGTERM"
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)  # second: abort
        assert signal_exit_code(received) == 130 and received == [signal.SIGTERM, signal.SIGINT]


def raising(error):
    def check_evaluation(episodes, seed):
        raise error

    return check_evaluation


@pytest.mark.parametrize("error", [ValueError("an invariant broke"), RuntimeError("an invariant broke")])
def test_a_bug_inside_a_command_keeps_its_traceback_and_exits_1(monkeypatch, error):
    monkeypatch.setattr(evaluation, "check_evaluation", raising(error))
    result = runner.invoke(app, ["eval", "missing.zip"])
    assert result.exit_code == 1 and result.exception is error
    assert "error:" not in result.output


def test_a_usage_error_inside_a_command_is_one_line_and_exits_2(monkeypatch):
    monkeypatch.setattr(evaluation, "check_evaluation", raising(UsageError("--episodes must be odd, got 2")))
    result = runner.invoke(app, ["eval", "missing.zip"])
    assert result.exit_code == 2 and result.output == "error: --episodes must be odd, got 2\n"


@pytest.mark.slow
def test_the_program_prints_a_bugs_traceback():
    patch = "import sb3_snake.training.evaluation as e; e.check_evaluation = lambda *a: 1 / 0"
    command = [sys.executable, "-c", f"{patch}; from sb3_snake.cli import main; main()", "eval", "missing.zip"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1
    assert "Traceback" in completed.stderr and "ZeroDivisionError" in completed.stderr


def test_a_library_user_error_is_a_usage_error_and_a_plain_value_error_is_not_one():
    from sb3_snake.persistence import load_model

    with pytest.raises(UsageError):
        load_model("missing.zip", None)
    with pytest.raises(ValueError) as from_python:
        json.loads("{not json")
    assert not isinstance(from_python.value, UsageError)


@pytest.mark.slow
@pytest.mark.parametrize("compile_flag", ["--no-compile", "--compile"])
def test_an_unusable_compile_cache_folder_is_no_traceback(tmp_path, compile_flag):
    """torch imports its compiler even with compile off, and the import makes the compile cache
    folder: a file in its path ended every run with NotADirectoryError. Now the run goes on, and a
    requested compile is off with the reason."""
    (tmp_path / "file").write_text("")
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "file" / "inductor")}
    command = [sys.executable, "-c", "from sb3_snake.cli import main; main()", "train", "--board-size", "6"]
    command += [compile_flag, "--no-bf16", "--no-flash-attention", "--threads", "1", "--timesteps", "64"]
    result = subprocess.run(
        [*command, "--output", str(tmp_path / "run")], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    compile_line = next(line for line in result.stdout.splitlines() if line.startswith("torch.compile:"))
    if compile_flag == "--compile":
        assert "disabled (the compile cache TORCHINDUCTOR_CACHE_DIR=" in compile_line
        assert "cannot be made a folder (Not a directory)" in compile_line
    else:
        assert compile_line.split() == ["torch.compile:", "disabled", "(from", "override)"]
    assert (tmp_path / "run" / "model.zip").is_file() and not (tmp_path / "file").is_dir()


def test_the_library_names_its_fixes_as_arguments_and_the_command_line_as_flags():
    from sb3_snake.cli.common import in_flags
    from sb3_snake.common.errors import TrainingDiverged, UsageError

    cases = [
        ({"board_size": 5}, "pass board_size=5", "pass --board-size 5"),
        ({"countdown": False}, "pass countdown=False", "pass --no-countdown"),
        ({"egocentric": True}, "pass egocentric=True", "pass --egocentric"),
        ({"trusted": True}, "pass trusted=True", "pass --trust-model"),
        ({"learning_rate": "lower"}, "lower learning_rate", "lower --learning-rate"),
        (
            {"batch_size": "lower", "buffer_size": "raise"},
            "lower batch_size or raise buffer_size",
            "lower --batch-size or raise --buffer-size",
        ),
    ]
    for fix, python, flags in cases:
        error = UsageError("model m.zip does not fit", fix=fix)
        assert str(error) == f"model m.zip does not fit; {python}"
        assert in_flags(error) == f"model m.zip does not fit; {flags}"
    diverged = TrainingDiverged("the TD loss became nan", fix={"learning_rate": "lower"})
    assert (str(diverged), in_flags(diverged)) == (
        "the TD loss became nan; lower learning_rate",
        "the TD loss became nan; lower --learning-rate",
    )
    assert in_flags(UsageError("no fix")) == "no fix" and in_flags(ValueError("plain")) == "plain"
