"""benchmark-learning's bookkeeping: the clock that leaves saving out, checkpoint timing (by
seconds or env steps), the curve and time-to-score, the report's fields, the runs side by side and
the paired comparison of two arms; and, on a tiny budget, real runs of every system."""

import functools
import itertools
import json
from pathlib import Path

import pytest
from stable_baselines3 import DQN, PPO

from sb3_snake.benchmark.learning import (
    DEFAULT_SYSTEMS,
    SCORE_AT_SECONDS,
    SCORE_THRESHOLDS,
    SYSTEMS,
    Checkpoints,
    LearningPlan,
    RunFailed,
    RunSpec,
    Stopwatch,
    compile_cache_state,
    evaluate_checkpoints,
    format_summary,
    paired_differences,
    plot_learning_benchmark,
    plot_reports,
    report_files,
    run_in_process,
    run_learning_benchmark,
    run_system,
    score_at,
    spread,
    summarize,
    time_to_score,
    training_speed,
)
from sb3_snake.common.errors import UsageError


class FakeClock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeModel:
    num_timesteps = 0


def checkpoints_on(clock, every=10.0, budget=35.0, save_seconds=0.0):
    saved_files = []

    def save(model, path):
        saved_files.append(path)
        clock.now += save_seconds  # saving takes time the stopwatch must not count

    stopwatch = Stopwatch(clock.now, clock)
    callback = Checkpoints(stopwatch, every, budget, Path("ckpt"), save)
    callback.model = FakeModel()
    return callback, stopwatch, saved_files


def step(callback, clock, seconds, steps=1):
    clock.now += seconds
    callback.model.num_timesteps += steps
    callback.num_timesteps = callback.model.num_timesteps
    return callback._on_step()


def test_stopwatch_leaves_paused_time_out():
    clock = FakeClock(10.0)
    stopwatch = Stopwatch(10.0, clock)
    clock.now = 15.0
    with stopwatch.paused():
        clock.now = 45.0
    clock.now = 50.0
    assert stopwatch.elapsed() == pytest.approx(10.0)


def test_checkpoints_at_each_interval_and_a_last_one_at_the_budget():
    clock = FakeClock()
    callback, _, files = checkpoints_on(clock, every=10.0, budget=35.0)
    calls = 1
    while step(callback, clock, 4.0):  # counted 4, 8, ..., 36
        calls += 1
    # The last one stands for the budget and says when it was taken: the step that reached it ended at 36.
    assert [entry["seconds"] for entry in callback.saved] == pytest.approx([12.0, 20.0, 32.0, 36.0])
    assert [entry["due_seconds"] for entry in callback.saved] == pytest.approx([10.0, 20.0, 30.0, 35.0])
    assert calls == 9  # the step that reached 36 >= 35 stopped learning
    assert [entry["env_steps"] for entry in callback.saved] == [3, 5, 8, 9]
    assert [Path(p).name for p in files] == ["t0000.zip", "t0001.zip", "t0002.zip", "t0003.zip"]


def test_saving_is_not_counted_in_the_budget():
    clock = FakeClock()
    callback, stopwatch, _ = checkpoints_on(clock, every=10.0, budget=35.0, save_seconds=100.0)
    while step(callback, clock, 5.0):
        pass
    assert stopwatch.paused_seconds == pytest.approx(100.0 * len(callback.saved))
    assert [entry["seconds"] for entry in callback.saved] == pytest.approx([10.0, 20.0, 30.0, 35.0])


def test_a_long_step_skips_the_points_it_missed_instead_of_saving_twice():
    clock = FakeClock()
    callback, _, _ = checkpoints_on(clock, every=10.0, budget=100.0)
    step(callback, clock, 35.0)
    step(callback, clock, 3.0)  # 38: the 20 and 30 s points were missed; the next is 40
    step(callback, clock, 3.0)
    assert [entry["seconds"] for entry in callback.saved] == pytest.approx([35.0, 41.0])
    # The first stands for the latest point it passed (30 s), the second for its own (40 s).
    assert [entry["due_seconds"] for entry in callback.saved] == pytest.approx([30.0, 40.0])


def test_the_score_at_a_time_is_the_last_checkpoint_due_by_then_however_late_it_was_taken():
    curve = [
        {"seconds": 45.1, "due_seconds": 45.0, "mean_score": 12.0},
        {"seconds": 95.0, "due_seconds": 60.0, "mean_score": 21.0},  # taken late: a long step
        {"seconds": 96.0, "due_seconds": 90.0, "mean_score": 22.0},
    ]
    assert score_at(curve, 60)["mean_score"] == 21.0
    assert score_at(curve, 59.9)["mean_score"] == 12.0
    assert score_at(curve, 30) is None
    assert score_at(curve, 90)["mean_score"] == 22.0 and score_at(curve, 91) is None  # the run ended at 90 s
    assert score_at([], 60) is None
    # Curves written before checkpoints recorded their points: the time taken stands in.
    old = [{"seconds": 59.0, "mean_score": 3.0}, {"seconds": 60.02, "mean_score": 4.0}]
    assert score_at(old, 60)["mean_score"] == 3.0


def test_time_to_score_is_the_first_checkpoint_that_reaches_it():
    curve = [
        {"seconds": 15.0, "mean_score": 4.0},
        {"seconds": 30.0, "mean_score": 21.0},
        {"seconds": 45, "mean_score": 19},
    ]
    assert time_to_score(curve, 10) == 30.0
    assert time_to_score(curve, 20) == 30.0
    assert time_to_score(curve, 25) is None
    assert time_to_score([], 10) is None


def test_spread_counts_a_seed_that_never_got_there_as_the_latest():
    assert spread([30.0, 10.0, 20.0]) == {"median": 20.0, "min": 10.0, "max": 30.0, "reached": "3/3"}
    assert spread([30.0, None, 10.0]) == {"median": 30.0, "min": 10.0, "max": None, "reached": "2/3"}
    assert spread([None, None, 10.0]) == {"median": None, "min": 10.0, "max": None, "reached": "1/3"}


def fake_run(system, seed, scores):
    curve = [
        {
            "seconds": 15.0 * (i + 1) + 0.1,
            "due_seconds": 15.0 * (i + 1),
            "minutes": 0.25 * (i + 1),
            "mean_score": s,
            "win_rate": s / 100,
            "max_length": s + 3 + seed,
        }
        for i, s in enumerate(scores)
    ]
    return {"system": system, "seed": seed, "curve": curve, "env_steps": 1000 * (seed + 1)}


