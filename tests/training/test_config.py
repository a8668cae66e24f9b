"""``TrainConfig``: its checks, its fields' roles, the update schedule and the memory a run needs;
and that every value it takes is one a model file holds, so that a model a run saves loads."""

import math
from dataclasses import dataclass, fields, replace

import pytest

from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import number, option, options_of
from sb3_snake.dqn.snake_dqn import HYPERPARAMETERS
from sb3_snake.training.config import (
    DEFAULT_EPISODES,
    EXTRACTOR_SIZES,
    HYPERPARAMETER_FIELDS,
    MAX_REPLAY_RATIO,
    MIN_REPLAY_RATIO,
    MODEL_FIELDS,
    NETWORK_FIELDS,
    OPTIONS,
    PQN_ARGUMENTS,
    SHARED_MODEL_FIELDS,
    TrainConfig,
    option_values,
)
from sb3_snake.training.learners.dqn import EXTRACTOR_DEFAULTS
from sb3_snake.training.memory import check_memory, memory_estimate
from sb3_snake.training.roles import DQN, ENVIRONMENT, LEARNER, PQN_DEFAULTS, PQN_GROUP, RUN, Role
from sb3_snake.training.schedule import schedule_kwargs, update_schedule
from tests.conftest import FAST, tiny_config


def option_bounds(name):
    """The lowest and highest value TrainConfig option ``name`` takes, or None for no range."""
    values = option_values(name)
    return (values.low, values.high) if values is not None and values.low is not None else None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"episodes": 0}, "episodes must be at least 1, got 0"),
        ({"board_size": 3}, "board_size must be from 4 to 256, got 3"),
        ({"device": "tpu"}, "device must be auto, cpu or cuda, got 'tpu'"),
        ({"replay_ratio": 0}, "replay_ratio must be from 0.001 to 4096, got 0"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ({"select_every": 0}, "select_every must be at least 1"),
        ({"select_episodes": 0}, "select_episodes must be at least 1"),
        ({"early_replay_ratio": 0}, "early_replay_ratio must be from 0.001 to 4096, got 0"),
        ({"early_steps": -1}, "early_steps must be from 0 to 9223372036854775807, got -1"),
        ({"learning_rate_half_life": -1}, "learning_rate_half_life must be from 0 to 9223372036854775807, got -1"),
        ({"time_limit_minutes": float("nan")}, "time limit must be a positive number of minutes, got nan"),
        ({"learning_rate": float("inf")}, "learning_rate must be from 1e-12 to 10, got inf"),
        ({"learning_rate": float("nan")}, "learning_rate must be from 1e-12 to 10, got nan"),
        ({"replay_ratio": float("inf")}, "replay_ratio must be from 0.001 to 4096, got inf"),
        ({"gamma": 1.5}, "gamma must be from 0 to 1"),
        ({"board_size": 1000}, "board_size must be from 4 to 256, got 1000"),
        ({"seed": 2**64}, "seed must be from 0 to 4294967295"),
        ({"seed": -1}, "seed must be from 0 to 4294967295"),
        ({"exploration_final_eps": float("nan")}, "exploration_final_eps must be from 0 to 1"),
        ({"batch_size": 0}, "batch_size must be from 1 to 1048576 or auto, got 0"),
        ({"batch_size": "big"}, "batch_size must be from 1 to 1048576 or auto, got 'big'"),
    ],
)
def test_bad_config(changes, message):
    with pytest.raises(UsageError, match=message):
        tiny_config(**changes)


def test_update_schedule_meets_the_replay_ratio():
    config = TrainConfig(algo="dqn", n_envs=16, replay_ratio=32)
    assert update_schedule(replace(config, batch_size=512)) == (1, 1)  # 512 samples per 16 env steps
    assert update_schedule(replace(config, batch_size=4096)) == (8, 1)
    assert update_schedule(replace(config, batch_size=64)) == (1, 8)
    assert update_schedule(TrainConfig(algo="dqn", n_envs=16, train_freq=3, gradient_steps=2, batch_size=512)) == (3, 2)


