"""SB3 callbacks of a training run: episode budget and stop requests, progress, the compile's
course, checkpoints, W&B episodes, the files SB3's tools read (``monitor.csv``, and the greedy
evaluations in SB3's logger and ``evaluations.npz``); the greedy evaluations during training
(shown as training goes, and best-model selection on them) are :mod:`sb3_snake.training.evaluation`'s.

Each callback does one thing and reads what SB3 hands every callback (``self.locals``:
``dones`` and ``infos`` of the step just taken). They are combined in
:meth:`RunCallbacks.build`, which the training run (:mod:`sb3_snake.training.run`) calls.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.acceleration.threads import AdaptiveThreads
from sb3_snake.common.console import plain_console
from sb3_snake.persistence import save_model
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.evaluation import (
    BestModelSelection,
    GreedyEvaluation,
    ProgressEvaluation,
    describe_evaluation,
    latest_evaluation,
)
from sb3_snake.training.run_files import EVALUATIONS_NAME, MONITOR_NAME, EvaluationsFile, MonitorFile
from sb3_snake.training.tracking import WandbRun

logger = logging.getLogger(__name__)


class RunCancelled(Exception):
    """A stop was requested before training began: nothing was trained or saved."""


class StopRequest:
    """Asks a run to stop after its current env step and save as usual; safe from any thread.

    The library installs no signal handler: the CLI's handler calls :meth:`request`, and a
    Python user can do the same from another thread. :attr:`phase` says what the run is doing
    (``preparing``, ``training``, ``saving``, ``finished``), so a handler can tell a request it
    should honour from one that should abort at once. A request made while the run is still
    preparing cancels it before training starts (:class:`RunCancelled`).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self.phase = "preparing"

    def request(self, reason: str = "stop requested") -> None:
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()


@dataclass
class EpisodeRecord:
    """Everything the run keeps of its finished episodes.

    A long start (``--long-starts``) begins with most of the board already snake and usually
    ends soon after, so its score says little of how the agent plays the standard game; the
    mean and best a user reads (:meth:`mean_score_last`, :attr:`best_score`) count the games
    from standard starts only. ``long_starts`` says which games were which.
    """

    scores: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)  #: total env steps when each episode ended
    wall_seconds: list[float] = field(default_factory=list)
    long_starts: list[bool] = field(default_factory=list)  #: whether each game began as a long start

    def __len__(self) -> int:
        return len(self.scores)

    def standard_scores(self) -> list[int]:
        """Scores of the games from standard starts, in the order they finished."""
        if not any(self.long_starts):
            return self.scores
        return [score for score, long in zip(self.scores, self.long_starts, strict=True) if not long]

    def mean_score_last(self, count: int = 100) -> float:
        """Mean score of the last ``count`` games from standard starts (0 before the first)."""
        scores = self.standard_scores()[-count:]
        return float(np.mean(scores)) if scores else 0.0

    @property
    def best_score(self) -> int:
        """The best score of a game from a standard start."""
        return max(self.standard_scores(), default=0)


