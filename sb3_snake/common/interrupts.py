"""Sections that a Ctrl-C or SIGTERM must not cut in two, such as a write to a shared store.

The command line turns SIGINT and SIGTERM into ``KeyboardInterrupt`` where the main thread
happens to be (:func:`sb3_snake.cli.common.interrupt_on_signals`). Inside a library's write,
Optuna's journal file say, that leaves the store half updated: its lock file taken and never
released, and the command ends in a traceback instead of its exit code. Code that writes such a
store runs the write in :func:`uninterrupted`: a signal that arrives meanwhile is kept
(:func:`defer_interrupt`, which the handler asks) and raised when the section ends. Only the
main thread's sections count: Python runs signal handlers there alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_sections = {"depth": 0, "pending": False}


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block whole: a ``KeyboardInterrupt`` a signal asks for meanwhile is raised after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _sections["depth"] += 1
    try:
        yield
    finally:
        _sections["depth"] -= 1
        if _sections["depth"] == 0 and _sections["pending"]:
            _sections["pending"] = False
            raise KeyboardInterrupt


def defer_interrupt() -> bool:
    """For a signal handler: whether the main thread is in an :func:`uninterrupted` section, in
    which case the interrupt is kept for the section's end instead of raised now."""
    if _sections["depth"]:
        _sections["pending"] = True
        return True
    return False
