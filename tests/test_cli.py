"""The sb3-snake command line, through Typer's runner and as an installed program."""

import json
import shutil
import signal
import subprocess
import time

import pytest
import torch
from typer.testing import CliRunner

from sb3_snake.cli import app
from sb3_snake.settings import OptimizationSettings

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


# ---------------------------------------------------------------- train, eval, play

TINY = [
    "--n-envs",
    "4",
    "--board-size",
    "5",
    "--seed",
    "1",
    "--learning-starts",
    "16",
    "--exploration-steps",
    "50",
    "--buffer-size",
    "2000",
    "--no-compile",
    "--no-bf16",
    "--batch-size",
    "16",
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "12",
            *TINY,
            "--flash-attention",
            "--output",
            str(run_dir),
            "--checkpoint-every",
            "5",
            "--save-replay-buffer",
        ],
    )
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_train_writes_model_and_summary_with_exact_episodes(trained_run):
    run_dir, output = trained_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 12
    for key in (
        "env_steps",
        "wall_seconds",
        "env_steps_per_second",
        "mean_score_last_100",
        "best_score",
        "hyperparameters",
        "optimizations",
        "active",
    ):
        assert key in summary
    assert (run_dir / "model.zip").is_file() and (run_dir / "checkpoint.zip").is_file()
    assert "12 episodes" in output


def test_overrides_are_visible_in_the_summary_and_json(trained_run):
    run_dir, output = trained_run
    assert "batch size:       16 (from override)" in output
    assert "torch.compile:    disabled (from override)" in output
    assert "BF16 autocast:    disabled (from override)" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["optimizations"]["batch_size"] == {"value": 16, "source": "override"}
    assert summary["optimizations"]["use_flash_attention"] == {"value": True, "source": "override"}
    assert summary["active"]["flash_attention_active"] is True
    assert summary["hyperparameters"]["board_size"] == 5


