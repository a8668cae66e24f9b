"""SnakeDQN as the run knows it (``--algo dqn``): its arguments, the memory it holds, how a saved
model resumes (with its replay buffer), what the summary reads back, and the space ``tune``
searches. Registered in :data:`sb3_snake.training.learners.LEARNERS`."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import flag_of, short_flag
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs.rules import board_options, board_space
from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.persistence import (
    legacy_replay_buffer_path,
    load_replay_buffer,
    replay_buffer_path,
    saved_board_options,
)
from sb3_snake.training.config import EXTRACTOR_SIZES, MODEL_FIELDS, TrainConfig, fields_of
from sb3_snake.training.schedule import schedule_kwargs, update_schedule

if TYPE_CHECKING:
    import optuna

#: What the extractor builds for a keyword that a saved model's ``policy_kwargs`` leave out.
EXTRACTOR_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(SnakeAttentionExtractor).parameters.items()
    if parameter.default is not parameter.empty
}
#: What a loaded model takes from a resumed run's config: its SnakeDQN arguments that do not shape it.
CHANGEABLE_ON_RESUME = fields_of(lambda role: role.model_argument and not role.fixed)


def arguments(config: TrainConfig) -> tuple[str, dict[str, Any]]:
    """SnakeDQN's policy (the attention policy, its only one here) and arguments for ``config``."""
    return "AttentionPolicy", config.dqn_kwargs()


def network(config: TrainConfig) -> dict[str, Any]:
    """The ``policy_kwargs`` ``auto`` measures SnakeDQN's step on."""
    return config.policy_kwargs()


def check(config: TrainConfig) -> None:
    """Refuse a batch the replay buffer cannot hold."""
    config.check_batch_size()


def memory(config: TrainConfig, observation: int, games: int) -> dict[str, int]:
    """Bytes SnakeDQN holds beside its games: the replay buffer, online and target networks with
    gradients and Adam's moments, and one batch."""
    space = board_space(config.board_size, config.countdown, config.reachable)
    sizes = config.policy_kwargs()["features_extractor_kwargs"]
    try:
        with torch.device("meta"):  # shapes only: no memory is taken, however large
            extractor = SnakeAttentionExtractor(space, **sizes)
    except (RuntimeError, OverflowError, ValueError, TypeError, MemoryError) as error:
        raise UsageError(
            f"a network of {sizes} cannot even be laid out ({error})",
            fix={"embed_dim": "lower", "head_view_dim": "lower"},
        ) from None
    parameters = sum(parameter.numel() for parameter in extractor.parameters())
    head_view_inputs = space.shape[0] * (2 * config.board_size - 1) ** 2 if config.head_view else 0
    return {
        "replay buffer": config.buffer_size * (2 * observation + 24),
        "games": games,
        "networks": 5 * 4 * parameters,
        "one batch": 4 * 4 * config.planned_batch_size * (head_view_inputs + observation),
    }