def test_an_auto_batch_size_plans_for_the_largest_it_may_choose_and_schedules_nothing_until_resolved():
    auto = TrainConfig(algo="dqn", batch_size="auto", buffer_size=1_000)
    assert auto.planned_batch_size == 512  # the largest candidate that fits the buffer
    assert TrainConfig(algo="dqn", batch_size="auto").planned_batch_size == 2048
    with pytest.raises(UsageError, match="batch_size is auto: resolve it first"):
        auto.dqn_kwargs()
    with pytest.raises(UsageError, match="batch size 64 is larger than the replay buffer \\(32 transitions\\)"):
        TrainConfig(algo="dqn", batch_size=64, buffer_size=32).check_batch_size()


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


@pytest.mark.parametrize(
    ("changes", "part"), [({"n_envs": 2**20, "board_size": 8}, "games"), ({"buffer_size": 2**32}, "replay")]
)
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
    kwargs = TrainConfig(algo="dqn", **changes, batch_size=batch_size).dqn_kwargs()
    assert kwargs["batch_size"] == batch_size
    assert kwargs["early_update_fraction"] == pytest.approx(fraction)
    assert kwargs["early_steps"] == TrainConfig.early_steps


# ---------------------------------------------------------------- each field's role, declared once


def test_every_field_declares_its_role_and_the_sorts_follow_from_it():
    """The groupings that once were written out by hand, now read from each field's role."""
    roles = {name: declared.role for name, declared in OPTIONS.items()}
    assert [f.name for f in fields(TrainConfig)] == [*roles, "sources"]
    assert all(isinstance(role, Role) for role in roles.values())
    groups = (RUN, ENVIRONMENT, LEARNER, DQN, PQN_GROUP)
    panels = {group: [name for name, role in roles.items() if role.group == group] for group in groups}
    assert sum(map(len, panels.values())) == len(roles)
    assert panels[ENVIRONMENT] == [
        "n_envs",
        "board_size",
        "seed",
        "device",
        "countdown",
        "reachable",
        "egocentric",
        "stall_growth",
        "long_starts",
    ]
    assert panels[RUN] == ["episodes", "timesteps", "time_limit_minutes"] + [
        "checkpoint_every",
        "select_every",
        "select_episodes",
        "eval_every_minutes",
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
        "safe_exploration",
        "fatal_move_targets",
        "stall_as_death",
        "averaging_half_life",
    }
    assert set(roles) - set(HYPERPARAMETER_FIELDS) == set(panels[RUN]) | {"device"}
    assert set(EXTRACTOR_SIZES) == {"embed_dim", "num_layers", "head_view_dim", "conv_stem"}
    assert set(NETWORK_FIELDS) == {
        "board_size",
        "countdown",
        "reachable",
        "egocentric",
        "dueling",
        "head_view",
        *EXTRACTOR_SIZES,
        "n_steps",
    }
    # Both learners take the learner panel's values by name; the PQN panel's are PQN's arguments.
    assert set(SHARED_MODEL_FIELDS) == set(panels[LEARNER]) - {"algo", "policy"}
    assert set(PQN_ARGUMENTS) == set(panels[PQN_GROUP]) and set(PQN_ARGUMENTS.values()) <= set(PQN_DEFAULTS)
    assert {roles[name].learner for name in panels[DQN]} == {"dqn"} and roles["save_replay_buffer"].learner == "dqn"


def test_model_fields_are_saved_snake_dqn_arguments_and_extractor_sizes_its_keywords():
    assert set(MODEL_FIELDS) <= set(HYPERPARAMETERS)  # what the model saves, and so a resume reads back
    assert set(EXTRACTOR_SIZES) <= set(EXTRACTOR_DEFAULTS)


def test_the_network_folds_the_head_view_switch_into_its_size():
    assert TrainConfig(algo="dqn").network() == {
        "board_size": 10,
        "countdown": False,
        "reachable": False,
        "egocentric": True,
        "dueling": False,
        "head_view_dim": 64,
        "embed_dim": 32,
        "num_layers": 0,
        "conv_stem": 0,
        "n_steps": 1,
    }
    assert TrainConfig(algo="dqn", head_view=False).network()["head_view_dim"] == 0
    assert TrainConfig(algo="dqn", head_view=False).policy_kwargs()["features_extractor_kwargs"]["head_view_dim"] == 0


