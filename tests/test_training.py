"""The training run as a library call: config checks, memory, update schedule, resume, divergence, stopping."""

import io
import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.extractor import HeadView
from sb3_snake.dqn.snake_dqn import TrainingDiverged
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.persistence import load_model, read_metadata
from sb3_snake.training.callbacks import RunCancelled, StopRequest
from sb3_snake.training.config import DEFAULT_EPISODES, TrainConfig, check_memory
from sb3_snake.training.evaluation import evaluate
from sb3_snake.training.resume import resume_config
from sb3_snake.training.run import RunCallbacks, build_model, train
from sb3_snake.training.summary import Outcome, build_summary
from sb3_snake.training.tracking import WandbRun
from tests.conftest import rewrite_metadata

FAST = OptimizationSettings(batch_size=16, use_torch_compile=False, use_bf16=False, num_threads=1)


def tiny_config(**changes):
    values = {
        "episodes": 12,
        "n_envs": 4,
        "board_size": 5,
        "seed": 1,
        "learning_starts": 16,
        "exploration_steps": 50,
        "buffer_size": 2_000,
        "device": "cpu",
    }
    values.update(changes)
    return TrainConfig(**values)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"episodes": 0}, "episodes must be at least 1, got 0"),
        ({"board_size": 3}, "board_size must be an integer >= 4, got 3"),
        ({"device": "tpu"}, "device must be auto, cpu or cuda, got 'tpu'"),
        ({"replay_ratio": 0}, "replay_ratio must be a positive finite number, got 0"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ({"select_every": 0}, "select_every must be at least 1"),
        ({"select_episodes": 0}, "select_episodes must be at least 1"),
        ({"compile_after": -1}, "compile_after must be at least 0, got -1"),
        ({"early_replay_ratio": 0}, "early_replay_ratio must be a positive finite number, got 0"),
        ({"early_steps": -1}, "early_steps must be at least 0, got -1"),
        ({"learning_rate_half_life": -1}, "learning_rate_half_life must be at least 0, got -1"),
        ({"time_limit_minutes": float("nan")}, "time limit must be a positive number of minutes, got nan"),
        ({"learning_rate": float("inf")}, "learning_rate must be a positive finite number, got inf"),
        ({"learning_rate": float("nan")}, "learning_rate must be a positive finite number, got nan"),
        ({"replay_ratio": float("inf")}, "replay_ratio must be a positive finite number, got inf"),
        ({"gamma": 1.5}, "gamma must be from 0 to 1"),
        ({"board_size": 1000}, "board_size must be at most 256, got 1000"),
        ({"seed": 2**64}, "seed must be from 0 to 4294967295"),
        ({"seed": -1}, "seed must be from 0 to 4294967295"),
        ({"exploration_final_eps": float("nan")}, "exploration_final_eps must be from 0 to 1"),
    ],
)
def test_bad_config(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**changes)


def test_update_schedule_meets_the_replay_ratio():
    config = TrainConfig(n_envs=16, replay_ratio=32)
    assert config.update_schedule(512) == (1, 1)  # 512 samples per 16 env steps
    assert config.update_schedule(4096) == (8, 1)
    assert config.update_schedule(64) == (1, 8)
    assert TrainConfig(n_envs=16, train_freq=3, gradient_steps=2).update_schedule(512) == (3, 2)


def test_run_stops_at_exactly_the_episode_budget(tmp_path):
    summary = train(tiny_config(), FAST, tmp_path)
    assert summary["episodes"] == 12 and summary["stopped_by"] == "episodes"
    episodes = json.loads((tmp_path / "episodes.json").read_text())
    assert len(episodes["scores"]) == 12 and summary["best_score"] == max(episodes["scores"])
    assert summary["env_steps"] >= sum(episodes["lengths"]) / 4
    assert summary["optimizations"]["batch_size"] == {"value": 16, "source": "default"}
    assert summary["active"]["torch_compile_active"] is False