def test_summary_per_system_median_and_spread():
    runs = [
        fake_run("sb3_snake", 0, [5, 12, 22, 23]),
        fake_run("sb3_snake", 1, [11, 21, 26, 27]),
        fake_run("sb3_snake", 2, [3, 8, 15, 16]),
        fake_run("plain_sb3", 0, [0, 1, 2, 3]),
    ]
    summary = summarize(runs)
    ours = summary["sb3_snake"]
    assert ours["seconds_to_score"]["10"] == {"median": 30.1, "min": 15.1, "max": 45.1, "reached": "3/3"}
    assert ours["seconds_to_score"]["20"] == {"median": 45.1, "min": 30.1, "max": None, "reached": "2/3"}
    assert ours["seconds_to_score"]["25"] == {"median": None, "min": 45.1, "max": None, "reached": "1/3"}
    assert ours["final_mean_score"] == {"median": 23, "min": 16, "max": 27}
    assert ours["final_win_rate"] == {"median": 0.23, "min": 0.16, "max": 0.27} and ours["longest_snake"] == 31
    # Checkpoints due at 15, 30, 45 and 60 s, taken 0.1 s late: the one due at 60 s counts.
    assert ours["mean_score_at"]["60"] == {"median": 23, "min": 16, "max": 27, "latest_taken_seconds": 60.1}
    assert summarize([fake_run("sb3_snake", 0, [5, 12, 22])])["sb3_snake"]["mean_score_at"]["60"] is None
    assert summary["plain_sb3"]["seconds_to_score"]["10"]["reached"] == "0/1"
    assert set(summary["sb3_snake"]["seconds_to_score"]) == {str(t) for t in SCORE_THRESHOLDS}
    assert set(ours["mean_score_at"]) == {str(t) for t in SCORE_AT_SECONDS}
    table = format_summary({"summary": summary})
    assert "30s (15s-45s) 3/3" in table and "45s (30s--) 2/3" in table and "never 0/1" in table
    assert "23.00 (16.00-27.00)" in table and "at 60 s" in table
    assert "23.00 (16.00-27.00)         23%        31" in table and "win rate" in table
    assert "*" not in table  # taken 0.1 s late: on time


def test_the_summary_marks_a_score_at_a_time_whose_checkpoint_was_taken_late():
    """A compile of 20 s just before the checkpoint due at 60 s: it is taken at 78 s, and the table says so."""
    slow = fake_run("sb3_snake", 1, [11, 21, 26, 27])
    slow["curve"][3]["seconds"] = 78.0
    table = format_summary({"summary": summarize([fake_run("sb3_snake", 0, [5, 12, 22, 23]), slow])})
    assert "25.00 (23.00-27.00)*" in table
    assert "taken later" in table and "sb3_snake at 60 s: the last of them taken at 78 s" in table


def test_the_score_at_a_time_no_checkpoint_of_some_seed_was_due_by_is_not_given():
    late = fake_run("sb3_snake", 1, [11])
    late["curve"][0]["due_seconds"] = 75.0
    summary = summarize([fake_run("sb3_snake", 0, [5, 12, 22, 23]), late])
    assert summary["sb3_snake"]["mean_score_at"]["60"] is None
    assert "   -   " in format_summary({"summary": summary})


def test_plan_refuses_what_cannot_run():
    for changes, message in [
        ({"minutes": 0}, "--minutes"),
        ({"minutes": float("nan")}, "--minutes"),
        ({"minutes": float("inf")}, "--minutes"),
        ({"every_seconds": -1}, "--every"),
        ({"every_seconds": 1e-300}, "--every must be a number of seconds of at least 1, got 1e-300"),
        ({"seeds": ()}, "--seeds"),
        ({"seeds": tuple(range(1001))}, "--seeds must be at most 1000"),
        ({"hyperparameters": {"long_starts": 5}}, "long_starts must be"),
        ({"hyperparameters": {"board_size": 6}, "board_size": 8}, "board_size 8 and the hyperparameters' 6 differ"),
        ({"seeds": (4294967295, 4294967296)}, "seeds must be 0 to 4294967295, got 4294967295 to 4294967296"),
        ({"seeds": (-1,)}, "seeds must be 0 to"),
        ({"systems": ("sb3_snake", "ppo")}, "systems must be among"),
    ]:
        with pytest.raises(UsageError, match=message):
            LearningPlan(**changes)
    assert LearningPlan.quick().minutes == 2.0 and LearningPlan.quick(seeds=(4,)).seeds == (4,)


def test_the_report_records_every_run_its_curve_and_how_it_was_measured(tmp_path):
    plan = LearningPlan(minutes=1.0, every_seconds=20.0, seeds=(0, 1), hyperparameters={"algo": "dqn", "dueling": True})
    specs, caches = [], []

    def run(spec, cache_dir):
        specs.append(spec)
        caches.append(cache_dir)
        return {
            "system": spec.system,
            "seed": spec.seed,
            "env_steps": 500,
            "checkpoints": [{"seconds": 20.0 * k, "env_steps": 100 * k, "path": f"t{k}.zip"} for k in (1, 2, 3)],
        }

    def evaluate_run(run, episodes):
        bonus = 10 if run["system"] == "sb3_snake" else 0
        return [
            {"seconds": c["seconds"], "minutes": c["seconds"] / 60, "mean_score": bonus + c["seconds"] / 5}
            for c in run["checkpoints"]
        ]

    report = run_learning_benchmark(plan, tmp_path, run=run, evaluate_run=evaluate_run, calibrate=lambda s, b: 250.0)
    assert [(spec.system, spec.seed) for spec in specs] == [
        ("sb3_snake", 0),
        ("plain_sb3", 0),
        ("sb3_ppo", 0),
        ("sb3_snake", 1),
        ("plain_sb3", 1),
        ("sb3_ppo", 1),
    ]
    assert report["plain_sb3_total_timesteps"] == 250 * 60
    assert all(spec.total_timesteps == 15_000 for spec in specs if spec.system == "plain_sb3")
    assert all(spec.total_timesteps is None for spec in specs if spec.system == "sb3_snake")
    assert all(spec.hyperparameters == {"algo": "dqn", "dueling": True} for spec in specs if spec.system == "sb3_snake")
    assert all(
        spec.hyperparameters == {} and spec.total_timesteps is None for spec in specs if spec.system == "sb3_ppo"
    )
    assert all(spec.hyperparameters == {} for spec in specs if spec.system == "plain_sb3")
    assert len(set(caches)) == 6 and all(Path(c).is_dir() and Path(c).parent == tmp_path for c in caches)
    assert {run["compile_cache"] for run in report["runs"]} == {"cold"}
    ours = report["runs"][0]
    assert ours["seconds_to_score"] == {"10": 20.0, "20": 60.0, "25": None, "30": None}
    assert ours["mean_score_at"] == {"60": 22.0} and report["runs"][1]["mean_score_at"] == {"60": 12.0}
    assert report["summary"]["sb3_snake"]["seconds_to_score"]["20"]["median"] == 60.0
    assert report["summary"]["plain_sb3"]["seconds_to_score"]["10"]["median"] == 60.0
    assert {"cpu", "torch", "stable_baselines3"} <= set(report["system"])
    assert report["plan"]["minutes"] == 1.0 and "compile_cache" in report["method"]
    json.dumps(report)  # JSON-ready
    picture = plot_learning_benchmark(report, tmp_path / "curve.png")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_the_baseline_there_is_no_calibration_and_a_warm_cache_is_the_users(tmp_path, monkeypatch):
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    assert compile_cache_state(None) == "cold"
    cache.mkdir(exist_ok=True)  # importing torch's inductor may create the folder, empty
    (cache / "entry").write_text("compiled")
    assert compile_cache_state(None) == "warm"

    def calibrate(seconds, board):
        raise AssertionError("no baseline, no calibration")

    def run(spec, cache_dir):
        assert cache_dir is None
        return {"system": spec.system, "seed": spec.seed, "env_steps": 1, "checkpoints": []}

    plan = LearningPlan(minutes=1.0, seeds=(0,), systems=("sb3_snake",), cold_cache=False)
    report = run_learning_benchmark(plan, tmp_path, run=run, evaluate_run=lambda r, e: [], calibrate=calibrate)
    assert report["runs"][0]["compile_cache"] == "warm" and report["plain_sb3_total_timesteps"] is None