def test_an_option_may_name_its_env_key_flag_and_values():
    @dataclass(frozen=True)
    class Declared:
        size: int = option(512, "Replay samples.", Role(DQN), key="MY_SIZE", flag="--batch", values=number(1, 9))

    (field,) = fields(Declared)
    declared = options_of(Declared)["size"]
    assert field.default == 512 and declared.help == "Replay samples." and declared.role == Role(DQN)
    assert (declared.key, declared.flag, declared.values.within) == ("MY_SIZE", "--batch", "from 1 to 9")


def test_the_batch_size_is_a_learning_value_that_env_may_set_declared_once():
    """``OPTIMAL_BATCH_SIZE`` and ``--batch-size`` set one TrainConfig field, for either learner (a
    hyperparameter SnakeDQN saves; PQN's minibatches follow from it), whose default is SnakeDQN's own."""
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE

    (name,) = [name for name, declared in OPTIONS.items() if declared.key]
    declared = OPTIONS[name]
    assert (name, declared.key, TrainConfig.batch_size) == ("batch_size", "OPTIMAL_BATCH_SIZE", 128)
    assert DEFAULT_BATCH_SIZE == 128 and "batch_size" in HYPERPARAMETER_FIELDS and "batch_size" in MODEL_FIELDS
    assert declared.values.parse("AUTO") == "auto" and declared.role.group == LEARNER and declared.role.learner is None
    assert "batch_size" not in OptimizationSettings.__dataclass_fields__


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"replay_ratio": 1e300}, "replay_ratio must be from 0.001 to 4096, got 1e[+]300"),
        ({"early_replay_ratio": 5000}, "early_replay_ratio must be from 0.001 to 4096, got 5000"),
        ({"gradient_steps": 1_000_000_000}, "gradient_steps must be from 1 to 100000, got 1000000000"),
    ],
)
def test_absurd_update_sizes_are_refused_up_front(changes, message):
    with pytest.raises(UsageError, match=message):
        TrainConfig(algo="dqn", **changes)


@pytest.mark.parametrize("changes", [{"embed_dim": 10**12}, {"head_view_dim": 10**12}, {"embed_dim": int(1e300)}])
def test_networks_too_large_are_a_range_error_up_front(changes):
    with pytest.raises(UsageError, match="must be .* to 65536, got"):
        TrainConfig(algo="dqn", **changes)


def test_networks_within_range_that_do_not_fit_are_a_memory_error_up_front():
    with pytest.raises(UsageError, match="GiB are available"):
        check_memory(TrainConfig(algo="dqn", embed_dim=65536, head_view_dim=65536), available=24 * 2**30)


# ---------------------------------------------------------------- what a run saves, a model file holds


def saved_ranges():
    """The save format's range of each TrainConfig field whose value a model file holds."""
    from sb3_snake.common.options import Values
    from sb3_snake.envs.rules import MIN_BOARD_SIZE
    from sb3_snake.q_learning.save_format import MAX_BOARD_SIZE
    from sb3_snake.q_learning.save_schema import EXTRACTOR_SCHEMA, HYPERPARAMETER_SCHEMA, MAX_ENVS

    ranges = {"n_envs": (1, MAX_ENVS), "board_size": (MIN_BOARD_SIZE, MAX_BOARD_SIZE)}
    for name in OPTIONS:
        schema = EXTRACTOR_SCHEMA if name in EXTRACTOR_SIZES else HYPERPARAMETER_SCHEMA
        if isinstance(schema.get(name), Values):
            ranges[name] = (schema[name].low, schema[name].high)
    return ranges


