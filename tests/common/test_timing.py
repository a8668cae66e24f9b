"""The one timing harness: calibrated runs of whole calls, the device waited for, warm-up untimed."""

from types import SimpleNamespace

from sb3_snake.common import timing


class FakeClock:
    """A clock that moves only when a step runs: each call takes 1/64 s (exact in binary)."""

    def __init__(self, monkeypatch):
        self.now, self.calls = 0.0, []
        monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: self.now))

    def step(self):
        self.calls.append(self.now)
        self.now += 1 / 64


def test_a_timed_run_is_whole_calls_lasting_about_the_seconds_asked(monkeypatch):
    clock = FakeClock(monkeypatch)
    step, calls = clock.step, clock.calls
    durations, per_run = timing.time_runs(step, lambda: None, seconds=0.5, repeats=3)
    assert per_run == 32 and durations == [0.5] * 3
    assert len(calls) == 1 + 2 + 4 + 8 + 3 * 32  # calibrated (untimed) until 8 calls took a quarter of 0.5 s
    calls.clear()
    assert timing.time_runs(step, lambda: None, seconds=0, repeats=2) == ([1 / 64, 1 / 64], 1)
    assert len(calls) == 2


def test_calibration_finds_the_calls_that_last_the_seconds_asked(monkeypatch):
    clock = FakeClock(monkeypatch)
    assert timing.calibrate(clock.step, lambda: None, seconds=0.25) == 16
    assert len(clock.calls) == 1 + 2 + 4  # 4 calls took a quarter of 0.25 s
    assert timing.calibrate(clock.step, lambda: None, seconds=0) == 1


def test_a_run_bounded_by_time_is_whole_calls_until_the_seconds_passed(monkeypatch):
    clock = FakeClock(monkeypatch)
    assert timing.time_for(clock.step, lambda: None, seconds=0.1) == (7 / 64, 7)  # 6/64 s is not yet 0.1 s
    assert timing.time_for(clock.step, lambda: None, seconds=0) == (1 / 64, 1)  # at least one call
    assert len(clock.calls) == 8


def test_the_device_is_waited_for_before_the_first_clock_starts_and_before_each_stops(monkeypatch):
    clock = FakeClock(monkeypatch)
    events = []

    def step():
        events.append("step")
        clock.step()

    timing.time_runs(step, lambda: events.append("sync"), seconds=0, repeats=2)
    assert events == ["sync", "step", "sync", "step", "sync"]
    events.clear()
    timing.time_for(step, lambda: events.append("sync"), seconds=0)
    assert events == ["sync", "step", "sync"]