def test_a_run_that_fails_is_listed_and_the_others_are_kept(tmp_path):
    plan = LearningPlan(minutes=1.0, every_seconds=20.0, seeds=(0, 1, 2), systems=("sb3_snake",))
    crash = "the sb3_snake run of seed 1 failed (exit code -11: SIGSEGV); its output is in x/train.log"
    lines = []

    def run(spec, cache_dir):
        if spec.seed == 1:
            raise RunFailed(crash)
        checkpoint = {"seconds": 60.0, "env_steps": 5, "path": "a.zip"}
        return {"system": spec.system, "seed": spec.seed, "env_steps": 5, "checkpoints": [checkpoint]}

    def evaluate_run(run, episodes):
        return [{"seconds": 60.0, "minutes": 1.0, "mean_score": 10.0 + run["seed"]}]

    report = run_learning_benchmark(plan, tmp_path, progress=lines.append, run=run, evaluate_run=evaluate_run)
    assert [run["seed"] for run in report["runs"]] == [0, 2]  # seed 2 still ran, and seed 0 was kept
    assert report["failed_runs"] == [{"system": "sb3_snake", "seed": 1, "error": crash, "compile_cache": "cold"}]
    assert report["summary"]["sb3_snake"]["seeds"] == [0, 2]
    assert report["summary"]["sb3_snake"]["final_mean_score"] == {"median": 11.0, "min": 10.0, "max": 12.0}
    assert f"sb3_snake seed 1: {crash}; the other runs go on" in lines
    assert format_summary(report).endswith(f"failed, not in the figures above: {crash}")
    json.dumps(report)


def test_a_run_whose_checkpoints_fail_to_play_is_listed_and_the_others_are_kept(tmp_path):
    plan = LearningPlan(minutes=1.0, every_seconds=20.0, seeds=(0, 1), systems=("sb3_snake",))

    def run(spec, cache_dir):
        checkpoint = {"seconds": 60.0, "env_steps": 5, "path": f"seed{spec.seed}.zip"}
        return {"system": spec.system, "seed": spec.seed, "env_steps": 5, "checkpoints": [checkpoint]}

    def evaluate_run(run, episodes):
        if run["seed"] == 0:
            raise ValueError("not a zip file")
        return [{"seconds": 60.0, "minutes": 1.0, "mean_score": 12.0}]

    report = run_learning_benchmark(plan, tmp_path, run=run, evaluate_run=evaluate_run)
    assert [run["seed"] for run in report["runs"]] == [1]
    assert report["failed_runs"] == [
        {
            "system": "sb3_snake",
            "seed": 0,
            "error": "playing the checkpoints of seed 0 failed: ValueError: not a zip file",
            "compile_cache": "cold",
        }
    ]
    assert report["summary"]["sb3_snake"]["seeds"] == [1]


# --- real runs on a tiny budget -----------------------------------------------------------------


