"""The thread count measured while training: the tuner's decisions on a synthetic clock, and the
callback in a real run."""

import io
from dataclasses import replace

import pytest
import torch
from rich.console import Console

from sb3_snake.acceleration.optimizations import (
    ActiveOptimizations,
    Decision,
    adaptive_thread_counts,
    choose_num_threads,
)
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.acceleration.threads import AdaptiveThreads, ThreadTuner
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import train
from sb3_snake.update.compile import WHOLE_UPDATE, Compile, Phase
from tests.conftest import small_dqn


class Machine:
    """A clock and a step counter: ``rate[count]`` env steps per second with each thread count."""

    def __init__(self, tuner: ThreadTuner, rate: dict[int, float], tick: float = 0.25):
        self.tuner, self.rate, self.tick = tuner, dict(rate), tick
        self.now, self.steps, self.switches = 0.0, 0.0, []
        tuner.start(self.now, int(self.steps))

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.now += self.tick
            self.steps += self.rate[self.tuner.current] * self.tick
            switched = self.tuner.update(self.now, int(self.steps))
            if switched is not None:
                self.switches.append((round(self.now, 2), switched))


def test_a_probe_measures_each_count_in_an_order_that_reads_the_same_both_ways():
    tuner = ThreadTuner((2, 1), window=1.0, hold=30.0)
    machine = Machine(tuner, {2: 300, 1: 240})
    assert tuner.probing and tuner.current == 2
    machine.run(4.0)
    # 2 for the first window, 1 for two, 2 for the last: then the faster (2) is kept.
    assert machine.switches == [(1.0, 1), (3.0, 2)]
    assert not tuner.probing and tuner.current == 2
    probe = tuner.probes[-1]
    assert probe.chose == 2 and probe.rates() == {2: pytest.approx(300, rel=0.01), 1: pytest.approx(240, rel=0.01)}


def test_the_faster_count_is_kept_and_measured_again_after_the_hold():
    tuner = ThreadTuner((2, 1), window=1.0, hold=10.0)
    machine = Machine(tuner, {2: 50, 1: 240})  # another process holds a core: two threads wait for it
    machine.run(4.0)
    assert tuner.current == 1 and len(tuner.probes) == 1
    machine.run(9.0)
    assert tuner.current == 1 and len(tuner.probes) == 1  # held
    machine.rate = {2: 300, 1: 240}  # the other process ended
    machine.run(6.0)
    assert len(tuner.probes) == 2 and tuner.probes[-1].chose == 2 and tuner.current == 2


def test_a_sudden_slowdown_starts_a_probe_before_the_hold_ends():
    tuner = ThreadTuner((2, 1), window=1.0, hold=60.0, drop=0.5)
    machine = Machine(tuner, {2: 300, 1: 240})
    machine.run(4.0)
    assert tuner.current == 2
    machine.run(5.0)
    assert len(tuner.probes) == 1
    machine.rate = {2: 40, 1: 230}  # a busy process starts
    machine.run(6.0)
    assert len(tuner.probes) == 2 and tuner.current == 1
    # A slowdown short of the threshold is noise, not a reason to measure again.
    machine.rate = {2: 40, 1: 150}
    machine.run(10.0)
    assert len(tuner.probes) == 2


def test_seconds_at_each_count_add_up_to_the_time_measured():
    tuner = ThreadTuner((2, 1), window=1.0, hold=5.0)
    machine = Machine(tuner, {2: 100, 1: 200})
    machine.run(20.0)
    recorded = tuner.as_dict()
    assert sum(recorded["seconds_at"].values()) == pytest.approx(20.0, abs=1.0)
    assert recorded["seconds_at"]["1"] > recorded["seconds_at"]["2"]
    finished = [probe["chose"] for probe in recorded["probes"] if probe["chose"] is not None]
    assert recorded["counts"] == [2, 1] and len(finished) >= 2 and set(finished) == {1}


