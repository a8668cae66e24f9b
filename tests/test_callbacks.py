"""The run's callbacks, each on its own: episode budget and stop requests, checkpoints, greedy
evaluation and the best model."""

import threading

import numpy as np
import pytest

import sb3_snake.training.callbacks as callbacks
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.persistence import load_model
from sb3_snake.training.callbacks import (
    EpisodeBudget,
    EpisodeCheckpoint,
    EpisodeRecord,
    GreedyEvaluation,
    StopRequest,
)
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import train
from tests.conftest import small_dqn

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def tiny_config(**changes):
    values = {"episodes": 12, "n_envs": 4, "board_size": 5, "seed": 1, "learning_starts": 16, "buffer_size": 2_000}
    return TrainConfig(**{**values, "batch_size": 16, "device": "cpu", **changes})


def step(callback, dones, scores, lengths, timesteps):
    callback.model.num_timesteps = timesteps  # BaseCallback.on_step reads it from the model
    callback.locals = {
        "dones": np.array(dones),
        "infos": [{"score": s, "episode": {"l": n}} for s, n in zip(scores, lengths, strict=True)],
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
        return {"mean_score": next(means)}

    monkeypatch.setattr(callbacks, "evaluate", scripted_evaluate)
    real_save = callbacks.save_model
    monkeypatch.setattr(callbacks, "save_model", lambda model, path: saves.append(path) or real_save(model, path))
    summary = train(tiny_config(episodes=None, timesteps=400, select_every=100, select_episodes=5), FAST, tmp_path)
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
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])

    def scripted_evaluate(model, episodes, seed, seed_offset):
        calls.append((episodes, seed_offset + seed))
        now[0] += 3.0  # evaluating takes time, which the next interval starts after
        return {"mean_score": float(seed)}

    monkeypatch.setattr(callbacks, "evaluate", scripted_evaluate)

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
    assert evaluation.history == seen == [{"env_steps": 8, "mean_score": 0.0}, {"env_steps": 16, "mean_score": 1.0}]
    assert evaluation.mean_score() == 2.0 and len(evaluation.history) == 2