def test_eval_json(trained_run):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["eval", str(run_dir / "model.zip"), "--episodes", "6", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["episodes"] == 6 and report["board_size"] == 5
    assert 0 <= report["mean_score"] <= report["max_score"] and 0 <= report["win_rate"] <= 1


def test_play_text_and_gif(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["play", str(run_dir / "model.zip"), "--fps", "0"])
    assert result.exit_code == 0, result.output
    assert "#######" in result.output and "score" in result.output
    gif = tmp_path / "game.gif"
    result = runner.invoke(app, ["play", str(run_dir / "model.zip"), "--gif", str(gif)])
    assert result.exit_code == 0, result.output
    assert gif.read_bytes()[:4] == b"GIF8"


def test_plot_of_a_trained_run(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["plot", str(run_dir), "--output", str(tmp_path / "curve.png"), "--window", "5"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_time_limit_without_episodes_runs_until_the_limit(tmp_path):
    args = ["train", "--time-limit", "0.05", "--no-head-view", *TINY, "--output", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "time_limit" and summary["target_episodes"] is None
    assert summary["hyperparameters"]["head_view"] is False
    assert "stopped by the time limit" in result.output


def test_resume_from_checkpoint(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "3",
            *TINY,
            "--resume",
            str(run_dir / "checkpoint.zip"),
            "--output",
            str(tmp_path / "resumed"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["resumed_from"].endswith("checkpoint.zip")
    assert summary["total_env_steps"] > summary["env_steps"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--episodes", "0"], "episodes must be at least 1"),
        (["train", "--board-size", "3"], "board_size must be an integer >= 4, got 3"),
        (["train", "--device", "tpu"], "device must be auto, cpu or cuda"),
        (["train", "--wandb-mode", "sometimes"], "--wandb-mode must be one of"),
        (["eval", "missing.zip"], "model file missing.zip does not exist"),
        (["play", "missing.zip"], "model file missing.zip does not exist"),
        (["eval", "missing.zip", "--episodes", "0"], "--episodes must be at least 1"),
        (["train", "--timesteps", "0"], "timesteps must be at least 1"),
        (["train", "--time-limit", "-1"], "time limit must be positive"),
        (["plot", "no-such-run"], "episodes.json does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_gpu_exits_2():
    result = runner.invoke(app, ["train", "--device", "cuda"])
    assert result.exit_code == 2 and "no CUDA GPU is available" in result.output


def test_corrupt_model_file_exits_2(tmp_path):
    corrupt = tmp_path / "model.zip"
    corrupt.write_bytes(b"not a zip")
    result = runner.invoke(app, ["eval", str(corrupt)])
    assert result.exit_code == 2 and "cannot be loaded" in result.output


def test_malformed_env_file_exits_2(tmp_path):
    env_file = tmp_path / "bad.env"
    env_file.write_text("USE_BF16=maybe\n")
    result = runner.invoke(app, ["train", "--env-file", str(env_file)])
    assert result.exit_code == 2 and "USE_BF16='maybe'" in result.output and "bad.env" in result.output


def test_resume_with_another_board_size_exits_2(trained_run, tmp_path):
    run_dir, _ = trained_run
    args = [a if a != "5" else "6" for a in TINY]
    result = runner.invoke(
        app,
        ["train", "--episodes", "2", *args, "--resume", str(run_dir / "model.zip"), "--output", str(tmp_path / "x")],
    )
    assert result.exit_code == 2 and "trained on a 5x5 board, not 6x6" in result.output


def test_sigint_stops_cleanly_and_leaves_a_loadable_model(tmp_path):
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    run_dir = tmp_path / "interrupted"
    process = subprocess.Popen(
        [program, "train", "--episodes", "1000000", *TINY, "--output", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("board size:"):
            break
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, "".join(lines) + output
    assert "stopped by a signal" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "signal" and 0 < summary["episodes"] < 1000000
    from sb3_snake.training import load_model

    model = load_model(run_dir / "model.zip", OptimizationSettings(use_torch_compile=False, num_threads=1))
    assert model.observation_space.shape == (5, 5, 5)


def test_train_with_wandb_offline_logs_config_and_metrics(tmp_path, fake_wandb):
    fake = fake_wandb
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "30",
            *TINY,
            "--output",
            str(tmp_path),
            "--wandb",
            "--wandb-mode",
            "offline",
            "--wandb-project",
            "cli-test",
            "--verbose",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert fake.init_kwargs["mode"] == "offline" and fake.init_kwargs["project"] == "cli-test"
    optimizations = fake.init_kwargs["config"]["optimizations"]
    assert optimizations["torch_compile_requested"] is False and optimizations["sources"]["batch_size"] == "override"
    assert sum("episode/score" in m for m in fake.logged) == 30
    assert any("train/loss" in m for m in fake.logged)
    assert "exploration_rate" in result.output and "loss" in result.output  # --verbose 1 prints SB3's metrics
    assert json.loads((tmp_path / "summary.json").read_text())["wandb_mode"] == "offline"


def test_benchmark_writes_the_full_results_and_the_env_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# my comment\nOPTIMAL_BATCH_SIZE=512\nUSE_TORCH_COMPILE=true\n")
    result = runner.invoke(
        app,
        [
            "benchmark",
            "--quick",
            "--batch-sizes",
            "16,32",
            "--combinations",
            "fp32,flash",
            "--repeats",
            "2",
            "--no-end-to-end",
            "--write-env",
            "--env-file",
            str(env_file),
            "--output",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("benchmark_results_full_*.json")
    report = json.loads(path.read_text())
    assert [(r["combination"], r["batch_size"]) for r in report["gradient_step"]] == [
        ("fp32", 16),
        ("fp32", 32),
        ("flash", 16),
        ("flash", 32),
    ]
    assert report["plan"]["repeats"] == 2 and report["end_to_end"] is None
    assert {"cpu", "cpu_cores", "torch", "python", "stable_baselines3", "cuda", "gpu"} <= set(report["system"])
    best = report["best"]
    settings = OptimizationSettings.load(env_file)
    assert settings.batch_size == best["batch_size"] and settings.use_torch_compile is False
    assert settings.use_flash_attention == best["use_flash_attention"]
    assert env_file.read_text().startswith("# my comment\n")
    assert path.name in env_file.read_text() and "Saved" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--combinations", "fp32,turbo"], "error: --combinations: unknown turbo; choose from fp32"),
        (["--device", "tpu"], "error: --device must be auto, cpu or cuda, got 'tpu'"),
        (["--wandb-mode", "loud"], "error: --wandb-mode must be one of"),
    ],
)
def test_benchmark_bad_input_is_one_line(args, message):
    result = runner.invoke(app, ["benchmark", *args])
    assert result.exit_code == 2
    assert result.output.startswith(message) and result.output.count("\n") == 1


def test_benchmark_grad_rejects_an_unknown_combination_in_one_line():
    result = runner.invoke(app, ["benchmark-grad", "--combinations", "turbo"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --combinations: unknown turbo") and result.output.count("\n") == 1
