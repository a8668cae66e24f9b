"""The benchmark commands through Typer's runner: benchmark-env, benchmark-grad, benchmark-learning
and the full benchmark, their results, the .env write-back, and their one-line errors."""

import json

import pytest
from typer.testing import CliRunner

import sb3_snake.cli.benchmark as cli_benchmark
import sb3_snake.cli.learning as cli_learning
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark import results
from sb3_snake.cli import app
from sb3_snake.common.errors import UsageError
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
    ("command", "args", "message"),
    [
        ("benchmark-env", ["--num-envs", "64,x"], "comma-separated positive integers"),
        ("benchmark-env", ["--num-envs", "0"], "comma-separated positive integers"),
        ("benchmark-env", ["--device", "tpu"], "'tpu' is not one of 'auto', 'cpu', 'cuda'"),
        ("benchmark-env", ["--device", "auto"], "--device must be cpu or cuda, got 'auto'"),
        ("benchmark-env", ["--repeats", "0"], "--repeats"),
        ("benchmark", ["--combinations", "fp32,turbo"], "error: --combinations: unknown turbo; choose from fp32"),
        ("benchmark", ["--device", "tpu"], "error: Invalid value for '--device': 'tpu' is not one of 'auto', 'cpu'"),
        ("benchmark", ["--wandb-mode", "loud"], "error: Invalid value for '--wandb-mode': 'loud' is not one of"),
        ("benchmark", ["--threads", "0"], "error: --threads '0': expected auto or an integer from 1"),
    ],
)
def test_benchmark_bad_input_is_one_line(command, args, message):
    result = runner.invoke(app, [command, *args])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert message in result.output


def test_benchmark_learning_writes_json_and_picture_from_its_plan(tmp_path, monkeypatch):
    from sb3_snake.benchmark import learning

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hp.json").write_text('{"algo": "dqn", "dueling": true}')
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
    for module in (cli_learning, results):  # both benchmarks start, and finish, in the same second
        monkeypatch.setattr(module, "utc_stamp", lambda: "20261123T202313Z")
    arguments = ["benchmark-learning", "--quick", "--seeds", "2", "--first-seed", "3", "--no-baseline"]
    for peer in ("--ppo", "--no-ppo"):
        result = runner.invoke(app, [*arguments, peer, "--hyperparams", "hp.json", "--output", "out"])
        assert result.exit_code == 0, result.output
    assert plans[0][0].systems == ("sb3_snake", "sb3_ppo")
    plan, work_dir = plans[1]
    assert (plan.minutes, plan.every_seconds, plan.seeds, plan.systems) == (2.0, 10.0, (3, 4), ("sb3_snake",))
    assert plan.hyperparameters == {"algo": "dqn", "dueling": True} and plan.cold_cache
    assert [work_dir.as_posix() for _, work_dir in plans] == [
        "runs/benchmark-learning/20261123T202313Z",
        "runs/benchmark-learning/20261123T202313Z-2",
    ]
    assert all(work_dir.is_dir() for _, work_dir in plans)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == sorted(f"learning_20261123T202313Z{n}.{kind}" for n in ("", "-2") for kind in ("json", "png"))
    assert "30s (30s-30s) 1/1" in result.output


def test_benchmark_learning_keeps_the_runs_that_finished_and_exits_1_for_one_that_failed(tmp_path, monkeypatch):
    from sb3_snake.benchmark import learning

    monkeypatch.chdir(tmp_path)
    crash = "the sb3_snake run of seed 1 failed (exit code -11: SIGSEGV); its output is in x/train.log"
    finished: list[int] = [0]

    def fake_benchmark(plan, work_dir, progress):
        curve = [{"seconds": 30.0, "minutes": 0.5, "mean_score": 12.0}]
        runs = [{"system": "sb3_snake", "seed": seed, "curve": curve, "env_steps": 10} for seed in finished]
        failed = [{"system": "sb3_snake", "seed": 1, "error": crash, "compile_cache": "cold"}]
        return {
            "system": {"cpu": "test", "cpu_cores": 2, "torch": "x"},
            "plan": {"episodes": 5},
            "runs": runs,
            "failed_runs": failed,
            "summary": learning.summarize(runs),
        }

    monkeypatch.setattr(learning, "run_learning_benchmark", fake_benchmark)
    arguments = ["benchmark-learning", "--quick", "--seeds", "2", "--no-baseline", "--no-ppo", "--output", "out"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 1
    assert sorted(path.suffix for path in (tmp_path / "out").iterdir()) == [".json", ".png"]  # seed 0 is kept
    assert f"failed, not in the figures above: {crash}" in result.output
    assert "error: 1 of 2 runs failed" in result.output
    finished.clear()  # and when every run fails, nothing is written
    result = runner.invoke(app, [*arguments[:-1], "out2"])
    assert result.exit_code == 1
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())
    assert result.output.strip().endswith(f"error: every run failed, no results written; the first: {crash}")


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


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (lambda text: cli_benchmark._parse_int_list(text, "--batch-sizes"), "64,x", "--batch-sizes: expected"),
        (lambda text: cli_benchmark._parse_int_list(text, "--num-envs"), "", "--num-envs: expected"),
        (cli_benchmark._parse_combinations, "fp32,turbo", "--combinations: unknown turbo"),
        (cli_benchmark._parse_combinations, ",", r"--combinations: unknown \(none given\)"),
    ],
)
def test_the_lists_a_benchmark_parses_are_usage_errors(parse, text, message):
    with pytest.raises(UsageError, match=message):
        parse(text)