def test_every_value_a_model_file_holds_is_taken_within_the_files_range():
    """The writer's side of the one schema: each option whose value a model saves takes no value
    the reader refuses (``--replay-ratio 8`` saved an early fraction of 2.0, which the reader's
    range, 1e-12 to 1, refused); and beyond its bounds, each option is refused up front."""
    ranges = saved_ranges()
    assert {"seed", "learning_rate", "buffer_size", "batch_size", "n_steps", "embed_dim", "train_freq"} <= set(ranges)
    for name, (low, high) in ranges.items():
        ours = option_bounds(name)
        assert ours is not None and low <= ours[0] and ours[1] <= high, (name, ours, (low, high))
    for name in OPTIONS:
        bounds = option_bounds(name)
        if bounds is None:
            continue
        below = bounds[0] - (1 if isinstance(bounds[0], int) else abs(bounds[0]) / 2 or 1)
        with pytest.raises(UsageError, match=f"{name} must be"):
            TrainConfig(**{name: below, **learner_of(name)})
        if bounds[1] != math.inf:
            above = bounds[1] + 1 if isinstance(bounds[1], int) else bounds[1] * 2
            with pytest.raises(UsageError, match=f"{name} must be"):
                TrainConfig(**{name: above, **learner_of(name)})


def learner_of(name):
    """The learner an option needs to be given at all (each learner refuses the other's options);
    SnakeDQN for the options both take, as its replay options stand beside them here."""
    return {"algo": OPTIONS[name].role.learner or "dqn"}


@pytest.mark.parametrize("replay_ratio", [MIN_REPLAY_RATIO, 8.0, MAX_REPLAY_RATIO])
@pytest.mark.parametrize("early_replay_ratio", [MIN_REPLAY_RATIO, 16.0, MAX_REPLAY_RATIO])
@pytest.mark.parametrize(("n_envs", "batch_size"), [(1, 1), (1, 1 << 20), (16, 128), (1 << 20, 1 << 20)])
def test_the_schedule_at_either_end_of_the_ratios_is_one_a_model_file_holds(
    replay_ratio, early_replay_ratio, n_envs, batch_size
):
    """What the schedule computes is saved too: its train_freq, gradient_steps and early fraction
    at the ratios' ends, on one game or the most, at the smallest batch or the largest."""
    from sb3_snake.q_learning.save_schema import hyperparameter_problem

    config = TrainConfig(
        algo="dqn",
        replay_ratio=replay_ratio,
        early_replay_ratio=early_replay_ratio,
        n_envs=n_envs,
        batch_size=batch_size,
        buffer_size=1 << 20,
    )
    try:
        schedule = schedule_kwargs(config)
    except UsageError as error:  # a schedule a model file cannot hold is refused before training
        assert str(error).startswith("the update schedule of replay ratio") and "must be" in str(error)
        assert replay_ratio * n_envs / batch_size > 100_000  # only more gradient steps per update than any
        return
    assert all(not hyperparameter_problem(name, value) for name, value in schedule.items()), schedule


def test_a_given_schedule_a_model_file_cannot_hold_is_refused_in_one_line():
    config = TrainConfig(
        algo="dqn", train_freq=1 << 31, gradient_steps=1, batch_size=1, buffer_size=1, early_replay_ratio=4096
    )
    with pytest.raises(UsageError, match=r"gives hyperparameters.early_update_fraction .* must be a number from 0 to"):
        config.dqn_kwargs()


#: A run of a few env steps on the smallest board, learning nothing (its first update is never due),
#: so that a model at each end of each option is trained, saved and loaded in moments.
PROPERTY_RUN = {
    "algo": "dqn",
    "episodes": None,
    "timesteps": 16,
    "n_envs": 2,
    "board_size": 4,
    "seed": 0,
    "learning_starts": 16,
    "buffer_size": 64,
    "batch_size": 4,
    "embed_dim": 8,
    "head_view_dim": 4,
    "exploration_steps": 8,
    "select_episodes": 1,
    "device": "cpu",
}
#: Other values an option's end needs to make a run at all: a batch the buffer holds (and a buffer
#: that holds the batch); an update every 2**31 env steps of one gradient step, early or late (whose
#: share a model file bounds); for the most games, batches large enough that an update takes no
#: more gradient steps than a file holds.
COMPANIONS = {
    ("buffer_size", 1): {"batch_size": 1},
    ("batch_size", 1 << 20): {"buffer_size": 1 << 20},
    ("train_freq", 1 << 31): {"gradient_steps": 1, "early_replay_ratio": MIN_REPLAY_RATIO},
    ("n_envs", 1 << 20): {"batch_size": 1024, "buffer_size": 1 << 20},
}
#: Memory past which a test does not train a run: the sizes at the top of their ranges (the most
#: games, the widest layers, the largest board, buffer and batch) are checked against the file's
#: schema, as a model would describe them, instead.
TRAINABLE_BYTES = 256 * 2**20


