"""Running a search: each trial trains with its sampled hyperparameters, evaluated greedily on
the way (:class:`TrialEvaluation`, reported to Optuna's pruner); :func:`tune` runs this worker's
share of the study, taking trials under the study's lock so that ``--max-total-trials`` holds."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace

import optuna
import torch
from optuna.trial import TrialState
from rich.console import Console

from sb3_snake.acceleration.optimizations import threads_for
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.common.console import plain_console
from sb3_snake.common.errors import TrainingDiverged, UsageError
from sb3_snake.common.interrupts import uninterrupted
from sb3_snake.training.evaluation import GreedyEvaluation
from sb3_snake.training.hyperparameters import check_hyperparameters
from sb3_snake.training.learners import learner
from sb3_snake.training.roles import DEFAULT_LEARNER
from sb3_snake.training.run import train
from sb3_snake.training.tuning.report import GAME_ATTRIBUTES, best_line, describe, studied_learner
from sb3_snake.training.tuning.space import TuneConfig
from sb3_snake.training.tuning.storage import (
    GRACE_PERIOD,
    HEARTBEAT_INTERVAL,
    ask_trial,
    heartbeat,
    load_study,
    trial_slot_lock,
)

#: Seeds of the evaluations inside trials: apart from training's (small), ``eval``'s
#: (1,000,000,007 on) and best-model selection's (2,000,000,011 on).
TUNE_SEED_OFFSET = 3_000_000_019


class TrialEvaluation(GreedyEvaluation):
    """Greedy evaluations during a trial, reported to Optuna: every ``every_steps`` env steps
    (a trial with a step budget), else every ``every_seconds`` of training (a time budget).

    Raises ``optuna.TrialPruned`` when the pruner says the trial should stop.
    """

    def __init__(self, trial: optuna.Trial, episodes: int, every_steps: int | None, every_seconds: float | None):
        super().__init__(episodes, TUNE_SEED_OFFSET, every_steps, every_seconds)
        self.trial = trial

    @classmethod
    def for_budget(cls, trial: optuna.Trial, config: TuneConfig) -> TrialEvaluation:
        """``n_evaluations`` spread over the trial's step budget, or else over its time budget."""
        budget = config.trial
        if budget.timesteps is not None:
            return cls(trial, config.eval_episodes, max(1, math.ceil(budget.timesteps / config.n_evaluations)), None)
        return cls(trial, config.eval_episodes, None, budget.time_limit_minutes * 60 / config.n_evaluations)

    @property
    def reports(self) -> list[float]:
        """The mean score of each evaluation, as reported to Optuna."""
        return [entry["mean_score"] for entry in self.history]

    def on_evaluation(self, entry: dict[str, float]) -> None:
        mean_score, number = entry["mean_score"], len(self.history)
        with uninterrupted():  # writes to the study's storage
            self.trial.report(mean_score, step=number - 1)
            prune = self.trial.should_prune()
        if prune:
            raise optuna.TrialPruned(f"pruned after evaluation {number}: mean score {mean_score:.2f}")


class TrialFailed(RuntimeError):
    """A trial that could not train; recorded as FAIL with its reason, and the study goes on."""


def run_trial(trial: optuna.Trial, config: TuneConfig, settings: OptimizationSettings, console: Console) -> float:
    """Train one trial's sampled hyperparameters and return its final greedy mean score."""
    with uninterrupted():  # writes to the study's storage
        searched = learner(config.trial.algo)
        sampled = searched.search_space(trial)
    evaluations = TrialEvaluation.for_budget(trial, config)
    folder = config.folder / f"trial_{trial.number:04d}"
    try:
        # Drawn values are the trial's own (a learner's default would otherwise take their place
        # again); a draw that cannot work with the trial's games (a PQN batch that does not divide
        # its rollout) fails the trial with its reason, as any other. The trial's own evaluations
        # judge it: train's evaluations on the clock would only cost time.
        drawn = {**check_hyperparameters(sampled), **searched.search_fixed}
        sources = {**config.trial.sources, **dict.fromkeys(drawn, "trial")}
        run_config = replace(config.trial, **drawn, eval_every_minutes=0, sources=sources)
        train(run_config, settings, folder, overwrite=True, callbacks=[evaluations], console=console)
        final = evaluations.mean_score()  # on the games after the last report's
    except (ValueError, TrainingDiverged, MemoryError, torch.OutOfMemoryError) as error:
        with uninterrupted():
            trial.set_user_attr("failure", f"{type(error).__name__}: {error}")
        raise TrialFailed(str(error)) from error
    with uninterrupted():
        trial.set_user_attr("evaluations", [*evaluations.reports, final])
    return final


