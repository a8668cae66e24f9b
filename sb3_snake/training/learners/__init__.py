"""The learners ``sb3-snake train`` trains, each declared once: its ``--algo`` name, the name its
model files give, its class, its defaults and ``--help`` panel, and what the run needs of it (the
model's arguments, the memory it holds, how a saved model resumes, what the summary reads back,
the space ``tune`` searches). The run, resume, memory, summary and tune read a learner from
:data:`LEARNERS` instead of switching on ``--algo``.

Adding a learner: its class in a folder of its own (beside ``dqn/`` and ``pqn/``), its run-side
functions in a module here, and one entry in :data:`LEARNERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb3_snake.common.errors import UsageError
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.pqn.pqn import PQN
from sb3_snake.training.learners import dqn, pqn
from sb3_snake.training.roles import DQN, LEARNER_DEFAULTS, PQN_GROUP


@dataclass(frozen=True)
class Learner:
    """One learner, as the run knows it. Each function takes the run's
    :class:`~sb3_snake.training.config.TrainConfig` (``config``) or what the learner's model file holds.

    :param algo: its ``--algo`` value.
    :param name: the name its model files give (``algorithm`` in their metadata) and the progress line shows.
    :param model_class: the SB3 algorithm class.
    :param panel: the ``--help`` panel of its own options.
    :param arguments: ``config`` -> the policy alias and keyword arguments of ``model_class``.
    :param network: ``config`` -> the policy and ``policy_kwargs`` ``auto`` measures its step on.
    :param check: ``config`` -> None, or UsageError for what this learner cannot run (before anything is measured).
    :param memory: ``(config, observation_size, games_bytes)`` -> bytes by part, beyond the games.
    :param memory_fix: the option that lowers its largest part, named in a refusal.
    :param saved_config: a model file's metadata -> the TrainConfig values it trained with.
    :param resume: ``(model, config, path, trusted)`` -> None: apply ``config`` to the loaded
        model (refusing what cannot change) and load what it keeps beside its file.
    :param hyperparameters: ``model`` -> what it really trains with, as the summary records it.
    :param log_interval: ``config`` -> SB3's ``log_interval`` (its own unit per learner).
    :param search_space: ``(trial, base)`` -> the hyperparameters ``tune`` draws for it (Optuna),
        given the trial's base config.
    :param search_fixed: what every trial of it sets beside what it draws (and the best trial's file keeps).
    :param replay_buffer: whether it keeps a replay buffer that a checkpoint may save.
    """

    algo: str
    name: str
    model_class: type
    panel: str
    arguments: Callable[[Any], tuple[str, dict[str, Any]]]
    network: Callable[[Any], dict[str, Any]]
    check: Callable[[Any], None]
    memory: Callable[[Any, int, int], dict[str, int]]
    memory_fix: str
    saved_config: Callable[[dict[str, Any]], dict[str, Any]]
    resume: Callable[[Any, Any, Path, bool], None]
    hyperparameters: Callable[[Any], dict[str, Any]]
    log_interval: Callable[[Any], int]
    search_space: Callable[[Any, Any], dict[str, Any]]
    search_fixed: Mapping[str, Any]
    replay_buffer: bool

    @property
    def defaults(self) -> Mapping[str, Any]:
        """The options whose default is this learner's own (:data:`~sb3_snake.training.roles.LEARNER_DEFAULTS`)."""
        return LEARNER_DEFAULTS[self.algo]


#: Every learner, by ``--algo``.
LEARNERS = {
    "dqn": Learner("dqn", "SnakeDQN", SnakeDQN, DQN, **dqn.RUN_SIDE),
    "pqn": Learner("pqn", "PQN", PQN, PQN_GROUP, **pqn.RUN_SIDE),
}


def learner(algo: str) -> Learner:
    """The learner ``--algo algo`` trains."""
    return LEARNERS[algo]


def learner_of_file(name: str, path: Path) -> Learner:
    """The learner whose model files give ``name``; UsageError naming ``path`` if none does."""
    for candidate in LEARNERS.values():
        if candidate.name == name:
            return candidate
    raise UsageError(f"model {path} is a {name} model, which sb3-snake train cannot continue")