def test_a_compile_deferred_past_the_end_of_the_run_is_reported_not_active(tmp_path):
    settings = replace(FAST, use_torch_compile=True)
    summary = train(tiny_config(compile_after=10**6), settings, tmp_path)
    assert summary["active"]["torch_compile_requested"] is True
    assert summary["active"]["torch_compile_active"] is False
    assert "deferred to gradient step 1,000,000, not reached" in summary["active"]["torch_compile_reason"]


def test_resume_rejects_another_board_size(tmp_path):
    train(tiny_config(episodes=4), FAST, tmp_path)
    with pytest.raises(ValueError, match=r"trained on a 5x5 board, not 6x6; pass --board-size 5"):
        build_model(tiny_config(board_size=6), FAST, resume=tmp_path / "model.zip")
    with pytest.raises(ValueError, match=r"trained without the countdown channel; pass --no-countdown$"):
        build_model(tiny_config(countdown=True), FAST, resume=tmp_path / "model.zip")


@pytest.mark.parametrize("countdown", [True, False])
def test_countdown_option_shapes_the_boards_and_resume_keeps_it(tmp_path, countdown):
    train(tiny_config(episodes=2, countdown=countdown), FAST, tmp_path / "a")
    path = tmp_path / "a" / "model.zip"
    assert read_metadata(path)["observation_shape"] == [6 if countdown else 5, 5, 5]
    assert resume_config(path, episodes=2).countdown is countdown
    summary = train(resume_config(path, episodes=2), FAST, tmp_path / "b", resume=path)
    assert summary["episodes"] == 2


def test_resume_continues_with_the_replay_buffer(tmp_path):
    first = train(tiny_config(episodes=8, checkpoint_every=4, save_replay_buffer=True), FAST, tmp_path / "a")
    assert (tmp_path / "a" / "checkpoint.zip").is_file() and (tmp_path / "a" / "checkpoint.replay.npz").is_file()
    model = build_model(tiny_config(), FAST, resume=tmp_path / "a" / "model.zip")
    assert model.replay_buffer.size() > 0 and model.num_timesteps == first["total_env_steps"]
    second = train(tiny_config(episodes=4), FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert second["episodes"] == 4 and second["total_env_steps"] > first["total_env_steps"]
    assert second["resumed_from"].endswith("model.zip")


@pytest.mark.slow
def test_symmetry_augmentation_is_used_in_training_and_kept_on_save(tmp_path, monkeypatch):
    import sb3_snake.dqn.symmetry as symmetry

    augmented = []
    original_call = symmetry.SymmetryAugmentation.__call__

    def counting_call(self, samples, symmetries=None):
        augmented.append(len(samples.actions))
        return original_call(self, samples, symmetries)

    monkeypatch.setattr(symmetry.SymmetryAugmentation, "__call__", counting_call)
    summary = train(tiny_config(episodes=None, timesteps=200, symmetry_augmentation=True), FAST, tmp_path)
    assert summary["hyperparameters"]["symmetry_augmentation"] is True
    assert augmented and set(augmented) == {16}  # every replayed batch, at the batch size
    model = load_model(tmp_path / "model.zip", FAST)
    assert model.symmetry_augmentation and model._augmentation is not None


@pytest.mark.slow
@pytest.mark.parametrize("head_view", [True, False])
def test_head_view_option_shapes_the_saved_policy(tmp_path, head_view):
    summary = train(tiny_config(episodes=None, timesteps=100, head_view=head_view), FAST, tmp_path)
    assert summary["hyperparameters"]["head_view"] is head_view
    extractor = load_model(tmp_path / "model.zip", FAST).q_net.features_extractor
    assert isinstance(extractor.head_view, HeadView) is head_view


@pytest.mark.slow
def test_timesteps_limit_stops_first(tmp_path):
    summary = train(tiny_config(episodes=100_000, timesteps=200), FAST, tmp_path)
    assert summary["stopped_by"] == "timesteps" and 200 <= summary["env_steps"] < 200 + 4


@pytest.mark.slow
def test_time_limit_stops_first(tmp_path):
    summary = train(tiny_config(episodes=None, time_limit_minutes=0.05), FAST, tmp_path)
    assert summary["stopped_by"] == "time_limit" and summary["target_episodes"] is None
    assert 3.0 <= summary["wall_seconds"] < 30


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"timesteps": 0}, "timesteps must be at least 1"),
        ({"time_limit_minutes": 0}, "time limit must be a positive number of minutes"),
    ],
)
def test_bad_limits(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**changes)


