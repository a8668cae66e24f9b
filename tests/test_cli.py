"""The command line as a whole (bad input to any command is one line), the benchmark and tune
commands through Typer's runner, and the installed program."""

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

import sb3_snake.cli as cli
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark import results
from sb3_snake.cli import app
from sb3_snake.training.options import load_config

runner = CliRunner()


def test_benchmark_env_writes_json(tmp_path):
    result = runner.invoke(
        app,
        [
            "benchmark-env",
            "--device",
            "cpu",
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
        (["--device", "tpu"], "'tpu' is not one of 'auto', 'cpu', 'cuda'"),
        (["--device", "auto"], "--device must be cpu or cuda, got 'auto'"),
        (["--repeats", "0"], "--repeats"),
    ],
)
def test_benchmark_env_bad_input_exits_2(args, message):
    result = runner.invoke(app, ["benchmark-env", *args])
    assert result.exit_code == 2
    assert message in result.output


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
        (["train", "--board-size", "3"], "board_size must be an integer >= 4, got 3"),
        (["train", "--device", "tpu"], "Invalid value for '--device': 'tpu' is not one of 'auto', 'cpu', 'cuda'"),
        (["train", "--wandb-mode", "sometimes"], "Invalid value for '--wandb-mode': 'sometimes' is not one of"),
        (["train", "--n-envs", "x"], "Invalid value for '--n-envs'"),
        (["train", "--bogus"], "No such option: --bogus"),
        (["eval", "missing.zip"], "model file missing.zip does not exist"),
        (["play", "missing.zip"], "model file missing.zip does not exist"),
        (["eval", "missing.zip", "--episodes", "0"], "--episodes must be at least 1"),
        (["eval", "missing.zip", "--seed", "99999999999999999999"], "--seed must be from 0 to 4294967295"),
        (["train", "--timesteps", "0"], "timesteps must be at least 1"),
        (["train", "--time-limit", "-1"], "time limit must be a positive number of minutes"),
        (["train", "--time-limit", "nan"], "time limit must be a positive number of minutes, got nan"),
        (["train", "--learning-rate", "inf"], "learning_rate must be a positive finite number, got inf"),
        (["train", "--replay-ratio", "inf"], "replay_ratio must be a positive finite number, got inf"),
        (["train", "--batch-size", "4096", "--buffer-size", "512"], "batch size 4096 is larger than the replay buffer"),
        (["train", "--board-size", "1000"], "board_size must be at most 256, got 1000"),
        (["train", "--n-envs", "100000000"], "this run needs about"),
        (["train", "--threads", "100000"], "--threads '100000': expected auto or an integer from 1 to"),
        (["train", "--seed", "-1"], "seed must be from 0 to 4294967295"),
        (["train", "--compile-mode", "fast"], "Invalid value for '--compile-mode'"),
        (["plot", "no-such-run"], "episodes.json does not exist"),
        (["plot", ".", "--output", "/proc/c.png"], "plot output /proc/c.png: folder /proc is not writable"),
        (["benchmark-env", "--threads", "100000"], "--threads '100000'"),
        (["benchmark-grad", "--device", "tpu"], "Invalid value for '--device'"),
        (["tune", "--n-trials", "0"], "--n-trials must be at least 1"),
        (["tune", "--sampler", "grid"], "Invalid value for '--sampler'"),
        (["tune", "--storage", "study.db"], "give a journal file ending in .log or a URL"),
        (["tune", "--storage", "mysql+nosuchdriver://u@localhost/x"], "--storage mysql+nosuchdriver://"),
        (["tune", "--report", "--study-name", "no-such-study"], "no study journal"),
        (["train", "--embed-dim", "7"], "embed_dim must be an even number"),
        (["train", "--num-layers", "-1"], "num_layers must be at least 0, got -1"),
        (
            ["train", "--flash-attention", "--sdpa-backend", "math"],
            "SDPA_BACKEND=math (from --sdpa-backend) contradict",
        ),
        (["train", "--sdpa-backend", "fastest"], "Invalid value for '--sdpa-backend'"),
        (["train", "--batch-size", "many"], "--batch-size 'many': expected a positive integer or auto"),
        (["benchmark-learning", "--minutes", "0"], "--minutes must be a positive number, got 0"),
        (["benchmark-learning", "--minutes", "inf"], "--minutes must be a positive number, got inf"),
        (["benchmark-learning", "--every", "-5"], "--every must be a positive number of seconds"),
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
    assert report["settings"]["gradient_step"]["seconds_per_repeat"] == 0.25  # --quick's timed runs
    assert all(r["steps_per_repeat"] >= 2 and r["steps_per_repeat"] % 2 == 0 for r in report["gradient_step"])
    assert {"cpu", "cpu_cores", "torch", "python", "stable_baselines3", "cuda", "gpu"} <= set(report["system"])
    best = report["best"]
    settings = OptimizationSettings.load(env_file)
    assert load_config(env_file).batch_size == best["batch_size"] and settings.use_torch_compile is False
    assert settings.use_flash_attention == best["use_flash_attention"]
    assert env_file.read_text().startswith("# my comment\n")
    assert path.name in env_file.read_text() and "Saved" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--combinations", "fp32,turbo"], "error: --combinations: unknown turbo; choose from fp32"),
        (["--device", "tpu"], "error: Invalid value for '--device': 'tpu' is not one of 'auto', 'cpu', 'cuda'."),
        (["--wandb-mode", "loud"], "error: Invalid value for '--wandb-mode': 'loud' is not one of"),
        (["--threads", "0"], "error: --threads '0': expected auto or an integer from 1"),
    ],
)
def test_benchmark_bad_input_is_one_line(args, message):
    result = runner.invoke(app, ["benchmark", *args])
    assert result.exit_code == 2
    assert result.output.startswith(message) and result.output.count("\n") == 1


