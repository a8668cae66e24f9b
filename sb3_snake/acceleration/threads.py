"""The torch thread count of a CPU run, measured while it trains.

One thread per core is the fastest only while every core is free: torch's intra-op threads wait for each other
at the end of every operation, so when another process (or a virtual machine's host) takes a core, each
operation waits for the thread that lost it. A count fixed at start-up is right in one condition and wrong in
the other, and a run can meet both. So a CPU run with ``TORCH_NUM_THREADS=auto`` measures: :class:`ThreadTuner`
decides from env steps per second measured with each count, :class:`AdaptiveThreads` is the SB3 callback that
feeds it the clock and applies its choice. An explicit count is never changed.
Design notes: docs/design-notes.md, "sb3_snake/acceleration/threads.py".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback

#: Seconds of one measurement window.
WINDOW_SECONDS = 1.0
#: Seconds a chosen count is kept before it is measured against the others again.
HOLD_SECONDS = 30.0
#: A window this many times slower than the chosen count's measured rate starts a new probe.
DROP = 0.5


@dataclass
class Probe:
    """One comparison: env steps and seconds measured with each count, and the count chosen."""

    at_seconds: float
    steps: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    chose: int | None = None

    def add(self, count: int, steps: int, seconds: float) -> None:
        self.steps[count] = self.steps.get(count, 0) + steps
        self.seconds[count] = self.seconds.get(count, 0.0) + seconds

    def rates(self) -> dict[int, float]:
        """Env steps per second with each count, over all of its windows."""
        return {count: self.steps[count] / self.seconds[count] for count in self.steps if self.seconds[count] > 0}

    def as_dict(self) -> dict[str, Any]:
        rates = {str(count): round(rate, 1) for count, rate in self.rates().items()}
        return {"at_seconds": round(self.at_seconds, 1), "env_steps_per_second": rates, "chose": self.chose}


class ThreadTuner:
    """Which of ``counts`` a run trains with, decided from its own speed with each.

    A probe runs windows of ``window`` seconds with each count in an order that reads the same
    both ways (2, 1, 1, 2 from 2), so a drift in the machine's speed during the probe weighs on
    every count alike, then keeps the count with the most env steps per second over its windows
    for ``hold`` seconds, and probes again. While it holds, a window slower than ``drop`` times
    the rate the count was chosen at (another process took a core) starts a probe at once.

    Pure bookkeeping over the times and step counts it is given: :meth:`start` and
    :meth:`update` return the count to switch to, or ``None`` to keep the current one.
    """

    def __init__(
        self,
        counts: tuple[int, ...],
        window: float = WINDOW_SECONDS,
        hold: float = HOLD_SECONDS,
        drop: float = DROP,
    ):
        if len(counts) < 2 or len(set(counts)) != len(counts):
            raise ValueError(f"ThreadTuner needs two or more distinct thread counts, got {counts}")
        self.counts, self.window, self.hold, self.drop = tuple(counts), window, hold, drop
        self.current = self.counts[0]
        self.probes: list[Probe] = []
        self.seconds_at: dict[int, float] = {count: 0.0 for count in self.counts}
        self._plan: list[int] = []  # the counts of the probe's windows still to run, the current one first
        self._window_start = (0.0, 0)
        self._hold_until = 0.0
        self._chosen_rate = 0.0
        self._origin = 0.0
        self.stopped: tuple[float, str] | None = None  #: seconds into the run, and why the count stays

    @property
    def probing(self) -> bool:
        return bool(self._plan)

    def start(self, now: float, steps: int) -> None:
        """Begin with a probe, at the first count; ``steps``: the run's env steps so far."""
        self._origin = now
        self._begin_probe(now, steps)

    def update(self, now: float, steps: int) -> int | None:
        """Account for the time since the last window began; the count to switch to, if any."""
        if self.stopped is not None:
            return None
        started, started_steps = self._window_start
        elapsed = now - started
        if elapsed < self.window:
            return None
        done = steps - started_steps
        self.seconds_at[self.current] += elapsed
        if self._plan:
            self.probes[-1].add(self.current, done, elapsed)
            self._plan.pop(0)
            if self._plan:
                return self._switch(self._plan[0], now, steps)
            return self._choose(now, steps)
        if now >= self._hold_until or done / elapsed < self.drop * self._chosen_rate:
            self._begin_probe(now, steps)
        else:
            self._window_start = (now, steps)
        return None

    def restart(self, now: float, steps: int) -> None:
        """Drop the window under way (its seconds went to something else than training) and
        probe afresh from now."""
        self._begin_probe(now, steps)

    def settle(self, now: float, steps: int) -> int | None:
        """End a probe under way (its window so far counted) at the count the last finished probe
        chose, or the first count when none has; the count to switch to, if any. For a count
        that is about to be fixed (a compile guards on it), which must be the chosen one, not
        whichever a probe's window happens to be trying."""
        if not self._plan:
            return None
        self.seconds_at[self.current] += now - self._window_start[0]
        self._plan = []
        chosen = next((probe.chose for probe in reversed(self.probes) if probe.chose is not None), self.counts[0])
        return self._switch(chosen, now, steps)

    def stop(self, now: float, why: str) -> None:
        """Keep the current count from now on (a probe under way ends where it is)."""
        started = bool(self.probes)
        if started:
            self.seconds_at[self.current] += now - self._window_start[0]
        self._plan, self.stopped = [], (now - self._origin if started else 0.0, why)

    def _begin_probe(self, now: float, steps: int) -> None:
        """Windows with the current count first, so a probe starts without a switch."""
        order = [self.current, *(count for count in self.counts if count != self.current)]
        self._plan = order + order[::-1]
        self.probes.append(Probe(now - self._origin))
        self._window_start = (now, steps)

    def _choose(self, now: float, steps: int) -> int | None:
        probe = self.probes[-1]
        rates = probe.rates()
        best = max(rates, key=lambda count: (rates[count], count))
        probe.chose, self._chosen_rate, self._hold_until = best, rates[best], now + self.hold
        return self._switch(best, now, steps)

    def _switch(self, count: int, now: float, steps: int) -> int | None:
        self._window_start = (now, steps)
        changed = count != self.current
        self.current = count
        return count if changed else None

    def as_dict(self) -> dict[str, Any]:
        """What the run trained with, for its summary."""
        return {
            "counts": list(self.counts),
            "seconds_at": {str(count): round(seconds, 1) for count, seconds in self.seconds_at.items()},
            "probes": [probe.as_dict() for probe in self.probes],
            "kept_from": None
            if self.stopped is None
            else {"at_seconds": round(self.stopped[0], 1), "why": self.stopped[1]},
        }