def saved_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig values of a saved SnakeDQN. Its update schedule is kept as the replay
    ratio, so it follows a new batch size or number of games; ``train_freq`` and
    ``gradient_steps`` are kept as such only where the model had them set explicitly."""
    saved, policy_kwargs = metadata["hyperparameters"], metadata["policy_kwargs"] or {}
    extractor = trained_extractor(policy_kwargs)
    values = {name: saved[name] for name in MODEL_FIELDS if name in saved}
    head_view_dim = extractor["head_view_dim"]
    replay_ratio = saved["batch_size"] * saved["gradient_steps"] / (saved["train_freq"] * metadata["n_envs"])
    values.update(
        algo="dqn",
        n_envs=metadata["n_envs"],
        board_size=metadata["observation_shape"][-1],
        **saved_board_options(metadata),
        egocentric=metadata["n_actions"] == 3,
        dueling=bool(policy_kwargs.get("dueling", False)),
        head_view=head_view_dim != 0,
        head_view_dim=head_view_dim or TrainConfig.head_view_dim,
        embed_dim=extractor["embed_dim"],
        num_layers=extractor["num_layers"],
        conv_stem=extractor["conv_stem"],
        seed=saved.get("seed") or 0,
        replay_ratio=replay_ratio,
        early_steps=saved.get("early_steps", 0),
        food_shaping=saved.get("food_shaping", 0.0),  # models saved before shaping trained without it
        symmetry_augmentation=saved.get("symmetry_augmentation", False),  # as food_shaping
        early_replay_ratio=saved.get("early_update_fraction", 1.0) * replay_ratio,
        learning_rate_half_life=saved.get("learning_rate_half_life", 0),  # older models trained at one rate
        safe_exploration=saved.get("safe_exploration", False),  # older models explored uniformly
    )
    schedule = (saved["train_freq"], saved["gradient_steps"])
    if update_schedule(TrainConfig(**values)) != schedule:
        values.update(train_freq=schedule[0], gradient_steps=schedule[1])
    return values


def trained_extractor(policy_kwargs: dict[str, Any]) -> dict[str, int]:
    """The extractor sizes a saved model was built with (``embed_dim``, ``num_layers``,
    ``head_view_dim``), taking the extractor's own default for a size its ``policy_kwargs`` leave
    out (``num_layers`` before sb3-snake had the option)."""
    given = policy_kwargs.get("features_extractor_kwargs") or {}
    return {name: given.get(name, EXTRACTOR_DEFAULTS[name]) for name in EXTRACTOR_SIZES}


def resume(model: SnakeDQN, config: TrainConfig, path: Path, trusted: bool) -> None:
    """Make a loaded SnakeDQN train as ``config`` says (refusing what cannot change on resume),
    and load the replay buffer saved beside its file."""
    apply_config(model, config)
    _load_saved_replay_buffer(model, path, trusted)


def apply_config(model: SnakeDQN, config: TrainConfig) -> None:
    """Make a loaded model train as ``config`` says; refuse (UsageError) what cannot change on resume."""
    trained = {
        "board_size": model.observation_space.shape[-1],
        **board_options(model.observation_space),
        "egocentric": model.action_space.n == 3,
        "dueling": bool(model.policy_kwargs.get("dueling", False)),
        **trained_extractor(model.policy_kwargs),
        "n_steps": model.n_steps,
    }
    for name, wanted in config.network().items():
        if wanted != trained[name]:
            switched = name == "head_view_dim" and 0 in (wanted, trained[name])  # the head view on or off
            flag = short_flag(flag_of(TrainConfig, "head_view" if switched else name))
            raise UsageError(
                f"{flag} cannot change on resume: the model was trained with {trained[name]}, this run asks for "
                f"{wanted}; leave {flag} out or start a new run"
            )
    changes = {name: getattr(config, name) for name in CHANGEABLE_ON_RESUME}
    model.set_hyperparameters(**changes, **schedule_kwargs(config), verbose=config.verbose)


def _load_saved_replay_buffer(model: SnakeDQN, model_path: Path, trusted: bool) -> None:
    buffer, legacy = replay_buffer_path(model_path), legacy_replay_buffer_path(model_path)
    if buffer.is_file():
        load_replay_buffer(model, buffer)
    elif legacy.is_file():
        if not trusted:
            raise UsageError(
                f"{legacy} is a pickled replay buffer, which can run code when loaded: move it away to resume "
                "without it, or load it trusted",
                fix={"trust_model": True},
            )
        try:
            model.load_replay_buffer(legacy)
        except Exception as error:  # noqa: BLE001 - a truncated or foreign pickle
            raise UsageError(f"replay buffer {legacy} cannot be read ({type(error).__name__}: {error})") from None


def hyperparameters(model: SnakeDQN) -> dict[str, Any]:
    """What a SnakeDQN really trains with, read from it, and its replay ratio as it came out."""
    values = model.hyperparameters()
    actual_ratio = values["batch_size"] * values["gradient_steps"] / (values["train_freq"] * model.n_envs)
    return {
        **values,
        "policy": "AttentionPolicy",
        "replay_buffer": type(model.replay_buffer).__name__,
        "n_envs": model.n_envs,
        "replay_ratio": actual_ratio,
        "train_freq": values["train_freq"],
        "gradient_steps": values["gradient_steps"],
    }


def log_interval(config: TrainConfig) -> int:
    """SB3 counts DQN's ``log_interval`` in episodes: one line per round of games."""
    return max(1, config.n_envs)


#: Set in every trial beside what it draws: the trial trains its sampled replay ratio from the
#: first update, as a short trial would otherwise end inside ``train``'s early phase and never
#: reach the ratio it was given. ``best_hyperparameters.json`` carries it too, so ``train
#: --hyperparams`` trains as the trial did.
SEARCH_FIXED = {"early_steps": 0}


def search_space(trial: optuna.Trial) -> dict[str, Any]:
    """What ``tune --algo dqn`` draws, and its range (docs/tuning.md shows it as a table)."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 2e-3, log=True),
        "gamma": trial.suggest_categorical("gamma", [0.95, 0.98, 0.99, 0.995]),
        "batch_size": trial.suggest_categorical("batch_size", [128, 256, 512, 1024]),
        "replay_ratio": trial.suggest_categorical("replay_ratio", [8.0, 16.0, 32.0, 64.0]),
        "target_update_interval": trial.suggest_categorical("target_update_interval", [250, 500, 1000, 2000, 4000]),
        "exploration_steps": trial.suggest_categorical("exploration_steps", [2_000, 5_000, 10_000, 20_000]),
        "exploration_final_eps": trial.suggest_float("exploration_final_eps", 0.0, 0.05),
        "n_steps": trial.suggest_categorical("n_steps", [1, 3, 5]),
        "double_dqn": trial.suggest_categorical("double_dqn", [False, True]),
        "dueling": trial.suggest_categorical("dueling", [False, True]),
        "symmetry_augmentation": trial.suggest_categorical("symmetry_augmentation", [False, True]),
        "food_shaping": trial.suggest_categorical("food_shaping", [0.0, 0.5, 1.0, 2.0]),
        "countdown": trial.suggest_categorical("countdown", [False, True]),
        "reachable": trial.suggest_categorical("reachable", [False, True]),
        "egocentric": trial.suggest_categorical("egocentric", [False, True]),
        "long_starts": trial.suggest_categorical("long_starts", [0.0, 0.1, 0.25]),
        "stall_growth": trial.suggest_categorical("stall_growth", [0, 2, 4]),
        "embed_dim": trial.suggest_categorical("embed_dim", [16, 32, 64]),
        "num_layers": trial.suggest_categorical("num_layers", [0, 1, 2]),
        "head_view_dim": trial.suggest_categorical("head_view_dim", [32, 64, 128]),
    }


#: The functions :class:`~sb3_snake.training.learners.Learner` takes, by field.
RUN_SIDE = {
    "arguments": arguments,
    "network": network,
    "check": check,
    "memory": memory,
    "memory_fix": "buffer_size",
    "saved_config": saved_config,
    "resume": resume,
    "hyperparameters": hyperparameters,
    "log_interval": log_interval,
    "search_space": search_space,
    "search_fixed": SEARCH_FIXED,
}