def tune(
    config: TuneConfig,
    settings: OptimizationSettings,
    notify: Callable[[str], None] = print,
    console: Console | None = None,
    *,
    heartbeat_interval: int | None = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
) -> optuna.Study:
    """Run this worker's trials of the study (see :mod:`sb3_snake.training.tuning`) and return the study.

    ``--max-total-trials`` is exact across workers: counting the study's trials and asking for a
    new one happen under :func:`~sb3_snake.training.tuning.storage.trial_slot_lock`, so no two
    workers both take the last slot. ``n_jobs`` threads each run this loop. Before each trial,
    the trials of workers that died are marked failed and queued to run again
    (:func:`~sb3_snake.training.tuning.storage.fail_stale_trials`).

    :param heartbeat_interval: seconds between a running trial's heartbeats in a database storage.
    :param grace_period: seconds without a heartbeat after which a trial's worker counts as dead.
    """
    study = load_study(config, heartbeat_interval=heartbeat_interval, grace_period=grace_period)
    with uninterrupted():  # writes to the study's storage
        _claim(study, config)
    console = console or plain_console(quiet=True)
    if config.n_jobs > 1 and settings.num_threads == AUTO:
        # Concurrent trials share the process's thread count: none of them may change it.
        fixed = threads_for(settings, config.trial.device)
        settings = replace(settings, num_threads=fixed, sources={**settings.sources, "num_threads": "tune --n-jobs"})
    lock = trial_slot_lock(config, study)
    trials_left = [config.n_trials]
    guard = threading.Lock()

    def next_trial() -> optuna.Trial | None:
        with guard:
            if trials_left[0] <= 0:
                return None
            trials_left[0] -= 1
        with lock(), uninterrupted():
            return ask_trial(study, config.max_total_trials)

    def worker() -> None:
        while (trial := next_trial()) is not None:
            with heartbeat(study, trial):
                finish(study, trial, lambda: run_trial(trial, config, settings, console), notify)

    threads = [threading.Thread(target=worker) for _ in range(config.n_jobs - 1)]
    for thread in threads:
        thread.start()
    try:
        worker()
    finally:
        for thread in threads:
            thread.join()
    if config.max_total_trials is not None and trials_left[0] > 0:
        notify(f"the study has {config.max_total_trials} trials (--max-total-trials); this worker stops")
    return study


def _claim(study: optuna.Study, config: TuneConfig) -> None:
    """Record the learner and games ``study`` searches (what best_hyperparameters.json replays),
    or refuse, in one line, a worker that asks for others: its trials would not compare."""
    studied = studied_learner(study)
    if studied is not None and studied != config.trial.algo:
        default = " (the default learner)" if config.trial.algo == DEFAULT_LEARNER else ""
        raise UsageError(
            f"study {config.study_name} searches the {studied} learner's space, and this run asks for "
            f"--algo {config.trial.algo}{default}: use --algo {studied}, or another --study-name"
        )
    for name in GAME_ATTRIBUTES:
        recorded, asked = study.user_attrs.get(name), getattr(config.trial, name)
        if recorded is not None and recorded != asked:
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"study {config.study_name} plays {flag} {recorded}, and this run asks for {asked}: "
                f"use {flag} {recorded}, or another --study-name"
            )
    study.set_user_attr("algo", config.trial.algo)
    for name in GAME_ATTRIBUTES:
        study.set_user_attr(name, getattr(config.trial, name))


def finish(study: optuna.Study, trial: optuna.Trial, run: Callable[[], float], notify: Callable[[str], None]) -> None:
    """Run one trial and tell the study how it ended: COMPLETE, PRUNED or FAIL (with the reason);
    Ctrl-C marks it FAIL and stops."""
    try:
        value = run()
    except optuna.TrialPruned as pruned:
        with uninterrupted():
            trial.set_user_attr("pruned", str(pruned))
            frozen = study.tell(trial, state=TrialState.PRUNED)
    except TrialFailed:
        with uninterrupted():
            frozen = study.tell(trial, state=TrialState.FAIL)
    except BaseException:
        with uninterrupted():
            trial.set_user_attr("failure", "interrupted")
            study.tell(trial, state=TrialState.FAIL)
        raise
    else:
        with uninterrupted():
            frozen = study.tell(trial, value)
    notify(describe(frozen))
    notify(best_line(study))
