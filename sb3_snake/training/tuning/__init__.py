"""``sb3-snake tune``: hyperparameter search on Optuna, as RL Baselines3 Zoo runs it.

One machine or many, the same command. The study lives in an Optuna storage
(:mod:`~sb3_snake.training.tuning.storage`):

- by default a journal file, ``runs/tune/<study>/journal.log`` (Optuna's ``JournalStorage`` on a
  ``JournalFileBackend``): no server, and safe for several processes on one machine;
- ``--storage PATH.log``: a journal file elsewhere (a shared file system, say);
- ``--storage URL``: Optuna's RDB storage, ``sqlite:///study.db``, ``postgresql://...`` or
  ``mysql+pymysql://...``; every machine runs the same command against it. The study is created
  once (``load_if_exists``) and ``--max-total-trials`` caps the trials of all workers together,
  exactly (:func:`~sb3_snake.training.tuning.trial.tune`). PostgreSQL needs
  ``pip install "sb3-snake[distributed]"``.

A trial (:mod:`~sb3_snake.training.tuning.trial`) trains ``SnakeDQN`` with the hyperparameters
of :func:`~sb3_snake.training.tuning.space.sample_hyperparameters` (the search space, in one
place) for the per-trial budget, evaluating greedily ``n_evaluations`` times on seeds of its own
(:data:`~sb3_snake.training.tuning.trial.TUNE_SEED_OFFSET`, apart from training's, ``eval``'s
and best-model selection's) and reporting each mean to Optuna, whose pruner may stop
it. Its value is the mean of a last greedy evaluation at the end of training. A trial whose loss
becomes NaN, that runs out of memory, or whose hyperparameters cannot work together is recorded
as failed with the reason (user attribute ``failure``), and the study goes on. Ctrl-C marks the
running trial failed and stops; the same command continues the study. The trial of a worker
killed outright (SIGKILL, a lost machine) is marked failed by the next worker to start a trial
and run again once (:func:`~sb3_snake.training.tuning.storage.fail_stale_trials`).

:func:`~sb3_snake.training.tuning.report.write_report` writes, into the study's folder:
``best_hyperparameters.json`` (for ``sb3-snake train --hyperparams``), ``trials.csv``, and
Optuna's own matplotlib plots (optimization history, parameter importances, intermediate values).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Each public name and the module that holds it. Imported on first use, so that the command
#: line can read the search's defaults (``space``) without importing Optuna and the training run.
_HOMES = {
    **dict.fromkeys(("DEFAULT_TRIAL_MINUTES", "ONE_RATIO", "PRUNERS", "SAMPLERS", "TUNE_DIR", "TuneConfig"), "space"),
    **dict.fromkeys(("sample_hyperparameters", "trial_config"), "space"),
    **dict.fromkeys(("load_study", "make_pruner", "make_sampler", "open_storage", "trial_slot_lock"), "storage"),
    **dict.fromkeys(("GRACE_PERIOD", "HEARTBEAT_INTERVAL", "MAX_RETRY", "fail_stale_trials"), "storage"),
    **dict.fromkeys(("best_line", "describe", "write_report"), "report"),
    **dict.fromkeys(("TUNE_SEED_OFFSET", "TrialEvaluation", "TrialFailed", "finish", "run_trial", "tune"), "trial"),
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