def test_benchmark_learning_writes_json_and_picture_from_its_plan(tmp_path, monkeypatch):
    from sb3_snake.benchmark import learning

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hp.json").write_text('{"dueling": true}')
    plans = []

    def fake_benchmark(plan, work_dir, progress):
        plans.append((plan, work_dir))
        curve = [{"seconds": 30.0, "minutes": 0.5, "mean_score": 12.0}]
        runs = [{"system": s, "seed": 0, "curve": curve, "env_steps": 10} for s in plan.systems]
        return {
            "system": {"cpu": "test", "cpu_cores": 2, "torch": "x"},
            "plan": {"episodes": 5},
            "runs": runs,
            "summary": learning.summarize(runs),
        }

    monkeypatch.setattr(learning, "run_learning_benchmark", fake_benchmark)
    for module in (cli, results):  # both benchmarks start, and finish, in the same second
        monkeypatch.setattr(module, "utc_stamp", lambda: "20261123T202313Z")
    arguments = ["benchmark-learning", "--quick", "--seeds", "2", "--first-seed", "3", "--no-baseline"]
    for _ in range(2):
        result = runner.invoke(app, [*arguments, "--hyperparams", "hp.json", "--output", "out"])
        assert result.exit_code == 0, result.output
    plan, work_dir = plans[0]
    assert (plan.minutes, plan.every_seconds, plan.seeds, plan.systems) == (2.0, 10.0, (3, 4), ("sb3_snake",))
    assert plan.hyperparameters == {"dueling": True} and plan.cold_cache
    assert [work_dir.as_posix() for _, work_dir in plans] == [
        "runs/benchmark-learning/20261123T202313Z",
        "runs/benchmark-learning/20261123T202313Z-2",
    ]
    assert all(work_dir.is_dir() for _, work_dir in plans)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == sorted(f"learning_20261123T202313Z{n}.{kind}" for n in ("", "-2") for kind in ("json", "png"))
    assert "30s (30s-30s) 1/1" in result.output


def test_benchmark_grad_rejects_an_unknown_combination_in_one_line():
    result = runner.invoke(app, ["benchmark-grad", "--combinations", "turbo"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --combinations: unknown turbo") and result.output.count("\n") == 1


def test_benchmarks_check_their_outputs_before_measuring(tmp_path, monkeypatch):
    import sb3_snake.benchmark.env_throughput as env_throughput
    import sb3_snake.benchmark.full as full

    monkeypatch.setattr(env_throughput, "run_env_benchmark", lambda *a, **k: pytest.fail("measured first"))
    monkeypatch.setattr(full, "run_benchmark", lambda *a, **k: pytest.fail("measured first"))
    (tmp_path / "afile.txt").write_text("x")
    result = runner.invoke(app, ["benchmark-env", "--output", str(tmp_path / "afile.txt")])
    assert result.exit_code == 2 and "afile.txt is a file, not a folder" in result.output
    (tmp_path / "envdir").mkdir()
    args = ["benchmark", "--quick", "--write-env", "--env-file", str(tmp_path / "envdir"), "--output", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "is a directory" in result.output
