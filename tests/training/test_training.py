"""The training run as a library call: stopping, divergence, the summary, learning."""

import io
import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import TrainingDiverged
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.networks.attention import HeadView
from sb3_snake.persistence import load_model
from sb3_snake.training.callbacks import RunCallbacks, RunCancelled, StopRequest
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.evaluation import evaluate
from sb3_snake.training.run import build_model, train
from sb3_snake.training.summary import Outcome, build_summary
from sb3_snake.training.tracking import WandbRun
from tests.conftest import FAST, tiny_config


def test_run_stops_at_exactly_the_episode_budget(tmp_path):
    summary = train(tiny_config(), FAST, tmp_path)
    assert summary["episodes"] == 12 and summary["stopped_by"] == "episodes"
    episodes = json.loads((tmp_path / "episodes.json").read_text())
    assert len(episodes["scores"]) == 12 and summary["best_score"] == max(episodes["scores"])
    assert summary["env_steps"] >= sum(episodes["lengths"]) / 4
    assert summary["batch_size"] == {"value": 16, "source": "default"}  # a learning value, not an optimization
    assert "batch_size" not in summary["optimizations"] and "sources" not in summary["hyperparameters"]
    assert summary["active"]["torch_compile_active"] is False


def test_seeded_runs_with_the_compile_off_repeat_exactly(tmp_path):
    for name in ("a", "b"):
        train(tiny_config(episodes=8, egocentric=True, long_starts=0.5), FAST, tmp_path / name)
    episodes = [json.loads((tmp_path / name / "episodes.json").read_text()) for name in ("a", "b")]
    for record in episodes:
        record.pop("wall_seconds")  # the one thing the clock decides
    assert episodes[0] == episodes[1] and len(episodes[0]["scores"]) == 8
    models = [load_model(tmp_path / name / "model.zip", FAST) for name in ("a", "b")]
    for a, b in zip(models[0].q_net.parameters(), models[1].q_net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_compile_deferred_past_the_end_of_the_run_is_reported_not_active(tmp_path):
    settings = replace(FAST, use_torch_compile=True, compile_after=10**6)
    summary = train(tiny_config(), settings, tmp_path)
    assert summary["active"]["torch_compile_requested"] is True
    assert summary["active"]["torch_compile_active"] is False
    assert "deferred to gradient step 1,000,000, not reached" in summary["active"]["torch_compile_reason"]


@pytest.mark.slow
def test_symmetry_augmentation_is_used_in_training_and_kept_on_save(tmp_path, monkeypatch):
    import sb3_snake.q_learning.symmetry as symmetry

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


def test_a_batch_larger_than_the_buffer_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="batch size 4096 is larger than the replay buffer .2000 transitions."):
        train(tiny_config(batch_size=4096), FAST, tmp_path / "run")
    assert not (tmp_path / "run").exists()


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
    # Nothing left auto: a cold cache would measure the attention kernel with the poisoned train.
    settings = OptimizationSettings(use_torch_compile=False, use_bf16=False, use_flash_attention=False, num_threads=1)
    with pytest.raises(
        TrainingDiverged, match=r"the TD loss became nan .* the last good checkpoint is .*checkpoint.zip"
    ):
        train(tiny_config(episodes=10_000, checkpoint_every=2), settings, tmp_path)
    assert not (tmp_path / "model.zip").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "diverged" and "nan" in summary["error"]
    checkpoint = load_model(tmp_path / "checkpoint.zip", FAST)
    assert all(torch.isfinite(p).all() for p in checkpoint.q_net.parameters())


class FirstGameEnded(BaseCallback):
    """Sets :attr:`ended` when the first game of the run ends."""

    def __init__(self):
        super().__init__()
        self.ended = threading.Event()

    def _on_step(self) -> bool:
        if self.locals["dones"].any():
            self.ended.set()
        return True


def test_a_stop_requested_from_another_thread_ends_the_run_and_saves(tmp_path):
    stop, first_game = StopRequest(), FirstGameEnded()
    result = {}
    config = tiny_config(episodes=10**6)
    thread = threading.Thread(
        target=lambda: result.update(train(config, FAST, tmp_path, stop=stop, callbacks=[first_game]))
    )
    thread.start()
    assert first_game.ended.wait(timeout=120), "no game ended"  # however long building the run takes here
    stop.request("asked by the test")
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
    assert summary["batch_size"] == {"value": 16, "source": "default"}
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
    settings = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)
    config = TrainConfig(
        algo="dqn",
        episodes=None,
        timesteps=8_000,
        n_envs=16,
        board_size=6,
        seed=0,
        exploration_steps=4_000,
        device="cpu",
        embed_dim=16,
        head_view_dim=16,
    )
    config = replace(config, batch_size=256)
    train(config, settings, tmp_path)
    trained = evaluate(load_model(tmp_path / "model.zip", settings), episodes=100)
    random = evaluate(RandomPolicy(BatchedSnakeVecEnv(1, board_size=6).observation_space), episodes=100)
    assert trained["mean_score"] >= random["mean_score"] + 0.5, (trained, random)


def test_an_auto_batch_size_is_resolved_into_the_config_with_how_it_was_chosen(tmp_path, monkeypatch):
    """auto is measured (here: read from a cache the search wrote) and the run trains with the
    size chosen, its source the evidence; the config's batch size is a size from then on."""
    from sb3_snake.autotune import Machine, resolve_auto
    from sb3_snake.training.run import resolve_settings

    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path / "cache"))
    config = tiny_config(batch_size="auto", buffer_size=600)  # candidates that fit: 256, 512
    fixed = replace(FAST, use_flash_attention=False)  # the batch size alone is auto
    rates = {256: 1000.0, 512: 1050.0}
    resolve_auto(
        fixed,
        "auto",
        "cpu",
        config.policy_kwargs(),
        config.board_size,
        max_batch_size=config.buffer_size,
        measure=lambda candidate: rates[candidate.batch_size],
        machine=Machine("cpu", False, "", ("auto",)),
    )
    resolved, settings = resolve_settings(config, fixed)
    assert settings == fixed and resolved.batch_size == 256  # the smallest within 90% of the fastest
    assert resolved.source("batch_size") == "auto: chose 256"
    summary_evidence = "chose 256: the smallest batch within 90% of the fastest, measured 256: 1,000, 512: 1,050"
    assert settings.auto_record["evidence"]["batch_size"].startswith(summary_evidence)
    assert replace(resolved, sources={}) == replace(config, batch_size=256)
    summary = train(config, fixed, tmp_path / "run")
    assert summary["hyperparameters"]["batch_size"] == 256 and summary["batch_size"]["value"] == 256
    assert summary["batch_size"]["source"] == resolved.source("batch_size")
    assert summary["auto"]["evidence"]["batch_size"].startswith(summary_evidence)
