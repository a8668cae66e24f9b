"""The run's callbacks, each on its own: episode budget and stop requests, checkpoints, greedy
evaluation and the best model."""

import threading

import numpy as np
import pytest

import sb3_snake.training.evaluation as evaluation_module
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.persistence import load_model
from sb3_snake.training.callbacks import EpisodeBudget, EpisodeCheckpoint, EpisodeRecord, ProgressReport, StopRequest
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.evaluation import GreedyEvaluation, ProgressEvaluation
from sb3_snake.training.run import train
from tests.conftest import scripted_games as games
from tests.conftest import small_dqn

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def tiny_config(**changes):
    values = {"algo": "dqn", "episodes": 12, "n_envs": 4, "board_size": 5, "seed": 1, "learning_starts": 16}
    values["buffer_size"] = 2_000
    return TrainConfig(**{**values, "batch_size": 16, "device": "cpu", **changes})


def step(callback, dones, scores, lengths, timesteps, long_starts=None):
    callback.model.num_timesteps = timesteps  # BaseCallback.on_step reads it from the model
    long_starts = long_starts or [False] * len(dones)
    callback.locals = {
        "dones": np.array(dones),
        "infos": [
            {"score": s, "episode": {"l": n}, "long_start": long}
            for s, n, long in zip(scores, lengths, long_starts, strict=True)
        ],
    }
    return callback.on_step()


def budget_for(**kwargs):
    budget = EpisodeBudget(record=EpisodeRecord(), start_time=0.0, **kwargs)
    budget.init_callback(small_dqn(FAST))
    return budget


def test_budget_counts_exactly_the_target_in_game_order():
    budget = budget_for(target=3)
    assert step(budget, [True, False, True], [5, 0, 7], [50, 0, 70], 3)
    assert not step(budget, [True, True, False], [1, 2, 0], [10, 20, 0], 6)
    assert budget.record.scores == [5, 7, 1] and budget.record.lengths == [50, 70, 10]
    assert budget.stopped_by == "episodes" and budget.record.env_steps == [3, 3, 6]


def test_budget_stops_on_env_steps_and_on_a_stop_request():
    budget = budget_for(target=None, max_env_steps=10)
    assert step(budget, [False], [0], [0], 9) and not step(budget, [False], [0], [0], 10)
    assert budget.stopped_by == "timesteps"
    stop = StopRequest()
    budget = budget_for(target=None, stop=stop)
    assert step(budget, [False], [0], [0], 1)
    threading.Thread(target=stop.request, args=("SIGTERM",)).start()
    while not stop.requested:
        pass
    assert not step(budget, [False], [0], [0], 2)
    assert budget.stopped_by == "stop" and stop.reason == "SIGTERM"


def test_a_second_request_keeps_the_first_reason():
    stop = StopRequest()
    stop.request("SIGINT")
    stop.request("SIGTERM")
    assert stop.requested and stop.reason == "SIGINT"


def test_checkpoint_every_n_episodes_is_atomic_and_loadable(tmp_path):
    budget = budget_for(target=None)
    checkpoint = EpisodeCheckpoint(budget, tmp_path, every=2)
    checkpoint.init_callback(budget.model)
    saved = []
    for episode in range(5):
        step(budget, [True], [episode], [10], episode + 1)
        checkpoint.on_step()
        saved.append((tmp_path / "checkpoint.zip").is_file())
    assert saved == [False, True, True, True, True]
    assert [path.name for path in tmp_path.iterdir()] == ["checkpoint.zip"]  # no temporary file left
    assert load_model(tmp_path / "checkpoint.zip", FAST).observation_space.shape == (5, 5, 5)


@pytest.mark.slow
def test_best_model_selection_keeps_the_best_greedy_evaluation(tmp_path, monkeypatch):
    """Evaluations on their own seeds; best_model.zip is rewritten only when the mean improves."""
    from sb3_snake.training.evaluation import EVAL_SEED_OFFSET, SELECTION_SEED_OFFSET

    means, calls, saves = iter([1.0, 3.0, 2.0, 0.5]), [], []

    def scripted_evaluate(model, episodes, seed, seed_offset):
        calls.append((episodes, seed_offset + seed))
        return games(next(means), episodes)

    monkeypatch.setattr(evaluation_module, "evaluate", scripted_evaluate)
    real_save = evaluation_module.save_model
    monkeypatch.setattr(
        evaluation_module, "save_model", lambda model, path: saves.append(path) or real_save(model, path)
    )
    config = tiny_config(episodes=None, timesteps=400, select_every=100, select_episodes=5, eval_every_minutes=0)
    summary = train(config, FAST, tmp_path)
    assert [episodes for episodes, _ in calls] == [5] * 4
    seeds = [seed for _, seed in calls]
    assert seeds == [SELECTION_SEED_OFFSET + i for i in range(4)] and min(seeds) > EVAL_SEED_OFFSET + 10**6
    assert saves == [tmp_path / "best_model.zip"] * 2  # after 1.0 and 3.0, not after 2.0 or 0.5
    assert summary["best_model"]["mean_score"] == 3.0 and 200 <= summary["best_model"]["env_steps"] < 300
    assert [entry["mean_score"] for entry in summary["selection_history"]] == [1.0, 3.0, 2.0, 0.5]
    assert load_model(tmp_path / "best_model.zip", FAST).observation_space.shape == (5, 5, 5)