class EpisodeBudget(BaseCallback):
    """Records finished episodes and stops training at the first limit reached.

    Limits: ``target`` finished episodes (when several games finish on the last step, only as
    many as needed are counted, in game order, so the statistics cover exactly ``target``),
    ``max_env_steps`` env steps of this run, ``max_seconds`` of wall time, or ``stop``
    (a :class:`StopRequest`). ``stopped_by`` names the one that ended the run.
    """

    def __init__(
        self,
        target: int | None,
        record: EpisodeRecord,
        start_time: float,
        max_env_steps: int | None = None,
        max_seconds: float | None = None,
        stop: StopRequest | None = None,
    ):
        super().__init__()
        self.target = target
        self.record = record
        self.start_time = start_time
        self.max_env_steps = max_env_steps
        self.max_seconds = max_seconds
        self.stop = stop or StopRequest()
        self.stopped_by: str | None = None
        self.new_episodes: list[dict[str, Any]] = []  #: the info of each episode counted this step
        self._start_steps = 0

    def _on_training_start(self) -> None:
        self._start_steps = self.num_timesteps

    def _on_step(self) -> bool:
        self.new_episodes = []
        for index in np.flatnonzero(self.locals["dones"]):
            if self.reached:
                break
            info = self.locals["infos"][index]
            score, length = int(info["score"]), int(info["episode"]["l"])
            self.record.scores.append(score)
            self.record.lengths.append(length)
            self.record.env_steps.append(self.num_timesteps)
            self.record.wall_seconds.append(time.perf_counter() - self.start_time)
            self.record.long_starts.append(bool(info.get("long_start", False)))
            self.new_episodes.append(info)
        self.stopped_by = self._limit_reached()
        return self.stopped_by is None

    def _limit_reached(self) -> str | None:
        if self.reached:
            return "episodes"
        if self.max_env_steps is not None and self.num_timesteps - self._start_steps >= self.max_env_steps:
            return "timesteps"
        if self.max_seconds is not None and time.perf_counter() - self.start_time >= self.max_seconds:
            return "time_limit"
        if self.stop.requested:
            return "stop"
        return None

    @property
    def reached(self) -> bool:
        return self.target is not None and len(self.record) >= self.target

    def interrupts_updates(self) -> bool:
        """Whether a long update should end now (``SnakeDQN.update_interrupt``): the time limit
        passed, or a stop was requested. Episode and env-step limits wait for the next env step."""
        over_time = self.max_seconds is not None and time.perf_counter() - self.start_time >= self.max_seconds
        return over_time or self.stop.requested


def learner_name(model: Any) -> str:
    """The learner training, as the progress line names it (its model file's name for it)."""
    return getattr(model, "description_name", type(model).__name__)


class ProgressReport(BaseCallback):
    """A live progress bar on a terminal; plain log lines every ``log_seconds`` otherwise.

    It shows the latest greedy evaluation of ``evaluations`` first: what the model plays. The
    exploring games' mean comes after it, from standard starts only (:class:`EpisodeRecord`); it
    is lower than the greedy figure, as exploration's random moves end games early.
    """

    def __init__(
        self,
        budget: EpisodeBudget,
        console: Console | None = None,
        log_seconds: float = 10.0,
        evaluations: list[GreedyEvaluation] = (),
    ):
        super().__init__()
        self.budget, self.evaluations = budget, list(evaluations)
        self.console = console or plain_console()
        self.log_seconds = log_seconds
        self._progress: Progress | None = None
        self._task = None
        self._last_log = 0.0
        self._start_steps = 0

    def _on_training_start(self) -> None:
        self._start_steps = self.num_timesteps
        self._last_log = time.perf_counter()
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn(f"{learner_name(self.model)} episodes"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}", markup=False),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task("train", total=self.budget.target, stats="")
            self._progress.start()

    def _stats(self) -> str:
        record = self.budget.record
        elapsed = max(time.perf_counter() - self.budget.start_time, 1e-9)
        rate = (self.num_timesteps - self._start_steps) / elapsed
        greedy = latest_evaluation(self.evaluations)
        return (
            (f"{describe_evaluation(greedy)}  " if greedy else "")
            + f"exploring: mean (last 100) {record.mean_score_last():.2f}  best {record.best_score}  "
            + f"{rate:,.0f} env steps/s"
        )

    def _on_step(self) -> bool:
        if self._progress is not None:
            self._progress.update(self._task, completed=len(self.budget.record), stats=self._stats())
        elif time.perf_counter() - self._last_log >= self.log_seconds:
            self._last_log = time.perf_counter()
            target = self.budget.target if self.budget.target is not None else "-"
            line = f"{learner_name(self.model)} episodes {len(self.budget.record)}/{target}  {self._stats()}"
            self.console.print(line, highlight=False, soft_wrap=True)  # one line per report in a log
        return True

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live bar (also when training ended by an exception, which SB3 does not report)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=len(self.budget.record), stats=self._stats())
            self._progress.stop()
            self._progress = None


