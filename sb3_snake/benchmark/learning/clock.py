"""The benchmark's clock: counted seconds that leave checkpoint saving out, and the callback that
saves the model on that clock, or every so many env steps, stops learning at the budget, and
keeps the exploring games' scores, which each checkpoint records beside its greedy games."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.training.callbacks import EpisodeRecord


class Stopwatch:
    """Seconds since ``start`` (a ``time.time()`` value, so it holds across processes), less the
    time spent inside :meth:`paused`."""

    def __init__(self, start: float, clock: Callable[[], float] = time.time):
        self.start, self.clock, self.paused_seconds = start, clock, 0.0

    def elapsed(self) -> float:
        return self.clock() - self.start - self.paused_seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        began = self.clock()
        try:
            yield
        finally:
            self.paused_seconds += self.clock() - began


#: What a budget and its checkpoints count: counted seconds (:class:`Stopwatch`) or env steps.
BUDGET_UNITS = ("seconds", "env_steps")
#: The exploring games whose mean score a checkpoint records: the last 100, as ``sb3-snake train``'s mean.
EXPLORING_GAMES = 100


class Checkpoints(BaseCallback):
    """Saves the model every ``every`` counted seconds or env steps and stops learning at ``budget``.

    :param by: what ``every`` and ``budget`` count: ``seconds`` of the stopwatch, or ``env_steps``
        (the model's ``num_timesteps``, all envs together), which no machine's speed changes.

    Saving happens with the stopwatch paused. A checkpoint is recorded at the counted time and
    env steps it was taken and the point it fell due at (``due_seconds`` or ``due_env_steps``; a
    long step, or one of many envs, can take it past the point; points missed during one step
    are skipped, not saved twice, and the checkpoint stands for the latest of them). When the
    budget is reached, a last checkpoint is saved (due at the budget, recorded when the step
    that reached it ended, so that a step running past a time budget, such as a compile that
    stops training, shows as late) and ``learn`` stops.

    Each checkpoint also records ``exploring_score``: the mean score of the last
    :data:`EXPLORING_GAMES` games the run finished while learning, from standard starts (as
    ``sb3-snake train``'s exploring mean; None before the first), which shows how far the
    greedy games are ahead of the exploring ones.
    """

    def __init__(
        self,
        stopwatch: Stopwatch,
        every: float,
        budget: float,
        directory: Path,
        save: Callable[[Any, Path], None],
        by: str = "seconds",
    ):
        super().__init__()
        assert by in BUDGET_UNITS, by
        self.stopwatch, self.every, self.budget, self.directory, self.save = stopwatch, every, budget, directory, save
        self.by = by
        self.saved: list[dict[str, Any]] = []  #: counted seconds, env steps, due point and file of each checkpoint
        self._passed = 0  #: the points passed so far (point k falls at k * every)
        self.exploring = EpisodeRecord()  #: the scores of the games finished while learning

    def _on_step(self) -> bool:
        self._record_games()
        seconds = self.stopwatch.elapsed()
        now = seconds if self.by == "seconds" else self.num_timesteps
        finished = now >= self.budget
        passed = self._points_by(now)
        if passed > self._passed or finished:
            due = passed * self.every if passed > self._passed else self.budget
            self._passed = passed
            self.checkpoint(seconds, self.budget if finished else due)
        return not finished

    def _record_games(self) -> None:
        """The scores of the games that ended in this step (each env's ``info`` holds its
        ``score``), and which began as long starts (their mean leaves those out: :class:`EpisodeRecord`)."""
        dones, infos = self.locals.get("dones"), self.locals.get("infos")
        if dones is None or infos is None:
            return
        for index in np.flatnonzero(dones):
            info = infos[index]
            if "score" in info:
                self.exploring.scores.append(int(info["score"]))
                self.exploring.long_starts.append(bool(info.get("long_start", False)))

    def _points_by(self, now: float) -> int:
        """How many points ``k * every`` (k >= 1) lie at or before ``now``: counted by a division,
        not stepped through, so that many points passed in one step, or a tiny ``every``, cost no
        more than one (adding a tiny ``every`` to a large time does not even move it)."""
        passed = math.floor(now / self.every) if now > 0 else 0
        passed -= passed * self.every > now  # the quotient rounded up past ``now``
        passed += (passed + 1) * self.every <= now  # or down, a point short
        return max(passed, self._passed)

    def checkpoint(self, seconds: float, due: float | None = None) -> None:
        """Save the model now, off the clock, as the checkpoint of counted time ``seconds``, due
        at ``due`` (in the unit ``by``; default: the time or the env steps it is taken at)."""
        with self.stopwatch.paused():
            path = self.directory / f"t{len(self.saved):04d}.zip"
            self.save(self.model, path)
            taken = {"seconds": seconds, "env_steps": int(self.num_timesteps)}
            standard = bool(self.exploring.standard_scores())
            exploring = self.exploring.mean_score_last(EXPLORING_GAMES) if standard else None
            due_point = {f"due_{self.by}": taken[self.by] if due is None else due}
            self.saved.append({**taken, **due_point, "path": str(path), "exploring_score": exploring})
