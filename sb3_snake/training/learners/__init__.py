"""The learners ``sb3-snake train`` trains, each declared once for the run: its ``--algo`` name,
the name its model files give, its class, and what the run needs of it (the model's arguments,
the memory it holds, how a saved model resumes, what the summary reads back, the space ``tune``
searches). The run, resume, memory, summary and tune read a learner from :data:`LEARNERS`
instead of switching on ``--algo``. What the layers below the run must know of a learner before
any is built sits with them, keyed the same way (:data:`REGISTERED_ELSEWHERE`; a test holds
their keys to :data:`LEARNERS`).
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
from sb3_snake.training.roles import LEARNER_DEFAULTS


@dataclass(frozen=True)
class Learner:
    """One learner, as the run knows it. Each function takes the run's
    :class:`~sb3_snake.training.config.TrainConfig` (``config``) or what the learner's model file holds.

    :param algo: its ``--algo`` value.
    :param name: the name its model files give (``algorithm`` in their metadata) and the progress line shows.
    :param model_class: the SB3 algorithm class.
    :param arguments: ``config`` -> the policy alias and keyword arguments of ``model_class``.
    :param network: ``config`` -> the ``policy_kwargs`` ``auto`` measures its step on (PQN's
        also name the policy, under ``policy``).
    :param check: ``config`` -> None, or UsageError for what this learner cannot run (before anything is measured).
    :param memory: ``(config, observation_size, games_bytes)`` -> bytes by part, its games' among them.
    :param memory_fix: the option that lowers its largest part, named in a refusal.
    :param saved_config: a model file's metadata -> the TrainConfig values it trained with.
    :param resume: ``(model, config, path, trusted)`` -> None: apply ``config`` to the loaded
        model (refusing what cannot change) and load what it keeps beside its file.
    :param hyperparameters: ``model`` -> what it really trains with, as the summary records it.
    :param log_interval: ``config`` -> SB3's ``log_interval`` (its own unit per learner).
    :param search_space: ``trial`` -> the hyperparameters ``tune`` draws for it (Optuna; the
        same choices for every trial of a study).
    :param search_fixed: what every trial of it sets beside what it draws (and the best trial's file keeps).
    """

    algo: str
    name: str
    model_class: type
    arguments: Callable[[Any], tuple[str, dict[str, Any]]]
    network: Callable[[Any], dict[str, Any]]
    check: Callable[[Any], None]
    memory: Callable[[Any, int, int], dict[str, int]]
    memory_fix: str
    saved_config: Callable[[dict[str, Any]], dict[str, Any]]
    resume: Callable[[Any, Any, Path, bool], None]
    hyperparameters: Callable[[Any], dict[str, Any]]
    log_interval: Callable[[Any], int]
    search_space: Callable[[Any], dict[str, Any]]
    search_fixed: Mapping[str, Any]

    @property
    def defaults(self) -> Mapping[str, Any]:
        """The options whose default is this learner's own (:data:`~sb3_snake.training.roles.LEARNER_DEFAULTS`)."""
        return LEARNER_DEFAULTS[self.algo]


#: Every learner, by ``--algo``.
LEARNERS = {
    "dqn": Learner("dqn", "SnakeDQN", SnakeDQN, **dqn.RUN_SIDE),
    "pqn": Learner("pqn", "PQN", PQN, **pqn.RUN_SIDE),
}
#: Where else a learner is named, keyed by ``--algo`` (``algo``) or by its files' name (``name``):
#: the options' defaults and where batches come from (the config reads them before a learner is
#: chosen), the step ``auto`` measures, the model file's schema, and how a file is rebuilt.
REGISTERED_ELSEWHERE = {
    "sb3_snake.training.roles.LEARNER_DEFAULTS": "algo",
    "sb3_snake.training.roles.BATCHES_FROM": "algo",
    "sb3_snake.autotune.resolve.METERS": "algo",
    "sb3_snake.q_learning.save_format.ALGORITHMS": "name",
    "sb3_snake.persistence.model_file.REBUILDERS": "name",
    "sb3_snake.persistence.model_file.TRUSTED_LOADERS": "name",
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
