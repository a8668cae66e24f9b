"""How the throughput benchmarks time a measurement: runs of a fixed number of calls, calibrated
to last about a given number of seconds.

A run of a few milliseconds measures the clock and the scheduler as much as the work: on a
2-core AMD EPYC, ``benchmark-grad``'s runs of four gradient steps at batch 128 (about 40 ms)
spread from 11,600 to 14,900 samples/s within one row. Calibrating the number of calls to a
duration keeps every configuration's runs equally long, whether one call takes a microsecond (an
env step) or a second (a gradient step at batch 8192), so one descheduled slice weighs the same
in each. What longer runs cannot remove is the host's own drift over seconds and minutes (runs
of half a second on the same machine still spread 13,200-18,300 samples/s in one row): that is
why each figure is the median of its runs, with the slowest and the fastest printed beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def device_sync(device: str | torch.device) -> Callable[[], None]:
    """What waits for ``device`` before a clock stops: ``torch.cuda.synchronize`` on a GPU, nothing on a CPU."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def time_runs(
    step: Callable[[], None], sync: Callable[[], None], seconds: float, repeats: int
) -> tuple[list[float], int]:
    """Time ``repeats`` runs of ``calls`` calls of ``step``, ``calls`` chosen so a run lasts about
    ``seconds``; returns ``(durations, calls)``.

    The calibration times 1, 2, 4, ... calls until a batch of them takes a quarter of
    ``seconds`` (one call, when one call already does), which also warms ``step`` up; it is not
    timed into the result. ``sync`` runs before each clock stops (``torch.cuda.synchronize`` on
    a GPU). ``seconds`` of 0 skips the calibration: runs of one call each.
    """
    calls, elapsed = 0, 0.0
    while seconds > 0 and elapsed < seconds / 4:
        calls = max(1, 2 * calls)
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        elapsed = time.perf_counter() - start
    calls = max(1, int(calls * seconds / max(elapsed, 1e-9)))
    durations = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        durations.append(time.perf_counter() - start)
    return durations, calls
