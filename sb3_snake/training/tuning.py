"""``sb3-snake tune``: hyperparameter search on Optuna, as RL Baselines3 Zoo runs it.

One machine or many, the same command. The study lives in an Optuna storage:

- by default a journal file, ``runs/tune/<study>/journal.log`` (Optuna's ``JournalStorage`` on a
  ``JournalFileBackend``): no server, and safe for several processes on one machine;
- ``--storage PATH.log``: a journal file elsewhere (a shared file system, say);
- ``--storage URL``: Optuna's RDB storage, ``sqlite:///study.db``, ``postgresql://...`` or
  ``mysql+pymysql://...``; every machine runs the same command against it. The study is created
  once (``load_if_exists``) and ``--max-total-trials`` caps the trials of all workers together,
  exactly (:func:`tune`). PostgreSQL needs ``pip install "sb3-snake[distributed]"``.

A trial trains ``SnakeDQN`` with the hyperparameters of :func:`sample_hyperparameters` (the
search space, in one place) for the per-trial budget, evaluating greedily ``n_evaluations``
times on seeds of its own (:data:`TUNE_SEED_OFFSET`, apart from training's, ``eval``'s and
best-model selection's) and reporting each mean to Optuna, whose pruner may stop it. Its value
is the mean of a last greedy evaluation at the end of training. A trial whose loss becomes NaN,
that runs out of memory, or whose hyperparameters cannot work together is recorded as failed
with the reason (user attribute ``failure``), and the study goes on. Ctrl-C marks the running
trial failed and stops; the same command continues the study. A worker killed outright
(SIGKILL, a lost machine) leaves its trial RUNNING, and ``--max-total-trials`` counts it.

:func:`write_report` writes, into the study's folder: ``best_hyperparameters.json`` (for
``sb3-snake train --hyperparams``), ``trials.csv``, and Optuna's own matplotlib plots
(optimization history, parameter importances, intermediate values).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.acceleration.optimizations import threads_for
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.dqn.snake_dqn import TrainingDiverged
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.evaluation import evaluate
from sb3_snake.training.hyperparameters import check_hyperparameters
from sb3_snake.training.run import train

#: Seeds of the evaluations inside trials: apart from training's (small), ``eval``'s
#: (1,000,000,007 on) and best-model selection's (2,000,000,011 on).
TUNE_SEED_OFFSET = 3_000_000_019
#: Where studies without ``--storage`` keep their journal and their files.
TUNE_DIR = Path("runs") / "tune"
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")


#: A trial trains its sampled replay ratio from the first update: a 2-minute trial would
#: otherwise end inside ``sb3-snake train``'s early phase and never reach the ratio it was given.
#: ``best_hyperparameters.json`` carries it too, so ``train --hyperparams`` trains as the trial did.
ONE_RATIO = {"early_steps": 0}


def sample_hyperparameters(trial: optuna.Trial) -> dict[str, Any]:
    """The search space: every hyperparameter a trial draws, and its range (README shows this table)."""
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
        "embed_dim": trial.suggest_categorical("embed_dim", [16, 32, 64]),
        "num_layers": trial.suggest_categorical("num_layers", [0, 1, 2]),
        "head_view_dim": trial.suggest_categorical("head_view_dim", [32, 64, 128]),
    }


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
    trial: TrainConfig = TrainConfig(episodes=None, time_limit_minutes=2.0)  #: the base of every trial
    seed: int | None = None  #: seeds the sampler (None: random)

    def __post_init__(self) -> None:
        checks = [
            (self.n_trials >= 1, f"--n-trials must be at least 1, got {self.n_trials}"),
            (
                self.max_total_trials is None or self.max_total_trials >= 1,
                f"--max-total-trials must be at least 1, got {self.max_total_trials}",
            ),
            (self.n_jobs >= 1, f"--n-jobs must be at least 1, got {self.n_jobs}"),
            (self.sampler in SAMPLERS, f"--sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}"),
            (self.pruner in PRUNERS, f"--pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}"),
            (self.n_startup_trials >= 0, f"--n-startup-trials must be at least 0, got {self.n_startup_trials}"),
            (self.n_evaluations >= 1, f"--n-evaluations must be at least 1, got {self.n_evaluations}"),
            (self.eval_episodes >= 1, f"--eval-episodes must be at least 1, got {self.eval_episodes}"),
            (
                self.trial.timesteps is not None or self.trial.time_limit_minutes is not None,
                "a trial needs a budget: give --timesteps, --time-limit or both",
            ),
            (bool(self.study_name.strip()), "--study-name must not be empty"),
        ]
        problem = next((message for ok, message in checks if not ok), "")
        if problem:
            raise ValueError(problem)

    @property
    def folder(self) -> Path:
        """Where the study's files go (and its journal, when no storage is given)."""
        return TUNE_DIR / self.study_name


#: What a database says when two workers create Optuna's schema at once (the loser opens it again).
_SCHEMA_RACE = ("already exists", "UNIQUE constraint failed", "duplicate key value", "database is locked")