@pytest.mark.slow
def test_every_system_trains_saves_on_the_clock_and_its_checkpoints_play(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .env here: sb3_snake runs on the built-in defaults
    hyperparameters = {"algo": "dqn", "n_envs": 4, "learning_starts": 50, "batch_size": 32}
    hyperparameters |= {"embed_dim": 8, "head_view_dim": 8}
    runs = []
    for system in SYSTEMS:
        own = hyperparameters if system == "sb3_snake" else {}
        spec = RunSpec(system, 0, 60.0, 15.0, 6, str(tmp_path / system), None, own, total_timesteps=10**6)
        # A clock that moves half a second each time it is read: the checkpoints fall at the
        # same steps on a fast machine and a slow one (the run's real time limit is 2 minutes).
        clock = functools.partial(next, map((0.5).__mul__, itertools.count(1)))
        runs.append(run_system(spec, Stopwatch(0.0, clock=clock)))
    for run in runs:
        seconds = [c["seconds"] for c in run["checkpoints"]]
        assert len(seconds) >= 4 and seconds == sorted(seconds) and seconds[-1] == 60.0
        assert all(Path(c["path"]).is_file() for c in run["checkpoints"])
        assert run["env_steps"] > 0 and (tmp_path / run["system"] / "train.log").is_file()
        curve = evaluate_checkpoints(run, episodes=3)
        assert [p["seconds"] for p in curve] == seconds
        assert [p["due_seconds"] for p in curve] == [c["due_seconds"] for c in run["checkpoints"]]
        assert all(p["due_seconds"] <= p["seconds"] for p in curve)
        assert all(p["mean_score"] >= 0 and p["max_score"] >= p["median_score"] for p in curve)
        assert all(sum(p["ends"].values()) == 3 for p in curve)  # how each of the 3 games ended
        assert all(p["win_rate"] == p["ends"]["won"] / 3 and p["max_length"] >= p["mean_length"] for p in curve)
        # The exploring games' mean, as learning left it at each checkpoint, once a game has ended: 6x6 scores.
        assert [p["exploring_score"] for p in curve] == [c["exploring_score"] for c in run["checkpoints"]]
        assert curve[-1]["exploring_score"] is not None and 0 <= curve[-1]["exploring_score"] <= 33
    assert runs[0]["batch_size"] == 32  # the file's batch size reached the run
    assert isinstance(DQN.load(runs[1]["checkpoints"][0]["path"]), DQN)
    assert isinstance(PPO.load(runs[2]["checkpoints"][0]["path"]), PPO)


@pytest.mark.slow
def test_a_run_in_its_own_process_with_a_cold_cache(tmp_path):
    spec = RunSpec("plain_sb3", 0, 30.0, 0.1, 6, str(tmp_path / "plain"), total_timesteps=200)
    result = run_in_process(spec, str(tmp_path / "cache"))
    assert (tmp_path / "cache" / "inductor").is_dir()  # torch made the run's own compile cache
    assert result["system"] == "plain_sb3" and result["checkpoints"]
    assert result["checkpoints"][-1]["env_steps"] == 200  # total_timesteps ended it, with a last checkpoint
    # The clock started before the process did: its start and imports are counted.
    assert 0 < result["startup_seconds"] <= result["checkpoints"][0]["seconds"]


@pytest.mark.slow
def test_a_run_whose_process_fails_says_how_and_where_its_output_is(tmp_path):
    spec = RunSpec("no_such_system", 0, 30.0, 10.0, 6, str(tmp_path / "run"))
    with pytest.raises(RunFailed, match=r"the no_such_system run of seed 0 failed \(exit code 1\); its output is in"):
        run_in_process(spec, None)


def test_the_seed_range_is_refused_before_any_run_starts(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import sb3_snake.benchmark.learning.plan as plan_module
    from sb3_snake.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plan_module, "run_in_process", lambda *a: pytest.fail("a run started"))
    result = CliRunner().invoke(app, ["benchmark-learning", "--first-seed", "4294967295", "--seeds", "2"])
    assert result.exit_code == 2 and "seeds must be 0 to 4294967295" in result.output


def test_a_tiny_checkpoint_interval_takes_one_step_not_forever():
    """``--every 1e-300`` spun in the loop that stepped to the latest point passed: adding so small
    an interval to a time does not move it. A point is counted now, whatever the interval."""
    import threading

    clock = FakeClock()
    callback, _, files = checkpoints_on(clock, every=1e-300, budget=35.0)
    stepped = threading.Thread(target=step, args=(callback, clock, 1.0), daemon=True)
    stepped.start()
    stepped.join(timeout=30)
    assert not stepped.is_alive(), "one step of the checkpoint callback did not end"
    assert len(files) == 1 and callback.saved[0]["due_seconds"] == pytest.approx(1.0)


@pytest.mark.parametrize("every", [0.1, 0.3, 1 / 3, 7.0])
def test_each_checkpoint_is_due_at_the_latest_point_passed(every):
    """Counting the points gives what stepping through them did, rounding included: never a
    point after the time it is taken, never one point short."""
    clock = FakeClock()
    callback, _, _ = checkpoints_on(clock, every=every, budget=1e9)
    for seconds in (0.05, 0.3, 0.31, 0.9, 7.0, 7.0, 70.0, 0.01):
        step(callback, clock, seconds)
    for checkpoint in callback.saved:
        points = round(checkpoint["due_seconds"] / every)
        assert checkpoint["due_seconds"] <= checkpoint["seconds"] < (points + 1) * every
    assert len({c["due_seconds"] for c in callback.saved}) == len(callback.saved)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "1e-300"], "--every must be a number of seconds of at least 1, got 1e-300"),
        (["--seeds", "1000000000"], "--seeds must be at most 1000 .*, got 1,000,000,000"),
        (["--hyperparams", "long.json"], "long_starts must be from 0 to 1, got 5"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_run_starts(tmp_path, monkeypatch, args, message):
    """A tiny --every looped forever, a billion seeds were made into a tuple (MemoryError), and a
    hyperparameter file's value was checked only by the run's process (a traceback, exit 1)."""
    import re

    from typer.testing import CliRunner

    import sb3_snake.benchmark.learning.plan as plan_module
    from sb3_snake.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "long.json").write_text('{"long_starts": 5}')
    monkeypatch.setattr(plan_module, "run_in_process", lambda *a: pytest.fail("a run started"))
    monkeypatch.setattr(plan_module, "calibrate_plain_sb3", lambda *a: pytest.fail("the calibration started"))
    quick = ["--minutes", "0.05", "--seeds", "1", "--no-baseline", "--no-ppo", "--episodes", "1"]
    result = CliRunner().invoke(app, ["benchmark-learning", *quick, *args])
    assert result.exit_code == 2, result.output
    assert re.fullmatch(f"error: [^\n]*{message}[^\n]*\n", result.output), result.output


def test_the_hyperparameters_board_is_every_systems_board(tmp_path):
    """``{"board_size": 6}`` trained sb3_snake on 10x10 without a word; it is the plan's board now,
    so that the systems still play the same game."""
    plan = LearningPlan(minutes=1.0, every_seconds=20.0, seeds=(0,), hyperparameters={"board_size": 6})
    assert plan.board_size == 6 and LearningPlan().board_size == 10
    assert LearningPlan.quick(hyperparameters={"board_size": 6}).board_size == 6
    boards = []

    def run(spec, cache_dir):
        boards.append(spec.board_size)
        return {"system": spec.system, "seed": spec.seed, "env_steps": 1, "checkpoints": []}

    report = run_learning_benchmark(plan, tmp_path, run=run, evaluate_run=lambda r, e: [], calibrate=lambda s, b: 1.0)
    assert boards == [6, 6, 6] and report["plan"]["board_size"] == 6

    from sb3_snake.benchmark.learning.runs import sb3_snake_config

    assert sb3_snake_config(plan.spec("sb3_snake", 0, tmp_path)).board_size == 6


