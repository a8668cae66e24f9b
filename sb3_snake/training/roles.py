"""What each option of :class:`~sb3_snake.training.config.TrainConfig` is to a run: its
:class:`Role` (the ``--help`` panel, whether a hyperparameter file may set it, whether a model
takes it by name, whether it is fixed once a model is built, which learner reads it), and the
learners themselves with the defaults that depend on which one trains."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sb3_snake.common.options import Option, Values
from sb3_snake.pqn.pqn import PQN

RUN, ENVIRONMENT = "Run, checkpoints and logging", "Environment"
LEARNER, DQN, PQN_GROUP = "Learner (both)", "DQN hyperparameters (--algo dqn)", "PQN hyperparameters (--algo pqn)"
#: The learners ``sb3-snake train`` trains: SnakeDQN (replay, target network) and PQN (many games,
#: Q(lambda), no replay buffer), both through the optimization layer.
ALGORITHMS = ("dqn", "pqn")
#: The learner ``sb3-snake train`` trains when ``--algo`` is not given: the one that plays best at
#: the quick start, at one minute and at fifteen (docs/benchmarks.md, "One system that wins").
DEFAULT_LEARNER = "pqn"
#: Why it is, as a run's summary says (the measurements: docs/benchmarks.md).
DEFAULT_LEARNER_REASON = (
    "the default learner: PQN played best of the learners at the quick start, at one minute and at fifteen, "
    "and fills the 10x10 board"
)
#: The policy alias of each ``--policy`` (SnakeDQN learns with the attention policy; PQN with any).
POLICY_ALIASES_BY_OPTION = {"mlp": "MlpPolicy", "cnn": "CnnPolicy", "attention": "AttentionPolicy"}
#: PQN's own defaults (its signature), which the options of the PQN group take.
PQN_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(PQN).parameters.items()
    if parameter.default is not parameter.empty
}
#: Where Snake's PQN departs from its class's generic defaults (purejaxql's, for any VecEnv):
#: four passes over each rollout and an epsilon that falls within the first 25,000 env steps.
#: Together they won the board per env step where the class's two passes and 100,000-step decay
#: were still far from it, and they make ``--episodes 1000`` a winner's run; apart, neither did
#: (docs/benchmarks.md, "One system that wins").
PQN_SNAKE_DEFAULTS = {"n_epochs": 4}
#: Options whose default depends on the learner: ``None`` in a config means "the learner's".
#: SnakeDQN's were measured for a replay learner of a few games (docs/benchmarks.md); PQN's are
#: its signature's (many games, no mirror images: they slowed it per env step), but for a short
#: epsilon decay (beside :data:`PQN_SNAKE_DEFAULTS`) and two that make its exploring games
#: Snake's: safe exploration, which PQN's class leaves off as it reads Snake boards only (on Snake
#: it won far more games per env step), and a final epsilon of 0.005, under which the exploring
#: games score within a few food of the greedy ones (docs/research-log.md, "PQN's levers per env step, 10x10").
LEARNER_DEFAULTS = {
    "dqn": {
        "policy": "attention",
        "n_envs": 16,
        "exploration_steps": 10_000,
        "exploration_final_eps": 0.02,
        "symmetry_augmentation": True,
        "learning_rate_half_life": 800_000,
        "safe_exploration": False,
        "fatal_move_targets": False,
        "stall_as_death": False,
        "averaging_half_life": 0,
    },
    "pqn": {
        "policy": "mlp",
        "n_envs": 128,
        "exploration_steps": 25_000,
        "exploration_final_eps": 0.005,
        "symmetry_augmentation": PQN_DEFAULTS["symmetry_augmentation"],
        "learning_rate_half_life": PQN_DEFAULTS["learning_rate_half_life"],
        "safe_exploration": True,
        # On for Snake here, off in PQN's class, which takes any VecEnv
        # (docs/research-log.md, "PQN's fatal moves and stalls in the package").
        "fatal_move_targets": True,
        "stall_as_death": True,
        "averaging_half_life": PQN_DEFAULTS["averaging_half_life"],
    },
}

#: Where each learner draws its batches from: a replay buffer, or the rollout it just played
#: (whose samples a batch size must then divide). The config needs it before any model exists.
BATCHES_FROM = {"dqn": "replay buffer", "pqn": "rollout"}

#: Where a value the learner's default gave says it came from (a config's ``sources``).
LEARNER_DEFAULT_SOURCES = {algo: f"{algo}'s default" for algo in LEARNER_DEFAULTS}


@dataclass(frozen=True)
class Role:
    """What a :class:`~sb3_snake.training.config.TrainConfig` field is to a run. Each field declares its role once, and
    everything that sorts the fields (the ``--help`` panels, what a hyperparameter file may
    set, what :class:`~sb3_snake.dqn.snake_dqn.SnakeDQN` takes by name, what a resumed model
    keeps, the extractor's sizes) is read from it.

    :param group: the ``--help`` panel of the field's option.
    :param hyperparameter: a value of what is learned, which a hyperparameter file (and
        ``tune``) may set; run limits, outputs and the device are not.
    :param model_argument: a :class:`~sb3_snake.dqn.snake_dqn.SnakeDQN` argument of the same
        name that the model saves among its hyperparameters, so a resumed run reads it back (and
        whose range is the one a model file may hold it in: :func:`~sb3_snake.training.config.option_values`).
    :param fixed: shapes the network or the replay buffer, so it cannot change on resume.
    :param extractor: a size the features extractor is built with (a keyword of
        :class:`~sb3_snake.networks.attention.SnakeAttentionExtractor`).
    :param learner: the one learner the field applies to (``"dqn"``, ``"pqn"``; ``None``:
        both). A run of the other learner refuses it when it is not at its default. A
        ``model_argument`` of a learner is an argument of that learner's class of the same name.
    """

    group: str
    hyperparameter: bool = False
    model_argument: bool = False
    fixed: bool = False
    extractor: bool = False
    learner: str | None = None


#: How long a run goes and what it leaves behind: limits, checkpoints, logs.
RUN_OPTION = Role(RUN)
#: What SnakeDQN alone leaves behind (its replay buffer).
DQN_RUN_OPTION = Role(RUN, learner="dqn")
#: Which learner, and its network (a resumed run keeps SnakeDQN and its attention policy: resume_config).
ALGORITHM = Role(LEARNER, hyperparameter=True)
#: Where a run computes.
MACHINE = Role(ENVIRONMENT)
#: The games a run plays: how many at once, and their seed.
GAMES = Role(ENVIRONMENT, hyperparameter=True)
#: The board, which the network's input is made for.
BOARD = Role(ENVIRONMENT, hyperparameter=True, fixed=True)
#: A value both learners take by name (SnakeDQN and PQN alike) and may change on resume.
LEARNING = Role(LEARNER, hyperparameter=True, model_argument=True)
#: A SnakeDQN value it takes by name and may change on resume.
REPLAY_LEARNING = Role(DQN, hyperparameter=True, model_argument=True, learner="dqn")
#: A DQN value the model takes by name that shapes its replay buffer.
REPLAY_SHAPE = Role(DQN, hyperparameter=True, model_argument=True, fixed=True, learner="dqn")
#: How often the model updates; turned into SnakeDQN's ``train_freq`` and ``gradient_steps``.
SCHEDULE = Role(DQN, hyperparameter=True, learner="dqn")
#: The Q-network's head and inputs.
NETWORK = Role(DQN, hyperparameter=True, fixed=True, learner="dqn")
#: A size of the features extractor.
EXTRACTOR = Role(DQN, hyperparameter=True, fixed=True, extractor=True, learner="dqn")
#: A PQN value (:class:`~sb3_snake.pqn.pqn.PQN`'s argument, named in :data:`~sb3_snake.training.config.PQN_ARGUMENTS`).
PQN_LEARNING = Role(PQN_GROUP, hyperparameter=True, learner="pqn")


def learner_problem(
    config: Any, options: Mapping[str, Option], defaults: Mapping[str, Any], values: Callable[[str], Values]
) -> str:
    """What is wrong with ``config``'s learner (a ``TrainConfig``): its ``algo`` and ``policy``, and
    any option set away from its default (``defaults``) that only the other learner reads."""
    for name in ("algo", "policy"):
        value = getattr(config, name)
        if (value is not None or name == "algo") and values(name).check(value):
            return f"{name} must be one of {values(name).words}, got {value!r}"
    chosen = config.source("policy") not in LEARNER_DEFAULT_SOURCES.values()  # not the other learner's default
    if config.algo == "dqn" and config.policy not in (None, "attention") and chosen:
        return f"policy {config.policy} is for the pqn learner (dqn's is attention): leave it out, or set algo to pqn"
    for name, declared in options.items():
        other = declared.role.learner
        if other in (None, config.algo) or getattr(config, name) == defaults[name]:
            continue
        return (
            f"{name} is for the {other} learner, and this run's algo is {config.algo}: "
            f"leave {name} out, or set algo to {other}"
        )
    return ""
