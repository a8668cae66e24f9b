"""What a search is: the search space (every hyperparameter a trial draws, in one place), the
base of every trial with its default budget, and :class:`TuneConfig`, the whole search."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import TrainConfig

if TYPE_CHECKING:
    import optuna

#: Where studies without ``--storage`` keep their journal and their files.
TUNE_DIR = Path("runs") / "tune"
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")
#: Minutes a trial trains when it is given neither a step nor a time budget: long enough to
#: rank hyperparameters by how fast they learn, short enough that a search runs many trials.
DEFAULT_TRIAL_MINUTES = 2.0

#: A trial trains its sampled replay ratio from the first update: a short trial would otherwise
#: end inside ``sb3-snake train``'s early phase and never reach the ratio it was given.
#: ``best_hyperparameters.json`` carries it too, so ``train --hyperparams`` trains as the trial did.
ONE_RATIO = {"early_steps": 0}


def sample_hyperparameters(trial: optuna.Trial) -> dict[str, Any]:
    """The search space: every hyperparameter a trial draws, and its range (docs/tuning.md, "One machine,
    then many", shows it as a table)."""
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


def trial_config(timesteps: int | None = None, time_limit_minutes: float | None = None, **changes: Any) -> TrainConfig:
    """The base of every trial: no episode limit, and the budget given (env steps, minutes or
    both), or :data:`DEFAULT_TRIAL_MINUTES` when neither is. ``changes`` are other
    :class:`TrainConfig` fields (board size, games)."""
    if timesteps is None and time_limit_minutes is None:
        time_limit_minutes = DEFAULT_TRIAL_MINUTES
    changes = {"algo": "dqn", **changes}  # the learner whose space :func:`suggest` searches
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
