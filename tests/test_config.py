"""``TrainConfig``: its checks, its fields' roles, the update schedule and the memory a run needs."""

from dataclasses import dataclass, fields, replace

import pytest

from sb3_snake.common.errors import UsageError
from sb3_snake.dqn.snake_dqn import HYPERPARAMETERS
from sb3_snake.training.config import (
    DEFAULT_EPISODES,
    DQN,
    ENVIRONMENT,
    EXTRACTOR_DEFAULTS,
    EXTRACTOR_SIZES,
    HYPERPARAMETER_FIELDS,
    MODEL_FIELDS,
    NETWORK_FIELDS,
    RUN,
    Role,
    TrainConfig,
    option,
    option_fields,
)
from sb3_snake.training.memory import check_memory, memory_estimate
from tests.conftest import tiny_config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"episodes": 0}, "episodes must be at least 1, got 0"),
        ({"board_size": 3}, "board_size must be an integer >= 4, got 3"),
        ({"device": "tpu"}, "device must be auto, cpu or cuda, got 'tpu'"),
        ({"replay_ratio": 0}, "replay_ratio must be above 0 and at most 4096 .* got 0"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ({"select_every": 0}, "select_every must be at least 1"),
        ({"select_episodes": 0}, "select_episodes must be at least 1"),
        ({"compile_after": -1}, "compile_after must be at least 0, got -1"),
        ({"early_replay_ratio": 0}, "early_replay_ratio must be above 0 and at most 4096 .* got 0"),
        ({"early_steps": -1}, "early_steps must be at least 0, got -1"),
        ({"learning_rate_half_life": -1}, "learning_rate_half_life must be at least 0, got -1"),
        ({"time_limit_minutes": float("nan")}, "time limit must be a positive number of minutes, got nan"),
        ({"learning_rate": float("inf")}, "learning_rate must be a positive finite number, got inf"),
        ({"learning_rate": float("nan")}, "learning_rate must be a positive finite number, got nan"),
        ({"replay_ratio": float("inf")}, "replay_ratio must be above 0 and at most 4096 .* got inf"),
        ({"gamma": 1.5}, "gamma must be from 0 to 1"),
        ({"board_size": 1000}, "board_size must be at most 256, got 1000"),
        ({"seed": 2**64}, "seed must be from 0 to 4294967295"),
        ({"seed": -1}, "seed must be from 0 to 4294967295"),
        ({"exploration_final_eps": float("nan")}, "exploration_final_eps must be from 0 to 1"),
        ({"batch_size": 0}, "batch_size must be a positive integer or auto, got 0"),
        ({"batch_size": "big"}, "batch_size must be a positive integer or auto, got 'big'"),
    ],
)
def test_bad_config(changes, message):
    with pytest.raises(UsageError, match=message):
        tiny_config(**changes)


def test_update_schedule_meets_the_replay_ratio():
    config = TrainConfig(n_envs=16, replay_ratio=32)
    assert replace(config, batch_size=512).update_schedule() == (1, 1)  # 512 samples per 16 env steps
    assert replace(config, batch_size=4096).update_schedule() == (8, 1)
    assert replace(config, batch_size=64).update_schedule() == (1, 8)
    assert TrainConfig(n_envs=16, train_freq=3, gradient_steps=2, batch_size=512).update_schedule() == (3, 2)


def test_an_auto_batch_size_plans_for_the_largest_it_may_choose_and_schedules_nothing_until_resolved():
    auto = TrainConfig(batch_size="auto", buffer_size=1_000)
    assert auto.planned_batch_size == 512  # the largest candidate that fits the buffer
    assert TrainConfig(batch_size="auto").planned_batch_size == 2048
    with pytest.raises(UsageError, match="batch_size is auto: resolve it first"):
        auto.dqn_kwargs()
    with pytest.raises(UsageError, match="batch size 64 is larger than the replay buffer \\(32 transitions\\)"):
        TrainConfig(batch_size=64, buffer_size=32).check_batch_size()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"timesteps": 0}, "timesteps must be at least 1"),
        ({"time_limit_minutes": 0}, "time limit must be a positive number of minutes"),
    ],
)
def test_bad_limits(changes, message):
    with pytest.raises(UsageError, match=message):
        tiny_config(**changes)


def test_no_limit_means_the_default_episodes():
    assert TrainConfig().episodes == DEFAULT_EPISODES
    assert TrainConfig(time_limit_minutes=1).episodes is None


@pytest.mark.parametrize(("changes", "part"), [({"n_envs": 100_000_000}, "games"), ({"buffer_size": 10**10}, "replay")])
def test_memory_needed_is_stated_up_front(changes, part):
    config = tiny_config(**changes)
    with pytest.raises(UsageError, match=rf"this run needs about [\d.]+ GiB \(.*{part}.*\) but 1.0 GiB are available"):
        check_memory(config, available=2**30)
    check_memory(tiny_config(), available=2**30)  # a small run fits


def test_memory_estimate_grows_with_what_it_holds():
    small, large = memory_estimate(tiny_config()), memory_estimate(tiny_config(buffer_size=20_000))
    assert large["replay buffer"] == 10 * small["replay buffer"] and large["networks"] == small["networks"]
    with_view, without = memory_estimate(tiny_config()), memory_estimate(tiny_config(head_view=False))
    assert with_view["networks"] > without["networks"]
    assert memory_estimate(tiny_config(batch_size=64))["one batch"] == 4 * small["one batch"]


