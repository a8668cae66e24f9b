"""The one timing harness: runs of a fixed number of calls calibrated to last about a given
number of seconds (:func:`time_runs`), or of whole calls until the seconds have passed
(:func:`time_for`); either way the clock starts and stops only once the device has finished.

Every throughput figure of the package is timed here: ``benchmark-grad``'s gradient steps, the matmul peak and
ceiling, ``benchmark-env``'s env steps, and the measurement behind ``auto``
(:class:`~sb3_snake.autotune.measure.GradientStepMeter`, one :func:`time_for` per slice). Warm-up is the
caller's and never timed, nor is the calibration. A figure is the median of its runs, with the slowest and
the fastest beside it. Design notes: docs/design-notes.md, "sb3_snake/common/timing.py".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def device_sync(device: str | torch.device) -> Callable[[], None]:
    """What waits for ``device`` before a clock stops: ``torch.cuda.synchronize`` on a GPU, nothing on a CPU."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def calibrate(step: Callable[[], None], sync: Callable[[], None], seconds: float) -> int:
    """How many calls of ``step`` last about ``seconds`` (at least one; one for ``seconds`` of 0).

    Times 1, 2, 4, ... calls until a batch of them takes a quarter of ``seconds`` (one call, when
    one call already does), which also warms ``step`` up, then scales the count to ``seconds``.
    """
    calls, elapsed = 0, 0.0
    while seconds > 0 and elapsed < seconds / 4:
        calls = max(1, 2 * calls)
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        elapsed = time.perf_counter() - start
    return max(1, int(calls * seconds / max(elapsed, 1e-9)))


def time_runs(
    step: Callable[[], None], sync: Callable[[], None], seconds: float, repeats: int
) -> tuple[list[float], int]:
    """Time ``repeats`` runs of ``calls`` calls of ``step``, ``calls`` found by :func:`calibrate`
    so that a run lasts about ``seconds`` (0: one call a run); returns ``(durations, calls)``.

    ``sync`` (:func:`device_sync`) runs before the first clock starts, so the work queued before
    is not timed, and before each clock stops. Every run does the same work, so their durations
    compare as they are.
    """
    sync()
    calls = calibrate(step, sync, seconds)
    durations = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        durations.append(time.perf_counter() - start)
    return durations, calls


def time_for(step: Callable[[], None], sync: Callable[[], None], seconds: float) -> tuple[float, int]:
    """Call ``step`` until ``seconds`` have passed (at least once); returns ``(duration, calls)``.

    The run of :func:`time_runs` bounded by time rather than by a count: what a measurement
    needs that times one short slice of each of several candidates in turn, again and again
    (``auto``), where one calibration per slice would cost as much as the slice. ``sync`` as in
    :func:`time_runs`.
    """
    sync()
    calls, start = 0, time.perf_counter()
    while calls < 1 or time.perf_counter() - start < seconds:
        step()
        calls += 1
    sync()
    return time.perf_counter() - start, calls
