"""Resuming: the config a saved model trained with, what may change on resume and what is refused."""

from dataclasses import replace

import pytest

from sb3_snake.common.errors import UsageError
from sb3_snake.persistence import load_model, read_metadata
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.resume import resume_config
from sb3_snake.training.run import build_model, train
from sb3_snake.training.schedule import update_schedule
from tests.conftest import FAST, rewrite_metadata, tiny_config


def test_resume_rejects_another_board_size(tmp_path):
    train(tiny_config(episodes=4), FAST, tmp_path)
    with pytest.raises(ValueError, match=r"trained on a 5x5 board, not 6x6; pass board_size=5"):
        build_model(tiny_config(board_size=6), FAST, resume=tmp_path / "model.zip")
    with pytest.raises(ValueError, match=r"trained without the countdown channel; pass countdown=False$"):
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


def test_resume_refuses_a_replay_buffer_recorded_on_the_other_view(tmp_path):
    """``train --resume`` of a board-wide model took the egocentric buffer beside it and trained on
    turned boards; either way round it is one line now."""
    import shutil

    for egocentric in (True, False):
        config = tiny_config(episodes=None, timesteps=32, egocentric=egocentric, save_replay_buffer=True)
        train(config, FAST, tmp_path / f"egocentric-{egocentric}")
        shutil.copy(tmp_path / f"egocentric-{egocentric}" / "model.replay.npz", tmp_path / f"{egocentric}.npz")
    for egocentric in (True, False):
        model = tmp_path / f"egocentric-{egocentric}" / "model.zip"
        shutil.copy(tmp_path / f"{not egocentric}.npz", model.with_name("model.replay.npz"))  # 32 env steps each
        view = "board-wide" if egocentric else "egocentric"
        with pytest.raises(UsageError, match=f"model.replay.npz was recorded on the {view} view"):
            train(tiny_config(episodes=None, timesteps=64, egocentric=egocentric), FAST, tmp_path / "c", resume=model)


@pytest.mark.parametrize("trusted", [False, True])
def test_a_resumed_run_compiles_as_its_settings_say(tmp_path, trusted):
    train(tiny_config(episodes=2), FAST, tmp_path / "a")
    settings = replace(FAST, use_torch_compile=True, compile_after=123, compile_in_background=True)
    model = build_model(tiny_config(), settings, resume=tmp_path / "a" / "model.zip", trusted=trusted)
    assert model.compile_state.background and model.compile_state.after == 123


def test_resume_applies_the_given_hyperparameters(tmp_path):
    """What --resume is given is what the model trains with, read back from the saved model."""
    train(tiny_config(episodes=4, learning_rate=5e-4, gamma=0.99), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=3, learning_rate=0.01, gamma=0.5, double_dqn=True)
    overridden = replace(config, batch_size=8, sources={"batch_size": "override"})
    summary = train(overridden, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
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
    assert (trained["train_freq"], trained["gradient_steps"]) == update_schedule(overridden) == (1, 16)  # ratio 32 kept


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
    ("name", "default", "before"),
    [("food_shaping", 1.0, 0.0), ("learning_rate_half_life", 800_000, 0), ("symmetry_augmentation", True, False)],
)
def test_resume_of_a_model_saved_before_an_option_trains_as_it_did(tmp_path, name, default, before):
    """Metadata without ``name`` (sb3-snake before the option) means a model that trained without
    it: it resumes that way, not at today's default."""
    train(tiny_config(episodes=2), FAST, tmp_path / "a")

    def without_it(metadata):
        del metadata["hyperparameters"][name]
        return metadata

    path = rewrite_metadata(tmp_path / "a" / "model.zip", tmp_path / "old.zip", without_it)
    assert getattr(TrainConfig(algo="dqn"), name) == default
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
    """(The environment and .env do not change it either: test_options.)"""
    train(tiny_config(episodes=4), FAST, tmp_path / "a")
    config = resume_config(tmp_path / "a" / "model.zip", episodes=2)
    assert config.batch_size == 16
    summary = train(config, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert summary["hyperparameters"]["batch_size"] == 16
    assert resume_config(tmp_path / "a" / "model.zip", batch_size=64).batch_size == 64


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
    with pytest.raises(UsageError, match=f"{flag} cannot change on resume: the model was trained with"):
        train(config, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    assert not (tmp_path / "b").exists()  # a failed start leaves no folder behind


def test_safe_exploration_is_saved_with_the_model_and_kept_on_resume(tmp_path):
    train(tiny_config(episodes=2, safe_exploration=True), FAST, tmp_path / "a")
    path = tmp_path / "a" / "model.zip"
    assert load_model(path).safe_exploration is True
    config = resume_config(path, episodes=2)
    assert config.safe_exploration is True and build_model(config, FAST, resume=path).safe_exploration is True


def test_a_conv_stem_is_built_and_kept_on_resume(tmp_path):
    train(tiny_config(episodes=2, conv_stem=8), FAST, tmp_path / "a")
    path = tmp_path / "a" / "model.zip"
    config = resume_config(path, episodes=2)
    assert config.conv_stem == 8 and build_model(config, FAST, resume=path).q_net.features_extractor.stem is not None
    with pytest.raises(UsageError, match="--conv-stem cannot change on resume"):
        build_model(replace(config, conv_stem=0), FAST, resume=path)