@pytest.mark.parametrize(
    ("changes", "batch_size", "fraction"),
    [({}, 128, 0.5), ({}, 512, 0.5), ({"replay_ratio": 8}, 512, 2.0), ({"early_replay_ratio": 32}, 128, 1.0)],
)
def test_early_replay_ratio_is_a_fraction_of_the_scheduled_updates(changes, batch_size, fraction):
    """The early ratio over the ratio the update schedule really gives (16 games)."""
    kwargs = TrainConfig(**changes, batch_size=batch_size).dqn_kwargs()
    assert kwargs["batch_size"] == batch_size
    assert kwargs["early_update_fraction"] == pytest.approx(fraction)
    assert kwargs["early_steps"] == TrainConfig.early_steps


# ---------------------------------------------------------------- each field's role, declared once


def test_every_field_declares_its_role_and_the_sorts_follow_from_it():
    """The groupings that once were written out by hand, now read from each field's role."""
    roles = {f.name: f.metadata["role"] for f in option_fields()}
    assert [f.name for f in fields(TrainConfig)] == [*roles, "sources"]
    assert all(isinstance(role, Role) for role in roles.values())
    panels = {group: [name for name, role in roles.items() if role.group == group] for group in (RUN, ENVIRONMENT, DQN)}
    assert panels[ENVIRONMENT] == [
        "n_envs",
        "board_size",
        "seed",
        "device",
        "countdown",
        "egocentric",
        "stall_growth",
        "long_starts",
    ]
    assert panels[RUN] == ["episodes", "timesteps", "time_limit_minutes", "compile_after"] + [
        "compile_in_background",
        "checkpoint_every",
        "select_every",
        "select_episodes",
        "save_replay_buffer",
        "tensorboard_log",
        "verbose",
    ]
    assert set(MODEL_FIELDS) == {
        "learning_rate",
        "buffer_size",
        "learning_starts",
        "batch_size",
        "gamma",
        "target_update_interval",
        "exploration_initial_eps",
        "exploration_final_eps",
        "exploration_steps",
        "double_dqn",
        "n_steps",
        "symmetry_augmentation",
        "food_shaping",
        "learning_rate_half_life",
    }
    assert set(roles) - set(HYPERPARAMETER_FIELDS) == set(panels[RUN]) | {"device"}
    assert set(EXTRACTOR_SIZES) == {"embed_dim", "num_layers", "head_view_dim"}
    assert set(NETWORK_FIELDS) == {
        "board_size",
        "countdown",
        "egocentric",
        "dueling",
        "head_view",
        *EXTRACTOR_SIZES,
        "n_steps",
    }


def test_model_fields_are_saved_snake_dqn_arguments_and_extractor_sizes_its_keywords():
    assert set(MODEL_FIELDS) <= set(HYPERPARAMETERS)  # what the model saves, and so a resume reads back
    assert set(EXTRACTOR_SIZES) <= set(EXTRACTOR_DEFAULTS)


def test_the_network_folds_the_head_view_switch_into_its_size():
    assert TrainConfig().network() == {
        "board_size": 10,
        "countdown": False,
        "egocentric": True,
        "dueling": False,
        "head_view_dim": 64,
        "embed_dim": 32,
        "num_layers": 0,
        "n_steps": 1,
    }
    assert TrainConfig(head_view=False).network()["head_view_dim"] == 0
    assert TrainConfig(head_view=False).policy_kwargs()["features_extractor_kwargs"]["head_view_dim"] == 0


def test_an_option_may_name_its_env_key_and_flag():
    @dataclass(frozen=True)
    class Declared:
        batch_size: int = option(512, "Replay samples per gradient step.", Role(DQN), "--batch", "OPTIMAL_BATCH_SIZE")

    (declared,) = fields(Declared)
    assert declared.default == 512
    assert (declared.metadata["env"], declared.metadata["flag"]) == ("OPTIMAL_BATCH_SIZE", "--batch")


def test_the_batch_size_is_a_learning_value_that_env_may_set_declared_once():
    """``OPTIMAL_BATCH_SIZE`` and ``--batch-size`` set one TrainConfig field, a hyperparameter the
    model saves, whose default is SnakeDQN's own."""
    from sb3_snake.acceleration.settings import BATCH_SIZE_KEY, OptimizationSettings
    from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE

    (declared,) = [f for f in option_fields() if f.metadata["env"]]
    assert (declared.name, declared.metadata["env"], declared.default) == ("batch_size", BATCH_SIZE_KEY, 128)
    assert DEFAULT_BATCH_SIZE == 128 and "batch_size" in HYPERPARAMETER_FIELDS and "batch_size" in MODEL_FIELDS
    assert declared.metadata["values"].parse("AUTO") == "auto" and declared.metadata["role"].group == DQN
    assert "batch_size" not in OptimizationSettings.__dataclass_fields__


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"replay_ratio": 1e300}, "replay_ratio must be above 0 and at most 4096"),
        ({"early_replay_ratio": 5000}, "early_replay_ratio must be above 0 and at most 4096"),
        ({"gradient_steps": 1_000_000_000}, "gradient_steps must be 1 to 100000 per update"),
    ],
)
def test_absurd_update_sizes_are_refused_up_front(changes, message):
    with pytest.raises(UsageError, match=message):
        TrainConfig(**changes)


@pytest.mark.parametrize("changes", [{"embed_dim": 10**12}, {"head_view_dim": 10**12}, {"embed_dim": int(1e300)}])
def test_networks_too_large_are_a_range_error_up_front(changes):
    with pytest.raises(UsageError, match="must be .* to 65536, got"):
        TrainConfig(**changes)


def test_networks_within_range_that_do_not_fit_are_a_memory_error_up_front():
    with pytest.raises(UsageError, match="GiB are available"):
        check_memory(TrainConfig(embed_dim=65536, head_view_dim=65536), available=24 * 2**30)