class CompileReport(BaseCallback):
    """A line each time the model's compile changes course (``SnakeDQN.compile_state``): the
    compile child started, its compile was adopted, or the compile turned off, with the reason."""

    def __init__(self, console: Console | None = None):
        super().__init__()
        self.console = console or plain_console()
        self._seen: tuple | None = None

    def _on_step(self) -> bool:
        state = getattr(self.model, "compile_state", None)
        if state is None:
            return True
        seen = (state.phase, state.failure)
        if self._seen is not None and seen != self._seen:
            self._report(state)
        self._seen = seen
        return True

    def _report(self, state: Any) -> None:
        decision = state.in_effect(self.model._n_updates)
        if state.failure:
            self.console.print(f"compile: off, training eagerly: {state.failure}", highlight=False, soft_wrap=True)
        elif state.compiling or state.running:
            self.console.print(f"compile: {decision.reason}", highlight=False, soft_wrap=True)


class EpisodeCheckpoint(BaseCallback):
    """Saves ``checkpoint.zip`` in ``run_dir`` every ``every`` finished episodes, atomically."""

    def __init__(self, budget: EpisodeBudget, run_dir: Path, every: int, replay_buffer: bool = False):
        super().__init__()
        self.budget, self.run_dir, self.every, self.replay_buffer = budget, run_dir, every, replay_buffer
        self._saved_at = 0

    def _on_step(self) -> bool:
        done = len(self.budget.record)
        if done - self._saved_at >= self.every:
            self._saved_at = done - done % self.every
            save_model(self.model, self.run_dir / "checkpoint.zip", self.replay_buffer)
        return True


class EpisodeMetrics(BaseCallback):
    """Sends each finished episode's score and length to ``log(metrics)`` (W&B), as it happens."""

    def __init__(self, budget: EpisodeBudget, log: Any):
        super().__init__()
        self.budget, self.log = budget, log

    def _on_step(self) -> bool:
        for info in self.budget.new_episodes:
            self.log(
                {
                    "episode/score": int(info["score"]),
                    "episode/length": int(info["episode"]["l"]),
                    "episodes": len(self.budget.record),
                    "env_steps": self.num_timesteps,
                }
            )
        return True


