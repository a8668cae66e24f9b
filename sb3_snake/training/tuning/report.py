"""What a study reports: one line per trial and the best so far, and the files
:func:`write_report` leaves in the study's folder (best hyperparameters, every trial, plots)."""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sb3_snake.training.learners import learner
from sb3_snake.training.tuning.storage import retry_of


def describe(trial: FrozenTrial) -> str:
    """One line: number, state, value, duration and parameters (and why it failed, or which trial
    of a dead worker it runs again)."""
    duration = trial.duration.total_seconds() if trial.duration else 0.0
    value = f"{trial.value:.2f}" if trial.value is not None else "-"
    params = ", ".join(f"{name}={_short(value)}" for name, value in trial.params.items())
    failure = f" ({trial.user_attrs['failure']})" if "failure" in trial.user_attrs else ""
    retried = retry_of(trial)
    retry = f" (retry of trial {retried})" if retried is not None else ""
    return f"trial {trial.number}: {trial.state.name} value {value} in {duration:.1f}s; {params}{failure}{retry}"


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def best_line(study: optuna.Study) -> str:
    try:
        best = study.best_trial
    except ValueError:
        return "best so far: none (no trial completed yet)"
    return f"best so far: trial {best.number}, value {best.value:.2f}"


#: What a study records of the games its trials play (study user attributes, set by ``tune``).
GAME_ATTRIBUTES = ("board_size", "n_envs")


def studied_learner(study: optuna.Study) -> str | None:
    """The learner whose space ``study`` searches (its user attribute ``algo``, set by ``tune``):
    None for a new study, ``dqn`` for one begun before ``tune`` searched either learner."""
    if "algo" in study.user_attrs:
        return study.user_attrs["algo"]
    return "dqn" if study.get_trials(deepcopy=False) else None


def write_report(study: optuna.Study, folder: Path) -> list[Path]:
    """Best hyperparameters (JSON), every trial (CSV) and Optuna's plots (PNG) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "trials.csv"]
    trials = study.get_trials(deepcopy=False)
    # Our own few columns rather than study.trials_dataframe(): that needs pandas, which the
    # package does not depend on, and would change the file's columns (params_*, user_attrs_*).
    names = sorted({name for trial in trials for name in trial.params})
    with open(written[0], "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["number", "state", "value", "duration_seconds", *names, "failure", "retry_of"])
        for trial in trials:
            duration = trial.duration.total_seconds() if trial.duration else ""
            params = [trial.params.get(name, "") for name in names]
            failure, retried = trial.user_attrs.get("failure", ""), retry_of(trial)
            writer.writerow([trial.number, trial.state.name, trial.value, duration, *params, failure, retried])
    completed = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if completed:
        best = folder / "best_hyperparameters.json"
        # The learner and games the study was run on go with it, so train --hyperparams replays it as tuned.
        games = {name: study.user_attrs[name] for name in GAME_ATTRIBUTES if name in study.user_attrs}
        algo = studied_learner(study) or "dqn"
        fixed = learner(algo).search_fixed
        best.write_text(json.dumps({"algo": algo, **games, **study.best_trial.params, **fixed}, indent=2) + "\n")
        written.append(best)
    written += _plots(study, folder)
    return written


def _plots(study: optuna.Study, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as plots

    chosen = (
        ("optimization_history", plots.plot_optimization_history),
        ("param_importances", plots.plot_param_importances),
        ("intermediate_values", plots.plot_intermediate_values),
    )
    with warnings.catch_warnings():
        # Optuna marks its matplotlib plots experimental; importances warn on tiny studies.
        warnings.simplefilter("ignore")
        return [path for name, plot in chosen if (path := _plot(study, folder, name, plot)) is not None]


def _plot(study: optuna.Study, folder: Path, name: str, plot: Callable) -> Path | None:
    import matplotlib.pyplot as plt

    try:
        axes = plot(study)
    except (ValueError, RuntimeError, ZeroDivisionError):
        return None  # e.g. importances need completed trials whose parameters differ
    figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
    figure.savefig(folder / f"{name}.png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return folder / f"{name}.png"