def test_a_stopped_tuner_keeps_its_count():
    tuner = ThreadTuner((2, 1), window=1.0, hold=5.0)
    machine = Machine(tuner, {2: 100, 1: 200})
    machine.run(4.5)
    assert tuner.current == 1
    tuner.stop(machine.now, "compiled")
    machine.rate = {2: 400, 1: 10}
    machine.run(30.0)
    assert tuner.current == 1 and len(tuner.probes) == 1
    assert tuner.as_dict()["kept_from"] == {"at_seconds": 4.5, "why": "compiled"}
    assert sum(tuner.seconds_at.values()) == pytest.approx(4.5)


def test_settling_ends_a_probe_at_the_count_chosen_before_it():
    tuner = ThreadTuner((2, 1), window=1.0, hold=5.0)
    machine = Machine(tuner, {2: 100, 1: 200})
    machine.run(4.0)
    assert tuner.current == 1 and not tuner.probing
    assert tuner.settle(machine.now, int(machine.steps)) is None  # nothing under way: nothing changes
    machine.run(6.5)  # past the hold: a second probe, in its window of 2 threads
    assert tuner.probing and tuner.current == 2 and len(tuner.probes) == 2
    assert tuner.settle(machine.now, int(machine.steps)) == 1
    assert tuner.current == 1 and not tuner.probing and tuner.probes[-1].chose is None
    assert sum(tuner.seconds_at.values()) == pytest.approx(machine.now)
    first = ThreadTuner((2, 1), window=1.0)
    Machine(first, {2: 100, 1: 200}).run(1.5)  # in the first probe, before any choice
    assert first.current == 1 and first.settle(1.5, 150) == 2  # the first count, where none was chosen


def test_the_tuner_needs_counts_to_choose_between():
    with pytest.raises(ValueError, match="two or more distinct"):
        ThreadTuner((2,))
    with pytest.raises(ValueError, match="two or more distinct"):
        ThreadTuner((2, 2))


def test_only_auto_on_a_cpu_of_several_cores_adapts():
    assert adaptive_thread_counts("auto", "cpu", 2) == (2, 1)
    assert adaptive_thread_counts("auto", "cpu", 8) == (8, 1)
    assert adaptive_thread_counts("auto", "cpu", 1) == ()
    assert adaptive_thread_counts(2, "cpu", 2) == ()  # the user's count stays
    assert adaptive_thread_counts("auto", "cuda", 16) == ()
    assert "measured while training" in choose_num_threads("auto", "cpu", 2)[1]
    assert "measured" not in choose_num_threads("auto", "cpu", 1)[1]


def test_the_active_set_says_which_counts_a_run_chooses_between(monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.cpu_cores", lambda: 2)
    adaptive = ActiveOptimizations.decide(OptimizationSettings(use_bf16=False, use_flash_attention=False), "cpu")
    fixed = ActiveOptimizations.decide(
        OptimizationSettings(use_bf16=False, use_flash_attention=False, num_threads=2), "cpu"
    )
    assert adaptive.adaptive_threads == (2, 1) and adaptive.as_dict()["adaptive_threads"] == [2, 1]
    assert fixed.adaptive_threads == () and fixed.num_threads == 2


class FakeClock:
    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def callback_on_a_model(learning_starts: int):
    """An AdaptiveThreads choosing between 3 and 1, on a clock that moves 0.5 s a call, started on a model."""
    model = small_dqn(OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1))
    model.learning_starts = learning_starts
    lines = []
    callback = AdaptiveThreads((3, 1), notify=lines.append, clock=FakeClock(0.5), window=1.0, hold=100.0)
    callback.init_callback(model)
    callback.on_training_start({}, {})
    return model, callback, lines


def test_the_callback_waits_for_learning_applies_the_choice_and_restores_the_count():
    before = torch.get_num_threads()
    model, callback, lines = callback_on_a_model(learning_starts=100)
    model.num_timesteps = 50
    callback.on_step()
    assert not callback.tuner.probes and torch.get_num_threads() == before  # random play: nothing measured
    model.num_timesteps = 100
    for _ in range(40):  # ten times the env steps per call with one thread as with three
        model.num_timesteps += 10 if torch.get_num_threads() == 1 else 1
        callback.on_step()
    assert callback.tuner.probes[0].chose == 1 and torch.get_num_threads() == 1
    assert lines and lines[0].startswith("threads: 1 (env steps/s with each count: ")
    callback.on_training_end()
    assert torch.get_num_threads() == before