def option_ends():
    for name in OPTIONS:
        bounds = option_bounds(name)
        if bounds is not None:
            yield from ((name, end) for end in bounds if end != math.inf)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "value"), list(option_ends()), ids=lambda value: f"{value}")
def test_a_model_trained_at_either_end_of_an_options_range_saves_and_loads(tmp_path, name, value):
    """For each option with bounds, a run at its lowest and its highest value saves a model that
    the safe loader (what ``eval`` uses) loads. A tune draw, ``--replay-ratio 8``, once saved a model
    nothing could load."""
    from sb3_snake.persistence import load_model
    from sb3_snake.training.run import train

    if OPTIONS[name].role.learner == "pqn":
        pqn_option_end_saves_and_loads(tmp_path, name, value)
        return
    config = TrainConfig(**{**PROPERTY_RUN, name: value, **COMPANIONS.get((name, value), {})})
    if sum(memory_estimate(config).values()) > TRAINABLE_BYTES:
        from sb3_snake.q_learning.save_format import metadata_problem

        assert metadata_problem(described_without_building(config)) == ""
        return
    train(config, FAST, tmp_path / "run")
    loaded = load_model(tmp_path / "run" / "model.zip")
    saved = loaded.hyperparameters()
    if name in saved:
        assert saved[name] == pytest.approx(value)


def pqn_option_end_saves_and_loads(tmp_path, name, value):
    """A PQN option's end: at the low end a run saves a model the safe loader loads with it; the
    high ends (rollouts of 2**31 moves, 100,000 passes) are checked against the file's range."""
    from sb3_snake.persistence import load_model
    from sb3_snake.pqn.population import POPULATION_ARGUMENTS
    from sb3_snake.q_learning.save_schema import PQN_HYPERPARAMETER_SCHEMA
    from sb3_snake.training.config import PQN_ARGUMENTS
    from sb3_snake.training.run import train

    argument = PQN_ARGUMENTS[name]
    held = argument not in POPULATION_ARGUMENTS  # a file holds one learner, not its population's settings
    if value != option_bounds(name)[0] and held:
        assert PQN_HYPERPARAMETER_SCHEMA[argument].check(value) == ""
        return
    run = {"algo": "pqn", "timesteps": 8, "n_envs": 2, "board_size": 4, "rollout_steps": 2, "batch_size": 4}
    if name == "rollout_steps":
        run["batch_size"] = 2 * value  # a minibatch of the whole rollout
    train(TrainConfig(**{**run, "device": "cpu", "episodes": None, name: value}), FAST, tmp_path / "run")
    loaded = load_model(tmp_path / "run" / "model.zip")
    if held:
        assert loaded.hyperparameters()[argument] == pytest.approx(value)
    else:  # the population's leader, saved as one learner
        assert loaded.population == 1 and argument not in loaded.hyperparameters()


def described_without_building(config):
    """The description (``sb3_snake.json``) a model of ``config`` would be saved with, from a
    SnakeDQN whose networks and buffer are never built (too large for a test machine)."""
    from gymnasium import spaces

    from sb3_snake import SnakeDQN
    from sb3_snake.dqn.policies import POLICY_ALIASES
    from sb3_snake.envs.rules import board_space
    from sb3_snake.q_learning import save_format

    model = SnakeDQN("AttentionPolicy", None, optimizations=FAST, _init_setup_model=False, **config.dqn_kwargs())
    model._convert_train_freq()
    model.observation_space = board_space(config.board_size, config.countdown)
    model.action_space, model.n_envs = spaces.Discrete(3 if config.egocentric else 4), config.n_envs
    policy = POLICY_ALIASES["AttentionPolicy"]
    model.policy = policy.__new__(policy)
    return save_format.metadata(model)