def test_no_limit_means_the_default_episodes():
    assert TrainConfig().episodes == DEFAULT_EPISODES
    assert TrainConfig(time_limit_minutes=1).episodes is None


def test_a_batch_larger_than_the_buffer_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="batch size 4096 is larger than the replay buffer .2000 transitions."):
        train(tiny_config(), replace(FAST, batch_size=4096), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("changes", "part"), [({"n_envs": 100_000_000}, "games"), ({"buffer_size": 10**10}, "replay")])
def test_memory_needed_is_stated_up_front(changes, part):
    config = tiny_config(**changes)
    with pytest.raises(ValueError, match=rf"this run needs about [\d.]+ GiB \(.*{part}.*\) but 1.0 GiB are available"):
        check_memory(config, 16, available=2**30)
    check_memory(tiny_config(), 16, available=2**30)  # a small run fits


def test_memory_estimate_grows_with_what_it_holds():
    small, large = tiny_config().memory_estimate(16), tiny_config(buffer_size=20_000).memory_estimate(16)
    assert large["replay buffer"] == 10 * small["replay buffer"] and large["networks"] == small["networks"]
    with_view, without = tiny_config().memory_estimate(16), tiny_config(head_view=False).memory_estimate(16)
    assert with_view["networks"] > without["networks"]


