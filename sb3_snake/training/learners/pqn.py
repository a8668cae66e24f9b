"""PQN as the run knows it (``--algo pqn``, the default learner): its arguments, the memory it
holds, how a saved model resumes, what the summary reads back, and the space ``tune`` searches.
Registered in :data:`sb3_snake.training.learners.LEARNERS`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import flag_of, short_flag
from sb3_snake.persistence import saved_board_options
from sb3_snake.pqn.pqn import PQN
from sb3_snake.q_learning.save_format import policy_alias
from sb3_snake.q_learning.save_schema import PQN_HYPERPARAMETERS
from sb3_snake.training.config import OPTIONS, PQN_ARGUMENTS, TrainConfig
from sb3_snake.training.roles import POLICY_ALIASES_BY_OPTION

if TYPE_CHECKING:
    import optuna

#: ``--policy`` of each policy alias a PQN file names.
OPTION_OF_POLICY = {alias: option for option, alias in POLICY_ALIASES_BY_OPTION.items()}
#: TrainConfig fields that a saved PQN's hyperparameters hold under the same name (not SnakeDQN's
#: ``n_steps``, its n-step returns, which PQN's rollout length shares a name with).
PQN_CONFIG_FIELDS = tuple(
    name for name in PQN_HYPERPARAMETERS if name in OPTIONS and OPTIONS[name].role.learner in (None, "pqn")
)
#: The option of each PQN argument that an option names otherwise (its rollout: ``rollout_steps``).
PQN_OPTIONS = {argument: name for name, argument in PQN_ARGUMENTS.items() if argument != name}
#: PQN rollouts between SB3's log lines (40,960 env steps with its 128 games).
LOG_INTERVAL = 10


def arguments(config: TrainConfig) -> tuple[str, dict[str, Any]]:
    """PQN's policy (``--policy``) and arguments for ``config``."""
    return POLICY_ALIASES_BY_OPTION[config.policy], {**config.pqn_kwargs(), "policy_kwargs": config.pqn_policy_kwargs()}


def network(config: TrainConfig) -> dict[str, Any]:
    """The policy ``auto`` measures PQN's step on."""
    return {"policy": POLICY_ALIASES_BY_OPTION[config.policy], **config.pqn_policy_kwargs()}


def check(config: TrainConfig) -> None:
    """Nothing beyond the config's own checks: a batch that does not divide the rollout is refused there."""


#: Features PQN's network has before its 256-wide LayerNorm layers, by policy, for a board of
#: ``side`` with ``observation`` inputs: the flat board, the CNN's 64 channels at a quarter of the
#: side (two stride-2 convolutions), or the attention extractor's pooled features (about 2 x 256).
_FEATURES = {
    "mlp": lambda side, observation: observation,
    "cnn": lambda side, observation: 64 * math.ceil(side / 4) ** 2,
    "attention": lambda side, observation: 512,
}


def memory(config: TrainConfig, observation: int, games: int) -> dict[str, int]:
    """Bytes a PQN run holds: its rollout (uint8 boards, and a few numbers a sample), its games,
    one network with gradients and Adam's two moments, and one minibatch in float32; each member
    of a ``--population`` holds its own rollout, games and network."""
    features = _FEATURES[config.policy](config.board_size, observation)
    parameters = features * 256 + 256 * 256 + 8 * 256
    members = config.population
    return {
        "rollout": members * config.rollout_samples * (observation + 24),
        "games": members * games,
        "network": members * 4 * 4 * parameters,
        "one minibatch": 4 * 4 * config.planned_batch_size * (observation + 3 * 256),
    }


def saved_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig values of a saved PQN; its batch size is its rollout cut into its minibatches."""
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


def resume(model: PQN, config: TrainConfig, path: Path, trusted: bool) -> None:
    """Make a loaded PQN train as ``config`` says: a new learning rate is taken; any other value
    that differs from the model's is refused (UsageError), since its rollout, minibatches, targets
    and captured step were built for the values it has. PQN keeps nothing beside its file, and
    the file holds one learner (a population's best), so a population cannot resume."""
    if config.population > 1:
        raise UsageError(
            "--population cannot resume a saved model: the file holds one learner (its population's best); "
            "leave --population out to continue it, or start a new run"
        )
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


def hyperparameters(model: PQN) -> dict[str, Any]:
    """What a PQN really trains with, read from it, under the options' names."""
    return {
        **{PQN_OPTIONS.get(name, name): value for name, value in model.hyperparameters().items()},
        "policy": policy_alias(model) or type(model.policy).__name__,
        "n_envs": model.n_envs,
        "batch_size": model.batch_size,
        "gradient_samples_per_env_step": model.n_epochs,
        "population": model.population,
        "population_interval": model.population_interval,
    }


def log_interval(config: TrainConfig) -> int:
    """SB3 counts PQN's ``log_interval`` in rollouts."""
    return LOG_INTERVAL


def search_space(trial: optuna.Trial) -> dict[str, Any]:
    """What ``tune --algo pqn`` draws, and its range (docs/tuning.md shows it as a table): the
    levers of PQN's own measurements (passes per rollout, epsilon's decay, lambda, averaging).
    The batch sizes are the same for every trial of a study (Optuna's choices may not change
    within one); a size that does not divide a trial's rollout fails that trial with the reason."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 2e-3, log=True),
        "gamma": trial.suggest_categorical("gamma", [0.98, 0.99, 0.995]),
        "q_lambda": trial.suggest_categorical("q_lambda", [0.5, 0.65, 0.8, 0.9]),
        "n_epochs": trial.suggest_categorical("n_epochs", [2, 4, 8]),
        "batch_size": trial.suggest_categorical("batch_size", [64, 128, 256, 512]),
        "exploration_steps": trial.suggest_categorical("exploration_steps", [10_000, 25_000, 50_000, 100_000]),
        "exploration_final_eps": trial.suggest_float("exploration_final_eps", 0.0, 0.02),
        "averaging_half_life": trial.suggest_categorical("averaging_half_life", [0, 25_000, 100_000]),
        "food_shaping": trial.suggest_categorical("food_shaping", [0.0, 0.5, 1.0, 2.0]),
        "policy": trial.suggest_categorical("policy", ["mlp", "cnn", "attention"]),
    }


#: The functions :class:`~sb3_snake.training.learners.Learner` takes, by field.
RUN_SIDE = {
    "arguments": arguments,
    "network": network,
    "check": check,
    "memory": memory,
    "memory_fix": "rollout_steps",
    "saved_config": saved_config,
    "resume": resume,
    "hyperparameters": hyperparameters,
    "log_interval": log_interval,
    "search_space": search_space,
    "search_fixed": {},
}
