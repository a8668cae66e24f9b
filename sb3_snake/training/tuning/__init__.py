"""``sb3-snake tune``: hyperparameter search on Optuna, as RL Baselines3 Zoo runs it.

One machine or many, the same command: the study lives in an Optuna storage
(:mod:`~sb3_snake.training.tuning.storage`), a journal file (``runs/tune/<study>/journal.log`` by default, or
``--storage PATH.log``) or an RDB URL (``--storage sqlite:///study.db``, ``postgresql://...``) shared by every worker;
``--max-total-trials`` caps all workers' trials together. A trial (:mod:`~sb3_snake.training.tuning.trial`) trains
``--algo``'s learner on what its :class:`~sb3_snake.training.learners.Learner`'s ``search_space`` draws, reports
``n_evaluations`` greedy means on seeds of its own (:data:`~sb3_snake.training.tuning.trial.TUNE_SEED_OFFSET`) to the
pruner, and is recorded with its reason if it fails (user attribute ``failure``) while the study goes on.
:func:`~sb3_snake.training.tuning.report.write_report` writes the study's files.
Design notes: docs/design-notes.md, "sb3_snake/training/tuning/__init__.py".
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Each public name and the module that holds it. Imported on first use, so that the command
#: line can read the search's defaults (``space``) without importing Optuna and the training run.
_HOMES = {
    **dict.fromkeys(
        ("DEFAULT_TRIAL_MINUTES", "PRUNERS", "SAMPLERS", "TUNE_DIR", "TuneConfig", "trial_config"), "space"
    ),
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
