"""The scripts of ``scripts/`` run on today's package: each once, at tiny sizes, into a temporary folder."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def run_script(name: str, *arguments: str) -> subprocess.CompletedProcess:
    """``scripts/name`` with ``arguments`` in a fresh process that imports this checkout's package."""
    command = [sys.executable, str(SCRIPTS / name), *arguments]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def write_learning_run(path: Path, scores: list[float]) -> None:
    curve = [
        {"minutes": minute + 1.0, "env_steps": 1000 * (minute + 1), "mean_score": score}
        for minute, score in enumerate(scores)
    ]
    path.write_text(json.dumps({"runs": [{"curve": curve}]}))


def test_plot_paired_learning_curves_draws_every_arm(tmp_path):
    for seed in range(2):
        write_learning_run(tmp_path / f"learning_x-old-seed{seed}.json", [1.0, 2.0])
        write_learning_run(tmp_path / f"learning_x-new-seed{seed}.json", [2.0, 4.0])
    picture = tmp_path / "out" / "pair.png"
    arms = ["--arm", "old=learning_*-old-seed*.json", "--arm", "new=learning_*-new-seed*.json"]
    done = run_script("plot_paired_learning_curves.py", "--folder", str(tmp_path), *arms, "--output", str(picture))
    assert done.returncode == 0, done.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_plot_paired_learning_curves_draws_a_panel_against_env_steps(tmp_path):
    for arm_name, scores in (("old", [1.0, 2.0]), ("new", [2.0, 4.0])):
        write_learning_run(tmp_path / f"learning_x-{arm_name}.json", scores)
    picture = tmp_path / "pair.png"
    arms = ["--arm", "old=learning_*-old.json", "--arm", "new=learning_*-new.json"]
    done = run_script(
        "plot_paired_learning_curves.py", "--folder", str(tmp_path), *arms, "--output", str(picture), "--env-steps"
    )
    assert done.returncode == 0, done.stderr
    from PIL import Image

    assert Image.open(picture).size[0] > Image.open(picture).size[1] * 2  # two panels side by side


def test_plot_paired_learning_curves_refuses_an_arm_without_files(tmp_path):
    done = run_script(
        "plot_paired_learning_curves.py", "--folder", str(tmp_path), "--arm", "gone=nothing*.json", "--output", "x.png"
    )
    assert done.returncode == 2 and "no files in" in done.stderr and "gone" in done.stderr


def test_eager_step_rate_appends_one_line_per_run(tmp_path):
    output = tmp_path / "ab.jsonl"
    tiny = ["--threads", "1", "--n-envs", "4", "--board-size", "5", "--buffer-size", "200", "--fill-steps", "64"]
    tiny += ["--batch-size", "8", "--warmup-steps", "1", "--steps", "2", "--rounds", "2", "--shaping", "0", "1"]
    for label in ("before", "after"):
        done = run_script("eager_step_rate.py", "--label", label, "--output", str(output), *tiny)
        assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["version"] for line in lines] == ["before", "after"]
    for line in lines:
        assert set(line) == {"version", "shaping_0.0", "shaping_1.0"}
        assert len(line["shaping_1.0"]["rates"]) == 2 and line["shaping_1.0"]["median"] > 0


def test_pqn_curve_checkpoints_the_package_s_pqn(tmp_path):
    output = tmp_path / "arm.json"
    arguments = ["--board", "4", "--env-steps", "512", "--envs", "16", "--eval-every", "256", "--eval-games", "4"]
    done = run_script("pqn_curve.py", *arguments, "--kw", '{"n_steps": 8}', "--trained", "--out", str(output))
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert [row["env_steps"] for row in report["log"]] == [256, 512] and report["kwargs"]["n_steps"] == 8
    assert all(0 <= row["wins"] <= 1 and row["greedy"] >= 0 for row in report["log"])
    assert all(0 <= row["exploring_score"] <= 13 for row in report["log"])  # a 4x4 game's scores
    assert all(sum(row["ends"].values()) == 4 and row["ends"]["won"] / 4 == row["wins"] for row in report["log"])
    assert all(sum(row["trained"]["ends"].values()) == 4 for row in report["log"])  # the same games, trained weights


def test_pqn_speed_times_the_env_steps_after_its_warm_up():
    done = run_script("pqn_speed.py", "--board", "4", "--warm-up", "1", "--env-steps", "1", "--kw", '{"n_steps": 2}')
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout.splitlines()[-1])
    # One rollout of the 128 games of 2 moves each for the warm-up, and one for the timed steps.
    assert row["kw"] == {"n_steps": 2} and row["env_steps"] == 256 and row["env_steps_per_s"] > 0


def test_every_script_has_a_smoke_test_here():
    source = Path(__file__).read_text()
    run = re.compile(r'run_script\(\s*"([^"]+)"')
    tested = set(run.findall(source))
    untested = [path.name for path in sorted(SCRIPTS.glob("*.py")) if path.name not in tested]
    assert not untested, f"scripts without a smoke test in tests/meta/test_scripts.py: {untested}"


@pytest.mark.slow
def test_compile_child_runs_records_each_run(tmp_path):
    if shutil.which("sb3-snake") is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    output = tmp_path / "runs.json"
    train = [
        "--algo",
        "dqn",
        "--episodes",
        "1",
        "--device",
        "cpu",
        "--board-size",
        "5",
        "--n-envs",
        "2",
        "--learning-starts",
        "16",
    ]
    train += ["--batch-size", "8", "--no-compile", "--no-bf16", "--no-flash-attention", "--threads", "1"]
    train += ["--buffer-size", "500"]
    done = run_script("compile_child_runs.py", "--runs", "1", "--output", str(output), "--", *train)
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert [run["exit_code"] for run in report["runs"]] == [0], report["runs"]
    assert report["runs"][0]["compile_active"] is False and report["runs"][0]["left_running"] == []
    assert report["runs"][0]["stages"] == [] and report["runs"][0]["compile_lines"] == []


def test_benchmark_results_hold_results_and_no_scripts():
    programs = [p.relative_to(ROOT) for p in (ROOT / "benchmark_results").rglob("*") if p.suffix in (".py", ".diff")]
    assert not programs, f"scripts belong in scripts/, with a smoke test here: {programs}"
