"""The sb3-snake command line, through Typer's runner and as an installed program."""

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from sb3_snake.cli import app

runner = CliRunner()


def test_benchmark_env_writes_json(tmp_path):
    result = runner.invoke(
        app,
        [
            "benchmark-env",
            "--num-envs",
            "4",
            "--repeats",
            "1",
            "--seconds",
            "0.02",
            "--threads",
            "1",
            "--output",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "batched" in result.output and "Saved" in result.output
    (path,) = tmp_path.glob("env_throughput_*.json")
    report = json.loads(path.read_text())
    assert report["system"]["torch_threads"] == 1
    assert [r["num_envs"] for r in report["results"]] == [1, 4, 4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-envs", "64,x"], "comma-separated positive integers"),
        (["--num-envs", "0"], "comma-separated positive integers"),
        (["--device", "tpu"], "expected cpu or cuda"),
        (["--repeats", "0"], "--repeats"),
    ],
)
def test_benchmark_env_bad_input_exits_2(args, message):
    result = runner.invoke(app, ["benchmark-env", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_installed_program_shows_help():
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    completed = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0
    assert "benchmark-env" in completed.stdout