def open_storage(config: TuneConfig, create: bool = True) -> Any:
    """The Optuna storage of ``config.storage`` (see the module docstring); ValueError, one line.

    :param create: a journal file may be created (else it must exist).
    """
    storage = config.storage
    if storage is None or ("://" not in storage and storage.endswith(".log")):
        path = Path(storage) if storage else config.folder / "journal.log"
        if not create and not path.is_file():
            raise ValueError(f"no study journal {path}; run sb3-snake tune first, or pass its --storage")
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in storage:
        raise ValueError(
            f"--storage {storage!r}: give a journal file ending in .log or a URL such as sqlite:///study.db"
        )
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(storage)
        except ModuleNotFoundError as error:
            raise ValueError(
                f"--storage {storage.split('://')[0]}:// needs its database driver ({error.name}): "
                'pip install "sb3-snake[distributed]"'
            ) from None
        except Exception as error:  # noqa: BLE001 - a server that cannot be reached, a bad URL
            if not any(sign in str(error) for sign in _SCHEMA_RACE) or attempt == 4:
                raise ValueError(f"--storage {storage}: cannot open ({type(error).__name__}: {error})") from None
            time.sleep(0.2 * (attempt + 1))  # another worker was creating the schema: open it again
    raise AssertionError("unreachable")


def make_sampler(config: TuneConfig) -> optuna.samplers.BaseSampler:
    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=config.seed)
    return optuna.samplers.TPESampler(n_startup_trials=config.n_startup_trials, seed=config.seed)


def make_pruner(config: TuneConfig) -> optuna.pruners.BasePruner:
    if config.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=config.n_startup_trials, n_warmup_steps=1)
    if config.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def load_study(config: TuneConfig, create: bool = True) -> optuna.Study:
    """The study in its storage: created on first use (by whichever worker comes first)."""
    storage = open_storage(config, create)
    if not create:
        try:
            return optuna.load_study(study_name=config.study_name, storage=storage)
        except KeyError:
            raise ValueError(f"no study {config.study_name!r} in {config.storage or config.folder}") from None
    return optuna.create_study(
        study_name=config.study_name,
        storage=storage,
        sampler=make_sampler(config),
        pruner=make_pruner(config),
        direction="maximize",
        load_if_exists=True,
    )


class TrialEvaluation(BaseCallback):
    """Greedy evaluations during a trial, reported to Optuna: every ``every_steps`` env steps
    (a trial with a step budget), else every ``every_seconds`` of training (a time budget).

    Raises ``optuna.TrialPruned`` when the pruner says the trial should stop.
    """

    def __init__(self, trial: optuna.Trial, episodes: int, every_steps: int | None, every_seconds: float | None):
        super().__init__()
        self.trial, self.episodes = trial, episodes
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.reports: list[float] = []
        self._next_step, self._next_time = every_steps or 0, 0.0

    @classmethod
    def for_budget(cls, trial: optuna.Trial, config: TuneConfig) -> TrialEvaluation:
        """``n_evaluations`` spread over the trial's step budget, or else over its time budget."""
        budget = config.trial
        if budget.timesteps is not None:
            return cls(trial, config.eval_episodes, max(1, math.ceil(budget.timesteps / config.n_evaluations)), None)
        return cls(trial, config.eval_episodes, None, budget.time_limit_minutes * 60 / config.n_evaluations)

    def _on_training_start(self) -> None:
        self._next_time = time.perf_counter() + (self.every_seconds or 0.0)

    def _on_step(self) -> bool:
        due = (
            self.num_timesteps >= self._next_step
            if self.every_steps is not None
            else time.perf_counter() >= self._next_time
        )
        if due:
            result = evaluate(self.model, self.episodes, len(self.reports), seed_offset=TUNE_SEED_OFFSET)
            self.report(result["mean_score"])
            self._next_step = self.num_timesteps + (self.every_steps or 0)
            self._next_time = time.perf_counter() + (self.every_seconds or 0.0)
        return True

    def report(self, mean_score: float) -> None:
        self.trial.report(mean_score, step=len(self.reports))
        self.reports.append(mean_score)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"pruned after evaluation {len(self.reports)}: mean score {mean_score:.2f}")


def run_trial(trial: optuna.Trial, config: TuneConfig, settings: OptimizationSettings, console: Console) -> float:
    """Train one trial's sampled hyperparameters and return its final greedy mean score."""
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    config_values = check_hyperparameters(sample_hyperparameters(trial))
    run_config = replace(config.trial, **config_values, **ONE_RATIO, sources={"batch_size": "trial"})
    evaluations = TrialEvaluation.for_budget(trial, config)
    folder = config.folder / f"trial_{trial.number:04d}"
    try:
        train(run_config, settings, folder, overwrite=True, callbacks=[evaluations], console=console)
        final = evaluate(
            evaluations.model, config.eval_episodes, len(evaluations.reports), seed_offset=TUNE_SEED_OFFSET
        )
    except (ValueError, TrainingDiverged, MemoryError, torch.OutOfMemoryError) as error:
        trial.set_user_attr("failure", f"{type(error).__name__}: {error}")
        raise TrialFailed(str(error)) from error
    trial.set_user_attr("evaluations", [*evaluations.reports, final["mean_score"]])
    return final["mean_score"]