def test_resume_applies_the_given_hyperparameters(tmp_path):
    """What --resume is given is what the model trains with, read back from the saved model."""
    train(tiny_config(episodes=4, learning_rate=5e-4, gamma=0.99), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=3, learning_rate=0.01, gamma=0.5, double_dqn=True)
    overridden = replace(FAST, batch_size=8, sources={**FAST.sources, "batch_size": "override"})
    summary = train(config, overridden, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    model = load_model(tmp_path / "b" / "model.zip", FAST)
    assert (model.learning_rate, model.gamma, model.batch_size, model.double_dqn) == (0.01, 0.5, 8, True)
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    trained = summary["hyperparameters"]
    assert (trained["learning_rate"], trained["gamma"], trained["batch_size"], trained["double_dqn"]) == (
        0.01,
        0.5,
        8,
        True,
    )
    assert (trained["train_freq"], trained["gradient_steps"]) == config.update_schedule(8) == (1, 16)  # ratio 32 kept


@pytest.mark.parametrize(
    ("changes", "batch_size", "fraction"),
    [({}, 128, 0.5), ({}, 512, 0.5), ({"replay_ratio": 8}, 512, 2.0), ({"early_replay_ratio": 32}, 128, 1.0)],
)
def test_early_replay_ratio_is_a_fraction_of_the_scheduled_updates(changes, batch_size, fraction):
    """The early ratio over the ratio the update schedule really gives (16 games)."""
    kwargs = TrainConfig(**changes).dqn_kwargs(batch_size)
    assert kwargs["early_update_fraction"] == pytest.approx(fraction)
    assert kwargs["early_steps"] == TrainConfig.early_steps


def test_resume_keeps_the_early_replay_ratio(tmp_path):
    train(tiny_config(episodes=2, early_replay_ratio=8, early_steps=123), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=2)
    assert (config.early_replay_ratio, config.early_steps) == (pytest.approx(8), 123)
    model = build_model(config, FAST, resume=tmp_path / "a" / "model.zip")
    assert model.early_steps == 123 and model.early_update_fraction == pytest.approx(8 / 32)


@pytest.mark.parametrize("shaping", [0.0, 0.5])
def test_resume_keeps_the_food_shaping(tmp_path, shaping):
    train(tiny_config(episodes=2, food_shaping=shaping), FAST, tmp_path / "a")
    assert resume_config(tmp_path / "a" / "model.zip", episodes=2).food_shaping == shaping


def test_the_learning_rate_half_life_is_passed_on_and_kept_on_resume(tmp_path):
    train(tiny_config(episodes=2, learning_rate_half_life=5_000), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=2)
    assert config.learning_rate_half_life == 5_000
    assert build_model(config, FAST, resume=tmp_path / "a" / "model.zip").learning_rate_half_life == 5_000


@pytest.mark.parametrize(
    ("name", "default", "before"), [("food_shaping", 1.0, 0.0), ("learning_rate_half_life", 200_000, 0)]
)
def test_resume_of_a_model_saved_before_an_option_trains_as_it_did(tmp_path, name, default, before):
    """Metadata without ``name`` (sb3-snake before the option) means a model that trained without
    it: it resumes that way, not at today's default."""
    train(tiny_config(episodes=2), FAST, tmp_path / "a")

    def without_it(metadata):
        del metadata["hyperparameters"][name]
        return metadata

    path = rewrite_metadata(tmp_path / "a" / "model.zip", tmp_path / "old.zip", without_it)
    assert getattr(TrainConfig(), name) == default
    assert getattr(resume_config(path, episodes=2), name) == before


def test_the_number_of_transformer_blocks_is_built_and_kept_on_resume(tmp_path):
    train(tiny_config(episodes=2, num_layers=2), FAST, tmp_path / "a")
    path = tmp_path / "a" / "model.zip"
    model = build_model(resume_config(path, episodes=2), FAST, resume=path)
    assert len(model.q_net.features_extractor.blocks) == 2 and resume_config(path).num_layers == 2
    assert len(build_model(tiny_config(), FAST).q_net.features_extractor.blocks) == TrainConfig().num_layers

    def before_the_option(metadata):  # models saved before --num-layers: the extractor's default, one block
        del metadata["policy_kwargs"]["features_extractor_kwargs"]["num_layers"]
        return metadata

    assert resume_config(rewrite_metadata(path, tmp_path / "old.zip", before_the_option)).num_layers == 1


def test_resume_keeps_the_model_batch_size_unless_overridden(tmp_path):
    train(tiny_config(episodes=4), FAST, tmp_path / "a")
    from_env_file = OptimizationSettings(batch_size=64, use_torch_compile=False, use_bf16=False, num_threads=1)
    config = resume_config(tmp_path / "a" / "model.zip", episodes=2)
    summary = train(config, from_env_file, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert summary["hyperparameters"]["batch_size"] == 16
    assert summary["optimizations"]["batch_size"] == {"value": 16, "source": "resumed model"}


def test_resume_with_other_games_keeps_the_replay_buffer(tmp_path):
    train(tiny_config(episodes=6, save_replay_buffer=True), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=2, n_envs=8)
    model = build_model(config, FAST, resume=tmp_path / "a" / "model.zip")
    assert model.n_envs == 8 and model.replay_buffer.size() > 0
    summary = train(config, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert summary["hyperparameters"]["n_envs"] == 8


@pytest.mark.parametrize(
    ("change", "flag"),
    [({"dueling": True}, "--dueling"), ({"n_steps": 3}, "--n-steps"), ({"num_layers": 2}, "--num-layers")],
)
def test_resume_refuses_what_cannot_change(tmp_path, change, flag):
    train(tiny_config(episodes=2), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", **change)
    with pytest.raises(ValueError, match=f"{flag} cannot change on resume: the model was trained with"):
        train(config, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert not (tmp_path / "b").exists()  # a failed start leaves no folder behind


@pytest.mark.slow
def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    from sb3_snake.dqn.snake_dqn import SnakeDQN

    real_train, calls = SnakeDQN.train, []

    def poisoned_after_a_while(self, gradient_steps, batch_size=100):
        calls.append(1)
        if len(calls) > 30:  # weights become NaN, as with a learning rate far too large
            with torch.no_grad():
                next(self.q_net.parameters()).fill_(float("nan"))
        real_train(self, gradient_steps, batch_size)

    monkeypatch.setattr(SnakeDQN, "train", poisoned_after_a_while)
    with pytest.raises(
        TrainingDiverged, match=r"the TD loss became nan .* the last good checkpoint is .*checkpoint.zip"
    ):
        train(tiny_config(episodes=10_000, checkpoint_every=2), FAST, tmp_path)
    assert not (tmp_path / "model.zip").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "diverged" and "nan" in summary["error"]
    checkpoint = load_model(tmp_path / "checkpoint.zip", FAST)
    assert all(torch.isfinite(p).all() for p in checkpoint.q_net.parameters())


def test_a_stop_requested_from_another_thread_ends_the_run_and_saves(tmp_path):
    stop = StopRequest()
    timer = threading.Timer(2.0, stop.request, args=("asked by the test",))
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(train(tiny_config(episodes=10**6), FAST, tmp_path, stop=stop))
    )
    timer.start()
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert result["stopped_by"] == "stop" and result["stop_reason"] == "asked by the test" and stop.phase == "finished"
    assert (tmp_path / "model.zip").is_file() and json.loads((tmp_path / "summary.json").read_text())["episodes"] > 0


def test_a_stop_requested_before_training_cancels_the_run(tmp_path):
    stop = StopRequest()
    stop.request("SIGINT")
    with pytest.raises(RunCancelled, match="SIGINT before training started"):
        train(tiny_config(), FAST, tmp_path / "run", stop=stop)
    assert not (tmp_path / "run").exists()


def test_summary_is_built_from_the_model_without_training():
    config = tiny_config(episodes=3, learning_rate=0.002)
    model = build_model(config, FAST)
    callbacks = RunCallbacks.build(config, Path("unused"), WandbRun.off(), StopRequest(), Console(file=io.StringIO()))
    callbacks.record.scores.extend([1, 4, 2])
    callbacks.record.lengths.extend([10, 30, 20])
    callbacks.budget.stopped_by = "episodes"
    summary = build_summary(model, config, callbacks, Outcome(wall_seconds=2.0, env_steps=60, diverged=None))
    assert (
        summary["episodes"] == 3
        and summary["best_score"] == 4
        and summary["mean_score_last_100"] == pytest.approx(7 / 3)
    )
    assert summary["env_steps_per_second"] == 30.0 and summary["stopped_by"] == "episodes"
    assert summary["hyperparameters"]["learning_rate"] == 0.002 and summary["hyperparameters"]["batch_size"] == 16
    assert summary["optimizations"]["batch_size"] == {"value": 16, "source": "default"}
    assert summary["active"]["torch_compile_active"] is False and summary["best_model"] is None
    json.dumps(summary)  # JSON-ready


@pytest.mark.slow
def test_tensorboard_log_writes_sb3s_own_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    train(tiny_config(episodes=40, tensorboard_log=str(tmp_path / "tb"), learning_starts=8), FAST, tmp_path / "run")
    (folder,) = (tmp_path / "tb").iterdir()
    assert folder.name == "run_1" and list(folder.glob("events.out.tfevents.*"))


class RandomPolicy:
    """Uniformly random actions, with the interface evaluate() uses."""

    def __init__(self, observation_space, seed=0):
        self.observation_space = observation_space
        self.rng = np.random.default_rng(seed)

    def predict(self, obs, deterministic=True):
        return self.rng.integers(4, size=len(obs)), None


@pytest.mark.slow
def test_training_beats_a_random_policy_by_a_clear_margin(tmp_path):
    settings = OptimizationSettings(batch_size=256, use_torch_compile=False, use_bf16=False, num_threads=1)
    config = TrainConfig(
        episodes=None, timesteps=15_000, n_envs=16, board_size=6, seed=0, exploration_steps=8_000, device="cpu"
    )
    train(config, settings, tmp_path)
    trained = evaluate(load_model(tmp_path / "model.zip", settings), episodes=100)
    random = evaluate(RandomPolicy(BatchedSnakeVecEnv(1, board_size=6).observation_space), episodes=100)
    assert trained["mean_score"] >= random["mean_score"] + 0.5, (trained, random)
