"""Sections a signal must not cut in two (``sb3_snake.common.interrupts``)."""

import threading

import pytest

from sb3_snake.common.interrupts import defer_interrupt, uninterrupted


def test_an_interrupt_asked_for_inside_a_section_is_raised_when_it_ends():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            assert defer_interrupt()  # what the signal handler asks: keep it
            done.append("the rest of the write")
    assert done == ["the rest of the write"]
    assert not defer_interrupt()  # outside any section, the handler raises at once


def test_nested_sections_raise_once_at_the_outermost_end():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            with uninterrupted():
                defer_interrupt()
            order.append("the outer section goes on")
    assert order == ["the outer section goes on"]


def test_a_section_without_a_signal_raises_nothing():
    with uninterrupted():
        pass


def test_only_the_main_threads_sections_hold_signals():
    seen = []

    def worker():
        with uninterrupted():
            seen.append(defer_interrupt())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [False]  # Python runs signal handlers on the main thread alone


def test_a_signal_in_the_middle_of_a_journal_write_waits_for_the_write(tmp_path):
    """What ``tune`` does on SIGTERM while Optuna writes its journal: the write completes, then
    the interrupt comes (raised inside the write, it left the journal's lock file behind)."""
    import signal

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sb3_snake.cli.common import interrupt_on_signals

    class SignalledBackend(JournalFileBackend):
        def append_logs(self, logs):
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the write
            super().append_logs(logs)

    path = str(tmp_path / "journal.log")
    with interrupt_on_signals() as received, pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            optuna.create_study(study_name="s", storage=JournalStorage(SignalledBackend(path)))
    assert received == [signal.SIGTERM]
    study = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(path)))
    assert study.study_name == "s" and not list(tmp_path.glob("*.lock"))
