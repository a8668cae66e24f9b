"""Resuming: the config a saved model trained with, and applying a config to a loaded model
(what cannot change on resume, such as the board or the network's shape, is refused)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import flag_of, short_flag
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs.rules import board_options
from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.persistence import saved_board_options, saved_metadata
from sb3_snake.pqn.pqn import PQN
from sb3_snake.q_learning.save_format import policy_alias
from sb3_snake.q_learning.save_schema import PQN_HYPERPARAMETERS
from sb3_snake.training.config import (
    EXTRACTOR_SIZES,
    MODEL_FIELDS,
    OPTIONS,
    TrainConfig,
    fields_of,
)
from sb3_snake.training.roles import POLICY_ALIASES_BY_OPTION
from sb3_snake.training.schedule import schedule_kwargs, update_schedule

#: What the extractor builds for a keyword that a saved model's ``policy_kwargs`` leave out.
EXTRACTOR_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(SnakeAttentionExtractor).parameters.items()
    if parameter.default is not parameter.empty
}
#: The learners a run resumes, by the name a model file gives (its ``algorithm``), and their ``--algo``.
RESUMABLE = {"SnakeDQN": "dqn", "PQN": "pqn"}
#: ``--policy`` of each policy alias a PQN file names.
OPTION_OF_POLICY = {alias: option for option, alias in POLICY_ALIASES_BY_OPTION.items()}
#: TrainConfig fields that a saved PQN's hyperparameters hold under the same name (not SnakeDQN's
#: ``n_steps``, its n-step returns, which PQN's rollout length shares a name with).
PQN_CONFIG_FIELDS = tuple(
    name for name in PQN_HYPERPARAMETERS if name in OPTIONS and OPTIONS[name].role.learner in (None, "pqn")
)
#: What a loaded model takes from a resumed run's config: its SnakeDQN arguments that do not shape it.
CHANGEABLE_ON_RESUME = fields_of(lambda role: role.model_argument and not role.fixed)


def resume_config(path: Path, trusted: bool = False, **changes: Any) -> TrainConfig:
    """The config the saved model at ``path`` trained with, with ``changes`` applied.

    Either learner's model resumes as the learner it is (``changes`` may not ask for the other).
    Run limits and run options are not part of a model and come from ``changes`` or the
    defaults; the batch size is the model's unless ``changes`` has one. SnakeDQN's update
    schedule is kept as the replay ratio, so it follows a new batch size or number of games;
    ``train_freq`` and ``gradient_steps`` are kept as such only where the model had them set
    explicitly (they differ from what its replay ratio gives). PQN's batch size is its rollout cut
    into its minibatches.
    """
    metadata = saved_metadata(path, trusted)
    learner = metadata.get("algorithm", "SnakeDQN")
    algo = RESUMABLE.get(learner)
    if algo is None:
        raise UsageError(f"model {path} is a {learner} model, which sb3-snake train cannot continue")
    if changes.get("algo", algo) != algo:
        raise UsageError(
            f"model {path} is a {learner} model, and the learner cannot change on resume: "
            "leave algo out, or start a new run"
        )
    values = _pqn_values(metadata) if algo == "pqn" else _dqn_values(metadata)
    return TrainConfig(**{**values, **changes})


def _pqn_values(metadata: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig values of a saved PQN."""
    saved, n_envs = metadata["hyperparameters"], metadata["n_envs"]
    return {
        **{name: saved[name] for name in PQN_CONFIG_FIELDS if name in saved},
        "algo": "pqn",
        "policy": OPTION_OF_POLICY[metadata["policy"]],
        "n_envs": n_envs,
        "board_size": metadata["observation_shape"][-1],
        **saved_board_options(metadata),
        "egocentric": metadata["n_actions"] == 3,
        "seed": saved.get("seed") or 0,
        "rollout_steps": saved["n_steps"],
        "batch_size": saved["n_steps"] * n_envs // saved["n_minibatches"],
    }


def _dqn_values(metadata: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig values of a saved SnakeDQN."""
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


def apply_pqn_config(model: PQN, config: TrainConfig) -> None:
    """Make a loaded PQN train as ``config`` says: a new learning rate is taken; any other value
    that differs from the model's is refused (UsageError), since its rollout, minibatches, targets
    and captured step were built for the values it has."""
    wanted = config.pqn_kwargs()
    if wanted["learning_rate"] != model.learning_rate:
        model.learning_rate = wanted["learning_rate"]
        model._setup_lr_schedule()
    fixed = {"policy": (config.policy, OPTION_OF_POLICY.get(policy_alias(model)))}
    fixed |= {name: (wanted[name], getattr(model, name)) for name in PQN_HYPERPARAMETERS if name in wanted}
    fixed.pop("seed", None)
    fixed.pop("learning_rate", None)
    for name, (asked, trained) in fixed.items():
        if asked != trained:
            config_name = {"n_steps": "rollout_steps", "n_minibatches": "batch_size"}.get(name, name)
            flag = short_flag(flag_of(TrainConfig, config_name))
            raise UsageError(
                f"{flag} cannot change when a PQN model resumes: it was trained with {trained}, this run asks for "
                f"{asked}; leave {flag} out or start a new run (only --learning-rate may change)"
            )


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