class AdaptiveThreads(BaseCallback):
    """Sets torch's thread count to :class:`ThreadTuner`'s choice during training, and back to
    the count it found when training ends. It starts measuring once learning has started (env
    steps of random play before ``learning_starts`` cost no gradient steps and would say nothing
    about them), and keeps the count it has once the update is compiled: torch.compile guards
    on the thread count, and the compiled update refuses another (seen with torch 2.13 on the CPU).
    Once a compile is due it ends a probe under way at the count chosen before it
    (:meth:`ThreadTuner.settle`), so the compile fixes that count rather than whichever one the
    probe was trying (a run's compile once started inside a one-thread window and kept one
    thread where two had been measured faster). While a child process compiles the update it
    neither measures nor sets a count: the compile sets them
    (:class:`~sb3_snake.update.steps.StepChoice`), and rates measured beside a busy
    compiler would say nothing of training. ``notify`` gets a line each time the
    choice changes."""

    def __init__(
        self,
        counts: tuple[int, ...],
        notify: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        **tuner_options: Any,
    ):
        super().__init__()
        self.tuner = ThreadTuner(counts, **tuner_options)
        self.notify = notify or (lambda line: None)
        self.clock = clock
        self._started = False
        self._chosen: int | None = None
        self._paused = False  # held still while the update compiles
        self._before = torch.get_num_threads()

    def _on_training_start(self) -> None:
        self._before = torch.get_num_threads()

    def _on_step(self) -> bool:
        if self.tuner.stopped is not None:
            return True
        if self._compile_due() and not self._paused:
            # The compile fixes the count it starts at: the chosen one, not a probe's window's.
            self._apply(self.tuner.settle(self.clock(), self.num_timesteps))
            self._paused = True
        if self._compiling() or self._compile_due():
            self._paused = True
            return True  # the compile sets the counts until it ends; rates measured meanwhile would be its
        if self._paused and not self._compiled():  # the compile failed: measure afresh
            self._paused = False
            if self._started:
                self.tuner.restart(self.clock(), self.num_timesteps)
        if self._compiled():
            # torch.compile guards on the thread count: the compiled update refuses another count.
            self.tuner.stop(self.clock(), "the update was compiled for this count")
            # The count the compiled update runs at, not necessarily the tuner's last.
            self.notify(f"threads: {torch.get_num_threads()} from now on (the update was compiled for it)")
            return True
        if not self._started:
            if self.num_timesteps < getattr(self.model, "learning_starts", 0):
                return True
            self._started = True
            self.tuner.start(self.clock(), self.num_timesteps)
            torch.set_num_threads(self.tuner.current)
            return True
        self._apply(self.tuner.update(self.clock(), self.num_timesteps))
        if not self.tuner.probing and self.tuner.current != self._chosen:
            self._chosen = self.tuner.current
            rates = ", ".join(f"{count}: {rate:,.0f}" for count, rate in self.tuner.probes[-1].rates().items())
            self.notify(f"threads: {self._chosen} (env steps/s with each count: {rates})")
        self.logger.record("time/torch_threads", self.tuner.current)
        return True

    def _compiled(self) -> bool:
        """Whether the model's compile state (``SnakeDQN.compile_state``) says something is compiled now."""
        state = getattr(self.model, "compile_state", None)
        return state is not None and state.running

    def _compile_due(self) -> bool:
        """Whether the model's next update compiles, or starts compiling (``Compile.due``)."""
        state = getattr(self.model, "compile_state", None)
        return state is not None and state.due(self.model._n_updates)

    def _compiling(self) -> bool:
        """Whether a child process is compiling the model's update (``Compile.compiling``)."""
        state = getattr(self.model, "compile_state", None)
        return state is not None and state.compiling

    def _apply(self, count: int | None) -> None:
        if count is not None:
            torch.set_num_threads(count)

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Restore the thread count found at the start (also when training ended by an exception,
        which SB3 does not report to callbacks)."""
        torch.set_num_threads(self._before)
