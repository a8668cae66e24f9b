"""The training run as a library call: config checks, update schedule, resume, W&B logging."""

import json

import numpy as np
import pytest

from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.evaluation import evaluate
from sb3_snake.extractor import HeadView
from sb3_snake.settings import OptimizationSettings
from sb3_snake.tracking import WandbRun
from sb3_snake.training import TrainConfig, WandbOptions, load_for_resume, load_model, train

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
    }
    values.update(changes)
    return TrainConfig(**values)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"episodes": 0}, "episodes must be at least 1, got 0"),
        ({"board_size": 3}, "board_size must be an integer >= 4, got 3"),
        ({"device": "tpu"}, "device must be auto, cpu or cuda, got 'tpu'"),
        ({"replay_ratio": 0}, "replay_ratio must be positive"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ({"select_every": 0}, "select_every must be at least 1"),
        ({"select_episodes": 0}, "select_episodes must be at least 1"),
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


def test_wandb_gets_config_episodes_and_training_metrics(tmp_path, fake_wandb):
    summary = train(tiny_config(episodes=20), FAST, tmp_path, wandb_options=WandbOptions(True, "proj", "offline"))
    kwargs = fake_wandb.init_kwargs
    assert kwargs["project"] == "proj" and kwargs["mode"] == "offline" and kwargs["dir"] == str(tmp_path)
    config = kwargs["config"]
    assert config["hyperparameters"]["board_size"] == 5 and config["hyperparameters"]["batch_size"] == 16
    assert config["optimizations"]["torch_compile_requested"] is False
    assert config["optimizations"]["bf16_active"] is False and "flash_attention_active" in config["optimizations"]
    assert config["capabilities"]["cpu_cores"] >= 1 and "cpu_native_bf16" in config["capabilities"]
    episode_logs = [m for m in fake_wandb.logged if "episode/score" in m]
    assert len(episode_logs) == 20
    assert any("train/loss" in m for m in fake_wandb.logged)
    assert fake_wandb.summary["episodes"] == 20 and fake_wandb.finished
    assert summary["wandb_mode"] == "offline"


def test_wandb_online_without_key_goes_offline(tmp_path, fake_wandb, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    messages = []
    run = WandbRun("p", "online", {}, tmp_path, notify=messages.append)
    assert run.mode == "offline" and fake_wandb.init_kwargs["mode"] == "offline"
    assert "no API key" in messages[0]


def test_wandb_failure_never_stops_training(tmp_path, fake_wandb):
    def broken_init(**kwargs):
        raise RuntimeError("network unreachable")

    fake_wandb.init = broken_init
    messages = []
    run = WandbRun("p", "offline", {}, tmp_path, notify=messages.append)
    assert not run.active and "network unreachable" in messages[0]
    run.log({"x": 1})
    run.finish({})


def test_real_wandb_offline_run_writes_locally(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = WandbRun("sb3-snake-test", "offline", {"a": 1}, tmp_path)
    assert run.active
    run.log({"episode/score": 3})
    run.finish({"episodes": 1})
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_resume_rejects_another_board_size(tmp_path):
    train(tiny_config(episodes=4), FAST, tmp_path)
    with pytest.raises(ValueError, match=r"trained on a 5x5 board, not 6x6; pass --board-size 5"):
        load_for_resume(tmp_path / "model.zip", BatchedSnakeVecEnv(2, board_size=6), FAST, "cpu")


def test_resume_continues_with_the_replay_buffer(tmp_path):
    first = train(tiny_config(episodes=8, checkpoint_every=4, save_replay_buffer=True), FAST, tmp_path / "a")
    assert (tmp_path / "a" / "checkpoint.zip").is_file() and (tmp_path / "a" / "checkpoint.replay.pkl").is_file()
    model = load_for_resume(tmp_path / "a" / "model.zip", BatchedSnakeVecEnv(4, board_size=5), FAST, "cpu")
    assert model.replay_buffer.size() > 0 and model.num_timesteps == first["total_env_steps"]
    second = train(tiny_config(episodes=4), FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert second["episodes"] == 4 and second["total_env_steps"] > first["total_env_steps"]
    assert second["resumed_from"].endswith("model.zip")


def test_best_model_selection_keeps_the_best_greedy_evaluation(tmp_path, monkeypatch):
    """Evaluations on their own seeds; best_model.zip is rewritten only when the mean improves."""
    import sb3_snake.callbacks as callbacks
    from sb3_snake.evaluation import EVAL_SEED_OFFSET, SELECTION_SEED_OFFSET

    means, calls, saves = iter([1.0, 3.0, 2.0, 0.5]), [], []

    def scripted_evaluate(model, episodes, seed, seed_offset):
        calls.append((episodes, seed_offset + seed))
        return {"mean_score": next(means)}

    monkeypatch.setattr(callbacks, "evaluate", scripted_evaluate)
    real_save = callbacks.save_atomically
    monkeypatch.setattr(callbacks, "save_atomically", lambda model, path: saves.append(path) or real_save(model, path))
    summary = train(tiny_config(episodes=None, timesteps=400, select_every=100, select_episodes=5), FAST, tmp_path)
    assert [episodes for episodes, _ in calls] == [5] * 4
    seeds = [seed for _, seed in calls]
    assert seeds == [SELECTION_SEED_OFFSET + i for i in range(4)] and min(seeds) > EVAL_SEED_OFFSET + 10**6
    assert saves == [tmp_path / "best_model.zip"] * 2  # after 1.0 and 3.0, not after 2.0 or 0.5
    assert summary["best_model"]["mean_score"] == 3.0 and 200 <= summary["best_model"]["env_steps"] < 300
    assert [entry["mean_score"] for entry in summary["selection_history"]] == [1.0, 3.0, 2.0, 0.5]
    assert load_model(tmp_path / "best_model.zip", FAST).observation_space.shape == (5, 5, 5)


def test_symmetry_augmentation_is_used_in_training_and_kept_on_save(tmp_path, monkeypatch):
    import sb3_snake.symmetry as symmetry

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


@pytest.mark.parametrize("head_view", [True, False])
def test_head_view_option_shapes_the_saved_policy(tmp_path, head_view):
    summary = train(tiny_config(episodes=None, timesteps=100, head_view=head_view), FAST, tmp_path)
    assert summary["hyperparameters"]["head_view"] is head_view
    extractor = load_model(tmp_path / "model.zip", FAST).q_net.features_extractor
    assert isinstance(extractor.head_view, HeadView) is head_view


def test_timesteps_limit_stops_first(tmp_path):
    summary = train(tiny_config(episodes=100_000, timesteps=200), FAST, tmp_path)
    assert summary["stopped_by"] == "timesteps" and 200 <= summary["env_steps"] < 200 + 4


def test_time_limit_stops_first(tmp_path):
    summary = train(tiny_config(episodes=None, time_limit_minutes=0.05), FAST, tmp_path)
    assert summary["stopped_by"] == "time_limit" and summary["target_episodes"] is None
    assert 3.0 <= summary["wall_seconds"] < 30


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"timesteps": 0}, "timesteps must be at least 1"),
        ({"time_limit_minutes": 0}, "time limit must be positive"),
        ({"episodes": None}, "give at least one of episodes, timesteps or a time limit"),
    ],
)
def test_bad_limits(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**changes)


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
    config = TrainConfig(episodes=None, timesteps=15_000, n_envs=16, board_size=6, seed=0, exploration_steps=8_000)
    train(config, settings, tmp_path)
    trained = evaluate(load_model(tmp_path / "model.zip", settings), episodes=100)
    random = evaluate(RandomPolicy(BatchedSnakeVecEnv(1, board_size=6).observation_space), episodes=100)
    assert trained["mean_score"] >= random["mean_score"] + 0.5, (trained, random)
