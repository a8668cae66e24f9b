"""Runs taken in turn, up to ``parallel`` at once: each job waits on its run's process in a thread
of its own, so the runs themselves, not the threads, share the machine's cores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

Outcome = TypeVar("Outcome")


def run_in_turn(jobs: Sequence[Callable[[], Outcome]], parallel: int, stop: Callable[[], None]) -> list[Outcome]:
    """Every job's outcome, in the jobs' order whatever order they finished in.

    :param jobs: each starts one run and waits for it; a job raises only what should end them all.
    :param parallel: at most this many jobs at once, started in order as others end; 1 runs
        them one after another in this thread.
    :param stop: stops every run still going (:func:`~.runs.stop_runs`): called, until every
        started job has ended, when this thread is interrupted (Ctrl-C, or SIGTERM turned into
        it) or a job raises, so that no run trains on, orphaned; then no other job starts and
        the error goes on.
    """
    if parallel == 1:
        return [job() for job in jobs]
    outcomes: list[Any] = [None] * len(jobs)  # each job's, in its place, as it ends
    waiting = list(enumerate(jobs))
    running: dict[Future[Outcome], int] = {}
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="benchmark-run") as pool:
        try:
            while waiting or running:
                while waiting and len(running) < parallel:
                    index, job = waiting.pop(0)
                    running[pool.submit(job)] = index
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    outcomes[running.pop(future)] = future.result()  # a job's error is raised here
        except BaseException:
            _stop_until_done(list(running), stop)
            raise
    return outcomes


def _stop_until_done(futures: Sequence[Future[Outcome]], stop: Callable[[], None]) -> None:
    """``stop`` again until every job that started has ended: one that was about to start its run
    when the first ``stop`` came is stopped by the next."""
    pending = [future for future in futures if not future.done()]
    while pending:
        stop()
        _, still = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        pending = list(still)