def test_benchmark_learning_builds_the_research_loop_from_its_options(tmp_path, monkeypatch):
    """A budget of env steps, runs side by side and two arms: the plan says each, the table says
    the budget, and a comparison leaves plain SB3 and PPO out by itself."""
    from sb3_snake.benchmark import learning

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text('{"algo": "dqn", "dueling": true}')
    (tmp_path / "b.json").write_text('{"learning_rate": 0.001}')
    plans = []

    def fake_benchmark(plan, work_dir, progress):
        plans.append(plan)
        curve = [{"seconds": 30.0, "minutes": 0.5, "env_steps": 5000, "mean_score": 12.0}]
        runs = [{"system": "sb3_snake", "arm": arm, "seed": 0, "curve": curve, "env_steps": 5000} for arm in "AB"]
        budget = {"unit": "env_steps", "total": plan.budget, "every": plan.every, "text": "5,000 env steps, ..."}
        return {
            "system": {"cpu": "test", "cpu_cores": 2, "torch": "x"},
            "plan": {"episodes": 5},
            "budget": budget,
            "runs": runs,
            "summary": learning.summarize(runs, by="env_steps"),
            "comparison": learning.compare_arms(runs, by="env_steps"),
        }

    monkeypatch.setattr(learning, "run_learning_benchmark", fake_benchmark)
    arguments = ["benchmark-learning", "--env-steps", "5000", "--every-steps", "1000", "--parallel", "2"]
    arguments += ["--hyperparams", "a.json", "--compare", "b.json", "--seeds", "2", "--output", "out"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    plan = plans[0]
    assert (plan.env_steps, plan.every_env_steps, plan.minutes, plan.parallel, plan.threads) == (5000, 1000, None, 2, 1)
    assert plan.hyperparameters == {"algo": "dqn", "dueling": True} and plan.compare == {"learning_rate": 0.001}
    assert plan.systems == ("sb3_snake",) and plan.final_episodes == 200
    assert "4 runs of 5,000 env steps, a checkpoint every 1,000 env steps (arms A and B; seeds [0, 1], 2 at once)" in (
        result.output
    )
    assert "budget: 5,000 env steps, ... per run" in result.output and "B - A, seed by seed" in result.output
    result = runner.invoke(app, ["benchmark-learning", "--env-steps", "800", "--final-episodes", "0", "--threads", "3"])
    assert result.exit_code == 0, result.output
    assert (plans[1].every_env_steps, plans[1].final_episodes, plans[1].threads) == (80, 0, 3)
    assert plans[1].systems == ("sb3_snake", "plain_sb3", "sb3_ppo") and plans[1].parallel == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--minutes", "2", "--env-steps", "1000"], "give one budget: minutes (--minutes, --quick) or env steps"),
        (["--quick", "--env-steps", "1000"], "give one budget"),
        (["--env-steps", "1000", "--every", "10"], "--every is the interval of a budget of --minutes"),
        (["--every-steps", "100"], "--every-steps is the interval of a budget of --env-steps"),
        (["--env-steps", "100", "--every-steps", "200"], "--every-steps must be a whole number from 1 to --env-steps"),
        (["--compare", "b.json", "--baseline"], "a comparison (--compare) trains sb3_snake alone"),
        (["--compare", "bad.json"], "long_starts must be from 0 to 1, got 5"),
        (["--parallel", "0"], "Invalid value for '--parallel'"),
    ],
)
def test_benchmark_learning_refuses_a_research_loop_that_cannot_run_in_one_line(tmp_path, monkeypatch, args, message):
    from sb3_snake.benchmark import learning

    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.json").write_text('{"learning_rate": 0.001}')
    (tmp_path / "bad.json").write_text('{"long_starts": 5}')
    monkeypatch.setattr(learning, "run_learning_benchmark", lambda *a, **k: pytest.fail("a run started"))
    result = runner.invoke(app, ["benchmark-learning", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1 and message in result.output