class TrialFailed(RuntimeError):
    """A trial that could not train; recorded as FAIL with its reason, and the study goes on."""


def describe(trial: FrozenTrial) -> str:
    """One line: number, state, value, duration and parameters (and why it failed)."""
    duration = trial.duration.total_seconds() if trial.duration else 0.0
    value = f"{trial.value:.2f}" if trial.value is not None else "-"
    params = ", ".join(f"{name}={_short(value)}" for name, value in trial.params.items())
    failure = f" ({trial.user_attrs['failure']})" if "failure" in trial.user_attrs else ""
    return f"trial {trial.number}: {trial.state.name} value {value} in {duration:.1f}s; {params}{failure}"


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def best_line(study: optuna.Study) -> str:
    try:
        best = study.best_trial
    except ValueError:
        return "best so far: none (no trial completed yet)"
    return f"best so far: trial {best.number}, value {best.value:.2f}"


def tune(
    config: TuneConfig,
    settings: OptimizationSettings,
    notify: Callable[[str], None] = print,
    console: Console | None = None,
) -> optuna.Study:
    """Run this worker's trials of the study (see the module docstring) and return the study.

    ``--max-total-trials`` is exact across workers: counting the study's trials and asking for a
    new one happen under :func:`trial_slot_lock`, so no two workers both take the last slot.
    ``n_jobs`` threads each run this loop.
    """
    study = load_study(config)
    console = console or Console(quiet=True)
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
        with lock():
            if config.max_total_trials is not None and len(study.get_trials(deepcopy=False)) >= config.max_total_trials:
                return None
            return study.ask()

    def worker() -> None:
        while (trial := next_trial()) is not None:
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


def finish(study: optuna.Study, trial: optuna.Trial, run: Callable[[], float], notify: Callable[[str], None]) -> None:
    """Run one trial and tell the study how it ended: COMPLETE, PRUNED or FAIL (with the reason);
    Ctrl-C marks it FAIL and stops."""
    try:
        value = run()
    except optuna.TrialPruned as pruned:
        trial.set_user_attr("pruned", str(pruned))
        frozen = study.tell(trial, state=TrialState.PRUNED)
    except TrialFailed:
        frozen = study.tell(trial, state=TrialState.FAIL)
    except BaseException:
        trial.set_user_attr("failure", "interrupted")
        study.tell(trial, state=TrialState.FAIL)
        raise
    else:
        frozen = study.tell(trial, value)
    notify(describe(frozen))
    notify(best_line(study))


def trial_slot_lock(config: TuneConfig, study: optuna.Study) -> Callable[[], contextlib.AbstractContextManager]:
    """A lock all workers of the study share, for "count the trials, then ask for one".

    A lock file beside a journal or SQLite file; a PostgreSQL advisory lock; MySQL's GET_LOCK.
    """
    storage = study._storage  # the storage object Optuna opened (public API has no accessor)
    url = config.storage or ""
    if url.startswith(("postgresql", "mysql")):
        return lambda: _database_lock(storage, config.study_name, url.split(":")[0].split("+")[0])
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
    else:
        path = Path(config.storage) if config.storage else config.folder / "journal.log"
    return lambda: _file_lock(path.with_name(path.name + ".trials.lock"))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    lock = JournalFileOpenLock(str(path))
    while not lock.acquire():
        time.sleep(0.01)
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _database_lock(storage: Any, study_name: str, dialect: str) -> Iterator[None]:
    from sqlalchemy import text

    key = zlib.crc32(f"sb3-snake tune {study_name}".encode()) & 0x7FFFFFFF
    engine = getattr(storage, "engine", None) or storage._backend.engine  # RDBStorage, possibly cached
    with engine.connect() as connection:
        if dialect == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            release = text("SELECT pg_advisory_unlock(:key)")
        else:
            connection.execute(text("SELECT GET_LOCK(:name, 600)"), {"name": f"sb3_snake_{key}"})
            release = text("SELECT RELEASE_LOCK(:name)")
        try:
            yield
        finally:
            connection.execute(release, {"key": key, "name": f"sb3_snake_{key}"})
            connection.commit()


def write_report(study: optuna.Study, folder: Path) -> list[Path]:
    """Best hyperparameters (JSON), every trial (CSV) and Optuna's plots (PNG) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "trials.csv"]
    trials = study.get_trials(deepcopy=False)
    names = sorted({name for trial in trials for name in trial.params})
    with open(written[0], "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["number", "state", "value", "duration_seconds", *names, "failure"])
        for trial in trials:
            duration = trial.duration.total_seconds() if trial.duration else ""
            params = [trial.params.get(name, "") for name in names]
            writer.writerow(
                [trial.number, trial.state.name, trial.value, duration, *params, trial.user_attrs.get("failure", "")]
            )
    completed = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if completed:
        best = folder / "best_hyperparameters.json"
        best.write_text(json.dumps({**study.best_trial.params, **ONE_RATIO}, indent=2) + "\n")
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