def test_greedy_evaluation_on_the_clock_plays_new_games_each_time(monkeypatch):
    """Due every ``every_seconds`` after the last evaluation ended; each one on the next seed; the
    hook sees each result; ``mean_score`` plays the next games without recording them."""
    now, calls, seen = [0.0], [], []
    monkeypatch.setattr(evaluation_module.time, "perf_counter", lambda: now[0])

    def scripted_evaluate(model, episodes, seed, seed_offset):
        calls.append((episodes, seed_offset + seed))
        now[0] += 3.0  # evaluating takes time, which the next interval starts after
        return games(float(seed), episodes, longest=4 + seed, won=seed)

    monkeypatch.setattr(evaluation_module, "evaluate", scripted_evaluate)

    class Recording(GreedyEvaluation):
        def on_evaluation(self, entry):
            seen.append(entry)

    evaluation = Recording(episodes=2, seed_offset=100, every_seconds=10.0)
    evaluation.init_callback(small_dqn(FAST))
    evaluation.on_training_start({}, {})
    for seconds, timesteps in ((5.0, 4), (10.0, 8), (20.0, 12), (23.0, 16)):
        now[0] = seconds
        assert step(evaluation, [False], [0], [0], timesteps)
    assert calls == [(2, 100), (2, 101)]  # at 10 s and, 10 s after that one ended at 13 s, at 23 s
    assert (
        evaluation.history
        == seen
        == [
            {"env_steps": 8, "games": 2, "mean_score": 0.0, "longest": 4, "wins": 0, "seconds": 3.0},
            {"env_steps": 16, "games": 2, "mean_score": 1.0, "longest": 5, "wins": 1, "seconds": 3.0},
        ]
    )
    assert evaluation.mean_score() == 2.0 and len(evaluation.history) == 2


def test_long_start_games_do_not_lower_the_exploring_mean_or_best():
    """The mean and best a user reads count the games from standard starts; the record keeps
    every game and which began long."""
    budget = budget_for(target=None)
    step(budget, [True, True, True], [9, 1, 40], [90, 5, 80], 3, long_starts=[False, True, True])
    step(budget, [True, False, False], [7, 0, 0], [70, 0, 0], 6)
    record = budget.record
    assert record.scores == [9, 1, 40, 7] and record.long_starts == [False, True, True, False]
    assert record.mean_score_last(100) == 8.0 and record.best_score == 9
    assert record.mean_score_last(1) == 7.0


def test_the_progress_line_shows_the_last_greedy_evaluation(monkeypatch):
    """Plain lines (no terminal) lead with the latest greedy evaluation of any evaluation
    callback: its mean, longest snake and games won; the exploring mean follows."""
    import io

    from rich.console import Console

    out = io.StringIO()
    budget = budget_for(target=None)
    early, late = GreedyEvaluation(2, 0, every_steps=1), GreedyEvaluation(2, 0, every_steps=1)
    early.history.append({"env_steps": 100, "games": 32, "mean_score": 5.0, "longest": 8, "wins": 0})
    late.history.append({"env_steps": 2_000, "games": 32, "mean_score": 31.25, "longest": 57, "wins": 2})
    progress = ProgressReport(budget, Console(file=out, force_terminal=False), log_seconds=0.0)
    progress.init_callback(budget.model)
    progress.on_training_start({}, {})
    step(budget, [True], [4], [40], 8)
    assert step(progress, [False], [0], [0], 8)
    assert "exploring: mean (last 100) 4.00" in out.getvalue() and "greedy" not in out.getvalue()
    progress.evaluations = [late, early]
    step(budget, [True], [4], [40], 8)
    assert step(progress, [False], [0], [0], 8)
    last = out.getvalue().splitlines()[-1]
    assert "greedy 31.25 (longest 57, 2/32 won, at 2,000 steps)" in last
    assert last.index("greedy") < last.index("exploring")


def test_the_progress_evaluation_sees_the_final_model_unless_stopped(monkeypatch):
    """At the end of training one more evaluation plays the model the run ends with, unless the
    last one saw it already or a stop asks the run to end at once."""
    played = []
    monkeypatch.setattr(
        evaluation_module, "evaluate", lambda model, episodes, seed, seed_offset: played.append(seed) or games(1.0)
    )
    model = small_dqn(FAST)
    for stopped, seen_last, expected in ((False, False, 1), (False, True, 0), (True, False, 0)):
        played.clear()
        stop = StopRequest()
        if stopped:
            stop.request("SIGTERM")
        evaluation = ProgressEvaluation(episodes=3, every_seconds=60.0, stopping=lambda stop=stop: stop.requested)
        evaluation.init_callback(model)
        model.num_timesteps = 500
        if seen_last:
            evaluation.history.append({"env_steps": 500, "games": 3, "mean_score": 1.0, "longest": 3, "wins": 0})
        evaluation.on_training_end()
        assert len(played) == expected, (stopped, seen_last)


def test_a_run_reports_its_last_greedy_evaluation_in_the_summary(tmp_path):
    """``summary.json`` holds the last greedy evaluation (of the final model, by the evaluation
    at the end) and every evaluation of the run; ``--eval-every 0`` plays none."""
    summary = train(tiny_config(select_episodes=3), FAST, tmp_path / "on")
    last = summary["last_evaluation"]
    assert last["env_steps"] == summary["total_env_steps"] and last["games"] == 3
    assert 0 <= last["wins"] <= 3 and last["longest"] >= 3 and summary["evaluations"][-1] == last
    summary = train(tiny_config(eval_every_minutes=0), FAST, tmp_path / "off")
    assert summary["last_evaluation"] is None and summary["evaluations"] is None