def test_the_callback_keeps_the_count_once_the_update_is_compiled(monkeypatch):
    model, callback, lines = callback_on_a_model(learning_starts=0)
    model.num_timesteps = 10
    callback.on_step()
    assert callback.tuner.current == 3 and callback.tuner.probing
    assert not model.compile_state.running  # compile is off for this model
    compiled = Compile(Decision.on(), Decision.on(WHOLE_UPDATE), phase=Phase.RUNNING)
    monkeypatch.setattr(model.step_choice, "compile", compiled)
    assert model.compile_state.running
    for _ in range(20):
        model.num_timesteps += 5
        callback.on_step()
    assert callback.tuner.current == 3 and len(callback.tuner.probes) == 1 and not callback.tuner.probing
    assert callback.tuner.stopped[1] == "the update was compiled for this count"
    assert lines == ["threads: 3 from now on (the update was compiled for it)"]
    callback.on_training_end()


def test_the_callback_neither_measures_nor_sets_a_count_while_the_update_compiles(monkeypatch):
    model, callback, lines = callback_on_a_model(learning_starts=0)
    model.num_timesteps = 10
    callback.on_step()
    assert callback.tuner.current == 3 and callback.tuner.probing
    compiling = Compile(Decision.on(), Decision.on(), background=True, phase=Phase.COMPILING, since=0)
    monkeypatch.setattr(model.step_choice, "compile", compiling)
    torch.set_num_threads(1)  # as the compile sets it: one core left to the compiler
    measured = callback.tuner.as_dict()
    for _ in range(20):
        model.num_timesteps += 5
        callback.on_step()
    assert torch.get_num_threads() == 1 and callback.tuner.as_dict() == measured
    assert lines == []
    torch.set_num_threads(3)  # the compile failed: training is back at its count
    monkeypatch.setattr(
        model.step_choice, "compile", Compile(Decision.off("torch.compile is not supported here"), Decision.on())
    )
    callback.on_step()
    assert len(callback.tuner.probes) == 2 and callback.tuner.probing  # a fresh probe, not the stale window
    callback.on_training_end()


def test_a_compile_that_is_due_fixes_the_chosen_count_not_a_probes(monkeypatch):
    model, callback, lines = callback_on_a_model(learning_starts=0)
    model.num_timesteps = 10
    callback.on_step()  # the first probe: 3 threads, then 1
    for _ in range(3):
        model.num_timesteps += 5
        callback.on_step()
    assert callback.tuner.probing and torch.get_num_threads() == 1  # a window of the other count
    due = Compile(Decision.on(), Decision.on(), background=True)
    monkeypatch.setattr(model.step_choice, "compile", due)
    assert model.compile_state.due(model._n_updates)
    callback.on_step()
    assert torch.get_num_threads() == 3 and callback.tuner.current == 3 and not callback.tuner.probing
    measured = callback.tuner.as_dict()
    for _ in range(10):  # until the compile starts, and while it runs, nothing is measured or set
        model.num_timesteps += 5
        callback.on_step()
    assert callback.tuner.as_dict() == measured and torch.get_num_threads() == 3
    callback.on_training_end()


def test_a_run_with_auto_threads_records_what_it_measured(tmp_path, monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.cpu_cores", lambda: 2)
    before = torch.get_num_threads()
    config = TrainConfig(
        algo="dqn",
        episodes=30,
        n_envs=4,
        board_size=5,
        seed=1,
        learning_starts=16,
        buffer_size=2_000,
        batch_size=16,
        device="cpu",
    )
    settings = OptimizationSettings(use_torch_compile=False, use_bf16=False, use_flash_attention=False)
    summary = train(config, settings, tmp_path / "run", console=Console(file=io.StringIO()))
    assert summary["active"]["adaptive_threads"] == [2, 1]
    assert summary["threads"]["counts"] == [2, 1] and summary["threads"]["probes"]
    assert torch.get_num_threads() == before
    fixed = train(config, replace(settings, num_threads=1), tmp_path / "fixed", console=Console(file=io.StringIO()))
    assert fixed["threads"] is None