def test_ctrl_c_in_a_run_exits_its_process_quietly(tmp_path, monkeypatch):
    """Ctrl-C reaches the run's process too: it exits 130 without a traceback of its own."""
    import sb3_snake.benchmark.learning.runs as runs

    def interrupted(spec, stopwatch):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "run_system", interrupted)
    spec = RunSpec("plain_sb3", 0, 30.0, 0.1, 6, str(tmp_path / "plain"))
    with pytest.raises(SystemExit) as stopped:
        runs._run_and_write(runs.asdict(spec), 0.0, str(tmp_path / "run.json"))
    assert stopped.value.code == 130


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [1, 2])
def test_sigterm_to_the_benchmark_stops_its_run_and_exits_143(tmp_path, parallel):
    """Two runs side by side, each waited on by a thread of its own, are both stopped too."""
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-c", "from sb3_snake.cli import main; main()", "benchmark-learning", "--quick"]
    command += ["--no-baseline", "--no-ppo", "--seeds", str(parallel), "--parallel", str(parallel)]
    command += ["--minutes", "1", "--output", str(tmp_path / "out")]
    parent = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, children = time.monotonic() + 120, []
        while time.monotonic() < deadline and len(children) < parallel:
            time.sleep(0.5)
            listed = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout
            children = [int(pid) for pid in listed.split()]
        assert len(children) >= parallel, "the runs' processes never started"
        # A run opens its log once it has imported everything and starts to train.
        while time.monotonic() < deadline and len(list((tmp_path / "runs").rglob("train.log"))) < parallel:
            time.sleep(0.1)
        assert len(list((tmp_path / "runs").rglob("train.log"))) == parallel, "the runs never started to train"
        parent.send_signal(signal.SIGTERM)
        output, _ = parent.communicate(timeout=60)
    finally:
        parent.kill()
    assert parent.returncode == 143, output
    assert "Traceback" not in output and "stopped: no results written" in output
    deadline = time.monotonic() + 30  # the parent stops its runs before it exits: a process may take a moment to go
    while (alive := [pid for pid in children if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"runs left training after the benchmark stopped: {alive}"
    assert not list((tmp_path / "out").glob("learning_*.json"))


def _running(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"


# --- the research loop: a budget of env steps, runs side by side, two arms compared -------------


def test_checkpoints_by_env_steps_fall_due_at_each_interval_whatever_the_clock_says():
    """16 games a step: the checkpoints due at 500, 1,000 and 1,500 env steps are taken at the
    first step past each, the last at the budget, however long the steps take."""
    clock = FakeClock()
    saved_files = []
    callback = Checkpoints(
        Stopwatch(clock.now, clock), 500, 2000, Path("ckpt"), lambda m, p: saved_files.append(p), by="env_steps"
    )
    callback.model = FakeModel()
    calls = 1
    while step(callback, clock, seconds=1000.0 * calls, steps=16):  # the clock jumps far past any time budget
        calls += 1
    assert [entry["due_env_steps"] for entry in callback.saved] == [500, 1000, 1500, 2000]
    assert [entry["env_steps"] for entry in callback.saved] == [512, 1008, 1504, 2000]
    assert calls == 125 and len(saved_files) == 4  # the step that reached 2,000 stopped learning
    assert all("due_seconds" not in entry and entry["seconds"] > 0 for entry in callback.saved)


def test_a_budget_of_env_steps_is_one_of_two_and_refuses_what_cannot_run():
    for changes, message in [
        ({"minutes": 5.0, "env_steps": 1000}, "give one budget: minutes .* or env steps .*, not both"),
        ({"env_steps": 1000, "every_seconds": 10.0}, "--every is the interval of a budget of --minutes"),
        ({"every_env_steps": 100}, "--every-steps is the interval of a budget of --env-steps"),
        ({"env_steps": 0}, "--env-steps must be a whole number of at least 1, got 0"),
        ({"env_steps": 1000.5}, "--env-steps must be a whole number"),
        ({"env_steps": 1000, "every_env_steps": 2000}, r"--every-steps must be a whole number from 1 to --env-steps"),
        ({"env_steps": 10**6, "every_env_steps": 10}, "more than 1000 checkpoints .* give at least 1,000"),
        ({"final_episodes": -1}, "--final-episodes must be a whole number of at least 0"),
        ({"parallel": 0}, "--parallel must be at least 1, got 0"),
        ({"threads": 0}, "--threads must be at least 1, got 0"),
        ({"compare": {}, "systems": ("sb3_snake", "plain_sb3")}, "a comparison .* trains sb3_snake alone"),
        ({"compare": {"long_starts": 5}}, "long_starts must be"),
        ({"compare": {"board_size": 6}, "hyperparameters": {"board_size": 8}}, "hyperparameters' board_size 8 .* 6"),
    ]:
        with pytest.raises(UsageError, match=message):
            LearningPlan(**changes)
    with pytest.raises(UsageError, match="not both"):
        LearningPlan.quick(env_steps=1000)


def test_a_plan_resolves_what_was_left_to_it():
    default = LearningPlan()
    assert (default.minutes, default.every_seconds, default.env_steps, default.every_env_steps) == (
        15.0,
        15.0,
        None,
        None,
    )
    assert (default.final_episodes, default.threads, default.systems, default.budget_unit) == (
        0,
        None,
        DEFAULT_SYSTEMS,
        "seconds",
    )
    assert (default.budget, default.every, default.budget_text) == (900.0, 15.0, "15 min")
    by_steps = LearningPlan(env_steps=25_000, systems=("sb3_snake",))
    assert (by_steps.minutes, by_steps.every_seconds, by_steps.every_env_steps) == (None, None, 2500)
    assert (by_steps.budget_unit, by_steps.budget, by_steps.every, by_steps.final_episodes) == (
        "env_steps",
        25_000,
        2500,
        200,
    )
    assert by_steps.budget_text == "25,000 env steps" and by_steps.checkpoints_text.endswith("every 2,500 env steps")
    compared = LearningPlan(minutes=2.0, compare={"board_size": 6}, parallel=2)
    assert (compared.systems, compared.final_episodes, compared.threads, compared.board_size) == (
        ("sb3_snake",),
        200,
        1,
        6,
    )
    assert LearningPlan(parallel=2, threads=2, final_episodes=0).threads == 2
    assert LearningPlan(env_steps=1000, final_episodes=0).final_episodes == 0


def test_paired_differences_are_b_minus_a_seed_by_seed_at_each_checkpoint():
    def curve(*points):
        return [
            {"env_steps": due + 8, "due_env_steps": due, "mean_score": score, "win_rate": wins}
            for due, score, wins in points
        ]

    pairs = {
        0: (curve((500, 2.0, 0.0), (1000, 10.0, 0.1)), curve((500, 3.0, 0.0), (1000, 12.5, 0.3))),
        1: (curve((500, 4.0, 0.0), (1000, 11.0, 0.2)), curve((500, 3.0, 0.0), (1000, 11.0, 0.2))),
        # Seed 2's arm B never reached 1,000 env steps: it counts at 500 only.
        2: (curve((500, 1.0, 0.0), (1000, 9.0, 0.0)), curve((500, 1.5, 0.25))),
    }
    first, second = paired_differences(pairs)
    assert first["env_steps"] == 500 and first["seeds"] == [0, 1, 2]
    assert first["mean_score"] == {
        "per_seed": [1.0, -1.0, 0.5],
        "mean": pytest.approx(0.5 / 3),
        "min": -1.0,
        "max": 1.0,
    }
    assert first["win_rate"] == {"per_seed": [0.0, 0.0, 0.25], "mean": pytest.approx(0.25 / 3), "min": 0.0, "max": 0.25}
    assert second["env_steps"] == 1000 and second["seeds"] == [0, 1]
    assert second["mean_score"] == {"per_seed": [2.5, 0.0], "mean": 1.25, "min": 0.0, "max": 2.5}
    assert second["win_rate"]["per_seed"] == pytest.approx([0.2, 0.0]) and second["win_rate"]["max"] == pytest.approx(
        0.2
    )
    # Matched by seconds, curves that record no due point match by the time taken.
    by_time = {0: ([{"seconds": 30.0, "mean_score": 1.0}], [{"seconds": 30.0, "mean_score": 4.0, "win_rate": 0.5}])}
    assert paired_differences(by_time, by="seconds") == [
        {
            "seconds": 30.0,
            "seeds": [0],
            "mean_score": {"per_seed": [3.0], "mean": 3.0, "min": 3.0, "max": 3.0},
            "win_rate": {"per_seed": [0.5], "mean": 0.5, "min": 0.5, "max": 0.5},
        }
    ]
    assert paired_differences({}) == []


def fake_steps_run(spec, cache_dir):
    """A run of ``spec`` on a budget of env steps: a checkpoint at each point, 16 games a step."""
    points = [*range(int(spec.every), int(spec.budget), int(spec.every)), int(spec.budget)]
    checkpoints = [
        {
            "seconds": 2.0 * due / spec.every,
            "env_steps": due + 8,
            "due_env_steps": due,
            "path": f"{spec.seed}-{due}.zip",
        }
        for due in points
    ]
    return {"system": spec.system, "seed": spec.seed, "env_steps": points[-1] + 8, "checkpoints": checkpoints}


def test_a_comparison_runs_both_arms_in_turn_and_reports_b_minus_a_seed_by_seed(tmp_path):
    plan = LearningPlan(
        env_steps=1000,
        every_env_steps=500,
        seeds=(3, 4),
        hyperparameters={"algo": "dqn", "dueling": True},
        compare={"learning_rate": 1e-3},
        episodes=5,
    )
    specs, evaluated = [], []

    def run(spec, cache_dir):
        specs.append(spec)
        return fake_steps_run(spec, cache_dir)

    def evaluate_run(run, episodes):
        evaluated.append((run["arm"], run["seed"], len(run["checkpoints"]), episodes))
        bonus = 1.0 if run["arm"] == "B" else 0.0
        return [
            {
                "seconds": c["seconds"],
                "minutes": c["seconds"] / 60,
                "env_steps": c["env_steps"],
                "due_env_steps": c["due_env_steps"],
                "mean_score": c["due_env_steps"] / 100 + bonus * (run["seed"] - 2) + (episodes == 200),
                "win_rate": 0.1 * bonus,
            }
            for c in run["checkpoints"]
        ]

    report = run_learning_benchmark(plan, tmp_path, run=run, evaluate_run=evaluate_run)
    assert [(spec.seed, spec.hyperparameters) for spec in specs] == [
        (3, {"algo": "dqn", "dueling": True}),
        (3, {"learning_rate": 1e-3}),
        (4, {"algo": "dqn", "dueling": True}),
        (4, {"learning_rate": 1e-3}),
    ]
    assert all(spec.system == "sb3_snake" and spec.budget_unit == "env_steps" for spec in specs)
    assert all((spec.budget, spec.every, spec.threads) == (1000, 500, None) for spec in specs)
    assert [(run["arm"], run["seed"]) for run in report["runs"]] == [("A", 3), ("B", 3), ("A", 4), ("B", 4)]
    # Every checkpoint with plan.episodes games, then the last one alone with the final's 200.
    assert evaluated[:2] == [("A", 3, 2, 5), ("A", 3, 1, 200)]
    assert report["runs"][1]["final"] == {"episodes": 200, **report["runs"][1]["curve"][-1], "mean_score": 12.0}
    assert report["budget"] == {
        "unit": "env_steps",
        "total": 1000,
        "every": 500,
        "text": "1,000 env steps, a checkpoint every 500 env steps",
    }
    assert set(report["summary"]) == {"A", "B"} and "env_steps_to_score" in report["summary"]["A"]
    assert report["summary"]["A"]["env_steps_to_score"]["10"]["median"] == 1008
    assert report["summary"]["B"]["final_evaluation"]["mean_score"] == {"median": 12.5, "min": 12.0, "max": 13.0}
    comparison = report["comparison"]
    assert comparison["by"] == "env_steps" and comparison["seeds"] == [3, 4]
    assert [point["env_steps"] for point in comparison["checkpoints"]] == [500, 1000]
    assert comparison["checkpoints"][0]["mean_score"] == {"per_seed": [1.0, 2.0], "mean": 1.5, "min": 1.0, "max": 2.0}
    assert comparison["checkpoints"][1]["win_rate"]["mean"] == pytest.approx(0.1)
    assert comparison["final"]["episodes"] == 200 and comparison["final"]["mean_score"]["per_seed"] == [1.0, 2.0]
    assert report["plan"]["compare"] == {"learning_rate": 1e-3} and "comparison" in report["method"]
    json.dumps(report)
    table = format_summary(report)
    assert table.startswith("budget: 1,000 env steps, a checkpoint every 500 env steps per run\n")
    assert "median env steps to a greedy mean" in table and "at 60 s" not in table
    assert "1,008 (1,008-1,008) 2/2" in table  # env steps to a greedy mean of 10, each seed's
    assert "final evaluation of B (200 greedy games of the last checkpoint; seeds: 2)" in table
    assert "B - A, seed by seed (seeds 3, 4" in table
    assert "\n             500   +1.50 (+1.00 to +2.00)             +10.0% (+10.0% to +10.0%)\n" in table
    assert "\nfinal, 200 games   +1.50 (+1.00 to +2.00)" in table
    picture = plot_learning_benchmark(report, tmp_path / "curve.png")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_runs_side_by_side_keep_the_order_of_the_plan_and_at_most_k_run_at_once(tmp_path):
    """Seeds 0 and 1 each wait until the other has started, which only runs side by side allow
    (so two are running at once however the threads are scheduled); the report still lists the
    runs in the plan's order."""
    import threading

    plan = LearningPlan(env_steps=1000, seeds=(0, 1, 2, 3), systems=("sb3_snake",), parallel=2, final_episodes=0)
    lock, running, most = threading.Lock(), [0], [0]
    first_two = threading.Barrier(2, timeout=60)

    def run(spec, cache_dir):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if spec.seed in (0, 1):
            first_two.wait()  # a BrokenBarrierError after 60 s: seeds 0 and 1 never ran side by side
        with lock:
            running[0] -= 1
        if spec.seed == 2:
            raise RunFailed("the sb3_snake run of seed 2 failed (exit code 1)")
        return fake_steps_run(spec, cache_dir)

    lines = []
    report = run_learning_benchmark(plan, tmp_path, progress=lines.append, run=run, evaluate_run=lambda r, e: [])
    assert [run["seed"] for run in report["runs"]] == [0, 1, 3] and most[0] == 2
    assert [failure["seed"] for failure in report["failed_runs"]] == [2]
    assert "1 torch thread(s) each" in report["method"]["parallel"]
    assert sum(line.startswith("sb3_snake seed") and "training for 1,000 env steps" in line for line in lines) == 4


def test_an_interrupt_stops_the_runs_going_and_starts_no_other():
    import threading

    from sb3_snake.benchmark.learning import run_in_turn

    stopped, third_started = threading.Event(), []

    def waits_until_stopped():
        assert stopped.wait(timeout=60), "the run going was never stopped"
        return "stopped"

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_in_turn([waits_until_stopped, interrupted, lambda: third_started.append(1)], 2, stop=stopped.set)
    assert stopped.is_set() and not third_started
    assert run_in_turn([lambda: 1, lambda: 2, lambda: 3], 1, stop=stopped.set) == [1, 2, 3]


@pytest.mark.slow
def test_plain_sb3_ppo_and_pqn_train_to_a_budget_of_env_steps(tmp_path):
    # PQN moves 128 games at once: its move past 900 env steps is also past the budget, one checkpoint
    due = {"plain_sb3": [300, 600, 900, 1000], "sb3_ppo": [300, 600, 900, 1000], "pqn": [300, 600, 1000]}
    for system in ("plain_sb3", "sb3_ppo", "pqn"):
        directory = str(tmp_path / system)
        spec = RunSpec(system, 0, 1000, 300, 5, directory, total_timesteps=1000, budget_unit="env_steps", threads=1)
        run = run_system(spec, Stopwatch(0.0, clock=functools.partial(next, itertools.count(1))))
        assert [c["due_env_steps"] for c in run["checkpoints"]] == due[system]
        assert all(c["env_steps"] >= c["due_env_steps"] for c in run["checkpoints"]) and run["threads"] == 1
        games = {"plain_sb3": 1, "sb3_ppo": 64, "pqn": 128}[system]  # the env steps of one move of every game
        assert run["checkpoints"][-1]["env_steps"] == run["env_steps"] < 1000 + games
        assert 0 <= run["checkpoints"][-1]["exploring_score"] <= 22  # 5x5 games have ended while learning


@pytest.mark.slow
def test_runs_side_by_side_learn_exactly_what_they_learn_one_after_another(tmp_path, monkeypatch):
    """With compile and every measured setting off and one thread, a seed's run is the same
    whether it ran alone or beside another: its checkpoints' env steps and greedy scores."""
    from sb3_snake.acceleration.optimizations import torch_threads

    monkeypatch.chdir(tmp_path)
    env_file = tmp_path / "settings.env"
    env_file.write_text("USE_TORCH_COMPILE=false\nUSE_BF16=false\nUSE_FLASH_ATTENTION=false\nTORCH_NUM_THREADS=1\n")
    hyperparameters = {"algo": "dqn", "n_envs": 4, "learning_starts": 50, "batch_size": 32}
    hyperparameters |= {"embed_dim": 8, "head_view_dim": 8}
    results = {}
    for parallel in (1, 2):
        plan = LearningPlan(
            env_steps=1000,
            every_env_steps=500,
            seeds=(0, 1),
            episodes=2,
            final_episodes=3,
            systems=("sb3_snake",),
            board_size=5,
            env_file=str(env_file),
            hyperparameters=hyperparameters,
            parallel=parallel,
            threads=1,
        )
        (tmp_path / str(parallel)).mkdir()
        with torch_threads(1):  # the evaluation's, the same for both
            report = run_learning_benchmark(plan, tmp_path / str(parallel))
        assert not report["failed_runs"] and all(run["threads"] == 1 for run in report["runs"])
        results[parallel] = [
            (
                run["seed"],
                [(p["env_steps"], p["due_env_steps"], p["mean_score"], p["win_rate"]) for p in run["curve"]],
                run["final"]["mean_score"],
            )
            for run in report["runs"]
        ]
    assert [seed for seed, _, _ in results[1]] == [0, 1]
    assert [len(curve) for _, curve, _ in results[1]] == [2, 2]
    assert results[2] == results[1]


# --- the speed, the exploring games, and reports drawn together (sb3-snake plot FILE...) ---------


def test_the_speed_is_the_env_steps_per_second_from_the_first_checkpoint_to_the_last():
    curve = [
        {"seconds": 30.0, "env_steps": 1000},
        {"seconds": 60.0, "env_steps": 4000},
        {"seconds": 90.0, "env_steps": 7000},
    ]
    assert training_speed(curve) == 100.0  # the 30 s of start-up and their 1,000 env steps left out
    assert training_speed(curve[:1]) is None and training_speed([]) is None
    runs = [fake_run("sb3_snake", seed, [5, 12, 22]) for seed in (0, 1)]
    for run, rate in zip(runs, (100, 300), strict=True):
        for point in run["curve"]:
            point["env_steps"] = rate * point["seconds"]
    summary = summarize(runs)
    assert summary["sb3_snake"]["env_steps_per_second"] == pytest.approx({"median": 200, "min": 100, "max": 300})
    table = format_summary({"summary": summary})
    assert "speed of sb3_snake from its first checkpoint to its last: 200 env steps/s (100-300)" in table
    assert "env_steps_per_second" not in summarize([fake_run("sb3_snake", 0, [5])])["sb3_snake"]


def test_each_checkpoint_records_the_mean_score_of_the_last_exploring_games_from_standard_starts():
    import numpy as np

    clock = FakeClock()
    callback, _, _ = checkpoints_on(clock, every=10.0, budget=35.0)

    def finish(*games):
        """``games`` (score, long start) end in this step; one more env's game goes on (score 99)."""
        infos = [{"score": score, "long_start": long} for score, long in games] + [{"score": 99}]
        callback.locals = {"dones": np.array([True] * len(games) + [False]), "infos": infos}

    step(callback, clock, 10.0)  # a checkpoint before any game ended
    finish((4, False), (30, True))  # a long start's score says little of the standard game
    step(callback, clock, 10.0)
    finish(*[(score, False) for score in range(200)])  # of more than 100 games, the last 100 count
    step(callback, clock, 10.0)
    assert [c["exploring_score"] for c in callback.saved] == [None, 4.0, 149.5]


def learning_report(runs, cpu="AMD EPYC", episodes=100):
    """A report shaped like benchmark-learning's files (benchmark_results/**/learning_*.json),
    cut to what a picture reads: ``runs`` are (system, arm or None, seed, greedy scores a minute apart)."""
    return {
        "benchmark": "learning",
        "system": {"cpu": cpu, "cpu_cores": 2, "torch": "2.13.0+cpu", "cpu_id": None},
        "plan": {"minutes": 3.0, "every_seconds": 60.0, "seeds": [0], "episodes": episodes},
        "runs": [
            {
                "system": system,
                **({"arm": arm} if arm else {}),
                "seed": seed,
                "env_steps": 60_000 * len(scores),
                "curve": [
                    {"seconds": 60.0 * k, "due_seconds": 60.0 * k, "minutes": k, "env_steps": 60_000 * k}
                    | {"mean_score": score, "win_rate": 0.0}
                    for k, score in enumerate(scores, 1)
                ],
            }
            for system, arm, seed, scores in runs
        ],
        "failed_runs": [],
    }


def write_pair(folder):
    """Two settings run in pairs, a file per setting and seed, as the research log's endgame pair."""
    for seed in (0, 1):
        (folder / f"learning_x-old-seed{seed}.json").write_text(
            json.dumps(learning_report([("sb3_snake", None, seed, [20, 28, 30])]))
        )
        (folder / f"learning_x-new-seed{seed}.json").write_text(
            json.dumps(learning_report([("sb3_snake", None, seed, [25, 33, 38])]))
        )


def test_report_files_glob_a_labelled_pattern_and_take_a_file_as_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("learning_b-new.json", "learning_a-new.json", "lr=0.5.json"):
        (tmp_path / name).write_text("{}")
    assert report_files(["new=learning_*-new.json", "lr=0.5.json", "learning_*-new.json"]) == [
        ("new", Path("learning_a-new.json")),
        ("new", Path("learning_b-new.json")),
        (None, Path("lr=0.5.json")),  # a file whose name holds '=' is a file
        (None, Path("learning_a-new.json")),  # a glob the shell left alone
        (None, Path("learning_b-new.json")),
    ]


def test_reports_drawn_together_take_their_arm_from_the_label_else_from_the_run(tmp_path, monkeypatch):
    import sb3_snake.benchmark.learning.pictures as pictures

    drawn = {}

    def draw(panels, lines, legend, episodes, title, output):
        drawn.update(panels=panels, arms=[arm for arm, _ in lines], legend=legend, episodes=episodes, title=title)
        return output

    monkeypatch.setattr(pictures, "_draw", draw)
    write_pair(tmp_path)
    both = [("sb3_snake", None, 0, [1]), ("plain_sb3", None, 0, [1])]
    (tmp_path / "both.json").write_text(json.dumps(learning_report(both, cpu="Intel Xeon", episodes=200)))
    old, new = f"old={tmp_path}/learning_*-old-*.json", f"new={tmp_path}/learning_*-new-*.json"
    plot_reports(report_files([old, new, str(tmp_path / "both.json")]), tmp_path / "pair.png")
    assert drawn["panels"] == ["minutes", "env_steps"]
    assert drawn["arms"] == ["old", "old", "new", "new", "sb3_snake", "plain_sb3"]
    legend = {"old": "old", "new": "new", "sb3_snake": "sb3-snake train", "plain_sb3": 'plain SB3 DQN("MlpPolicy")'}
    assert drawn["legend"] == legend and drawn["episodes"] == "100/200"
    assert drawn["title"] == "AMD EPYC, 2 cores, torch 2.13.0+cpu; Intel Xeon, 2 cores, torch 2.13.0+cpu"
    plot_reports(report_files([f"mixed={tmp_path / 'both.json'}"]), tmp_path / "mixed.png")
    assert drawn["arms"] == ["mixed: sb3_snake", "mixed: plain_sb3"]  # a label keeps a file's systems apart
    # Seeds of one system split over files (--first-seed) are one arm without a label.
    plot_reports(report_files(sorted(map(str, tmp_path.glob("learning_x-old-*.json")))), tmp_path / "seeds.png")
    assert drawn["arms"] == ["sb3_snake", "sb3_snake"]


def test_each_arm_has_a_colour_of_its_own_its_systems_where_still_free():
    from sb3_snake.benchmark.learning.pictures import COLOURS, PALETTE, arm_colours

    assert arm_colours(list(COLOURS)[:4]) == {system: COLOURS[system] for system in list(COLOURS)[:4]}
    assert arm_colours(["A", "B", "A"]) == {"A": "tab:blue", "B": "tab:orange"}
    colours = arm_colours(["old", "new", "sb3_snake", "B"])
    assert colours["old"] == "tab:blue" and colours["new"] == "tab:orange" and len(set(colours.values())) == 4
    assert len(set(arm_colours([f"arm {n}" for n in range(len(PALETTE))]).values())) == len(PALETTE)


def test_plot_draws_benchmark_learning_files_into_one_picture_against_minutes_and_env_steps(tmp_path):
    from PIL import Image
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    write_pair(tmp_path)
    picture = tmp_path / "pair.png"
    arms = [f"old defaults={tmp_path}/learning_*-old-*.json", f"endgame={tmp_path}/learning_*-new-*.json"]
    result = CliRunner().invoke(app, ["plot", *arms, "--output", str(picture)])
    assert result.exit_code == 0 and result.output == f"saved {picture}\n", result.output
    image = Image.open(picture).convert("RGB")
    assert image.size == (1600, 450)  # two panels side by side
    pixels = set(image.getdata())
    for red, green, blue in ((31, 119, 180), (255, 127, 14)):  # tab:blue and tab:orange, at alpha 0.8 over white
        blended = (0.8 * red + 51, 0.8 * green + 51, 0.8 * blue + 51)
        assert any(all(abs(a - b) <= 3 for a, b in zip(pixel, blended, strict=True)) for pixel in pixels)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["old.json"], "give --output, the PNG to draw the benchmark-learning files into"),
        (["missing.json", "--output", "o.png"], "missing.json does not exist"),
        (["old.json", "--output", "o.txt"], "plot output o.txt must end in .png"),
        (["text.json", "--output", "o.png"], "text.json is not JSON"),
        (["other.json", "--output", "o.png"], 'other.json is not a benchmark-learning report: it has no "benchmark"'),
        (
            ["nan.json", "--output", "o.png"],
            "nan.json .* seed 0 lacks a number for one of mean_score, minutes, env_steps",
        ),
        (["failed.json", "--output", "o.png"], "the 1 file.s. hold no run to draw"),
        (["=old.json", "--output", "o.png"], "an arm is LABEL=PATTERN, both non-empty"),
        (["arm=nothing*.json", "--output", "o.png"], "no file matches nothing.*.json .the arm 'arm'."),
        (["old.json", "runs", "--output", "o.png"], "benchmark-learning file runs is a folder"),
        (["runs", "runs"], "plot draws one run folder, got 2"),
    ],
)
def test_plot_refuses_what_is_not_benchmark_learning_files_in_one_line(tmp_path, monkeypatch, args, message):
    import re

    from typer.testing import CliRunner

    from sb3_snake.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "old.json").write_text(json.dumps(learning_report([("sb3_snake", None, 0, [20])])))
    (tmp_path / "text.json").write_text("mean score 20")
    (tmp_path / "other.json").write_text(json.dumps({"benchmark": "gradient_step", "runs": []}))
    nan = learning_report([("sb3_snake", None, 0, [20])])
    nan["runs"][0]["curve"][0]["env_steps"] = float("nan")
    (tmp_path / "nan.json").write_text(json.dumps(nan))
    (tmp_path / "failed.json").write_text(json.dumps(learning_report([])))
    result = CliRunner().invoke(app, ["plot", *args])
    assert result.exit_code == 2, result.output
    assert re.fullmatch(f"error: [^\n]*{message}[^\n]*\n", result.output), result.output
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob("*.txt"))
