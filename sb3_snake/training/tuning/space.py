"""What a search is: the base of every trial with its default budget, and :class:`TuneConfig`,
the whole search. What a trial draws is its learner's search space, declared beside the learner
(:mod:`sb3_snake.training.learners`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import TrainConfig

#: Where studies without ``--storage`` keep their journal and their files.
TUNE_DIR = Path("runs") / "tune"
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")
#: Minutes a trial trains when it is given neither a step nor a time budget: long enough to
#: rank hyperparameters by how fast they learn, short enough that a search runs many trials.
DEFAULT_TRIAL_MINUTES = 2.0


def trial_config(timesteps: int | None = None, time_limit_minutes: float | None = None, **changes: Any) -> TrainConfig:
    """The base of every trial: no episode limit, and the budget given (env steps, minutes or
    both), or :data:`DEFAULT_TRIAL_MINUTES` when neither is. ``changes`` are other
    :class:`TrainConfig` fields: the learner (``algo``, whose search space the trials draw from:
    :class:`~sb3_snake.training.learners.Learner`'s ``search_space``; the default learner's by
    default), the board size, the games."""
    if timesteps is None and time_limit_minutes is None:
        time_limit_minutes = DEFAULT_TRIAL_MINUTES
    return TrainConfig(episodes=None, timesteps=timesteps, time_limit_minutes=time_limit_minutes, **changes)


#: A study name is also its folder's name under :data:`TUNE_DIR`: no separators, no ``..``.
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class TuneConfig:
    """A search: its study, its workers' shares, and what one trial is."""

    study_name: str = "snake"  #: the study's name in its storage
    storage: str | None = None  #: None: runs/tune/<study>/journal.log; a .log path; or an SQLAlchemy URL
    n_trials: int = 20  #: trials this worker runs
    max_total_trials: int | None = None  #: trials of all workers together, at most
    n_jobs: int = 1  #: trials this worker runs at once (threads)
    sampler: str = "tpe"  #: tpe or random
    pruner: str = "median"  #: median, halving or none
    n_startup_trials: int = 5  #: trials drawn at random, and run unpruned, before TPE and pruning start
    n_evaluations: int = 4  #: greedy evaluations per trial, reported to the pruner
    eval_episodes: int = 16  #: greedy games per evaluation
    trial: TrainConfig = field(default_factory=trial_config)  #: the base of every trial
    seed: int | None = None  #: seeds the sampler (None: random)

    def __post_init__(self) -> None:
        checks = [
            (self.n_trials >= 1, f"n_trials must be at least 1, got {self.n_trials}"),
            (
                self.max_total_trials is None or self.max_total_trials >= 1,
                f"max_total_trials must be at least 1, got {self.max_total_trials}",
            ),
            (self.n_jobs >= 1, f"n_jobs must be at least 1, got {self.n_jobs}"),
            (self.sampler in SAMPLERS, f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}"),
            (self.pruner in PRUNERS, f"pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}"),
            (self.n_startup_trials >= 0, f"n_startup_trials must be at least 0, got {self.n_startup_trials}"),
            (self.n_evaluations >= 1, f"n_evaluations must be at least 1, got {self.n_evaluations}"),
            (self.eval_episodes >= 1, f"eval_episodes must be at least 1, got {self.eval_episodes}"),
            (
                self.trial.timesteps is not None or self.trial.time_limit_minutes is not None,
                "a trial needs a budget: give timesteps, time_limit_minutes or both",
            ),
            (bool(self.study_name.strip()), "study_name must not be empty"),
            (
                bool(STUDY_NAME.fullmatch(self.study_name)),
                f"study_name {self.study_name!r} is not a safe folder name: use letters, digits, '.', '_' "
                "and '-' (at most 100, starting with a letter or digit), as it names runs/tune/<study>/",
            ),
        ]
        problem = next((message for ok, message in checks if not ok), "")
        if problem:
            raise UsageError(problem)

    @property
    def folder(self) -> Path:
        """Where the study's files go (and its journal, when no storage is given)."""
        return TUNE_DIR / self.study_name