class EpisodeMonitor(BaseCallback):
    """Writes each episode the budget counts (episodes.json's episodes) to ``monitor.csv`` in
    ``run_dir``, as SB3's ``VecMonitor`` does (:class:`~sb3_snake.training.run_files.MonitorFile`)."""

    def __init__(self, budget: EpisodeBudget, run_dir: Path):
        super().__init__()
        self.budget, self.file = budget, MonitorFile(run_dir / MONITOR_NAME)

    def _on_training_start(self) -> None:
        self.file.open(env_id=type(self.training_env.unwrapped).__name__)

    def _on_step(self) -> bool:
        if self.budget.new_episodes:
            self.file.write(self.budget.new_episodes)
        return True

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (also when training ended by an exception, which SB3 does not report)."""
        self.file.close()


class EvaluationLog(BaseCallback):
    """Each evaluation of ``evaluation`` as SB3's ``EvalCallback`` records it: ``eval/mean_reward``,
    ``eval/mean_ep_length``, ``eval/success_rate`` (games won: the board filled) and
    ``eval/mean_score`` in SB3's logger, dumped at the evaluation's env step, and a row of
    ``evaluations.npz`` in ``run_dir``. Placed after ``evaluation``, it sees an evaluation in the
    same step, and the one at the end of training."""

    def __init__(self, evaluation: GreedyEvaluation, run_dir: Path):
        super().__init__()
        self.evaluation = evaluation
        self.file = EvaluationsFile(run_dir / EVALUATIONS_NAME, evaluation.episodes)
        self._recorded = 0

    def _on_step(self) -> bool:
        self._record_new()
        return True

    def _on_training_end(self) -> None:
        self._record_new()

    def _record_new(self) -> None:
        if len(self.evaluation.history) == self._recorded:
            return
        self._recorded = len(self.evaluation.history)
        entry, games = self.evaluation.history[-1], self.evaluation.last_result["per_game"]
        steps = int(entry["env_steps"])
        self.file.add(steps, games["returns"], games["steps"], games["won"])
        self.logger.record("eval/mean_reward", float(np.mean(games["returns"])))
        self.logger.record("eval/mean_ep_length", float(np.mean(games["steps"])))
        self.logger.record("eval/success_rate", float(np.mean(games["won"])))
        self.logger.record("eval/mean_score", float(entry["mean_score"]))
        self.logger.record("time/total_timesteps", steps, exclude="tensorboard")
        self.logger.dump(steps)


@dataclass
class RunCallbacks:
    """The run's callbacks, by role; ``all`` in the order SB3 calls them."""

    record: EpisodeRecord
    budget: EpisodeBudget
    progress: ProgressReport
    evaluation: ProgressEvaluation | None
    selection: BestModelSelection | None
    threads: AdaptiveThreads | None
    monitor: EpisodeMonitor
    all: list[BaseCallback]

    @property
    def evaluations(self) -> list[GreedyEvaluation]:
        """The run's greedy evaluations during training: on the clock, and best-model selection."""
        return [evaluation for evaluation in (self.evaluation, self.selection) if evaluation is not None]

    @classmethod
    def build(
        cls,
        config: TrainConfig,
        run_dir: Path,
        tracking: WandbRun,
        stop: StopRequest,
        console: Console,
        adaptive_threads: tuple[int, ...] = (),
        extra: list[BaseCallback] = (),
    ) -> RunCallbacks:
        """Budget and stop request, progress, the compile's course, W&B episodes, monitor.csv,
        checkpoints, the greedy evaluations on the clock that progress shows (and SB3's logger and
        evaluations.npz record), best-model selection, the thread count measured while training
        (when ``adaptive_threads`` names counts to choose between), then ``extra``."""
        record = EpisodeRecord()
        max_seconds = config.time_limit_minutes * 60 if config.time_limit_minutes is not None else None
        budget = EpisodeBudget(config.episodes, record, time.perf_counter(), config.timesteps, max_seconds, stop)
        evaluation = None
        if config.eval_every_minutes:
            every_seconds = config.eval_every_minutes * 60
            evaluation = ProgressEvaluation(
                config.select_episodes, every_seconds, tracking.log, stopping=lambda: stop.requested
            )
        selection = None
        if config.select_every:
            selection = BestModelSelection(run_dir, config.select_every, config.select_episodes, tracking.log)
        evaluations = [e for e in (evaluation, selection) if e is not None]
        progress = ProgressReport(budget, console, evaluations=evaluations)
        monitor = EpisodeMonitor(budget, run_dir)
        callbacks: list[BaseCallback] = [
            budget,
            progress,
            CompileReport(console),
            EpisodeMetrics(budget, tracking.log),
            monitor,
        ]
        if config.checkpoint_every:
            callbacks.append(EpisodeCheckpoint(budget, run_dir, config.checkpoint_every, config.save_replay_buffer))
        callbacks += evaluations
        if evaluation is not None:
            callbacks.append(EvaluationLog(evaluation, run_dir))
        threads = None
        if adaptive_threads:
            threads = AdaptiveThreads(adaptive_threads, notify=lambda line: console.print(line, highlight=False))
            callbacks.append(threads)
        return cls(record, budget, progress, evaluation, selection, threads, monitor, [*callbacks, *extra])
