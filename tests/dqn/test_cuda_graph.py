"""The captured gradient step's parts that run anywhere: its sampler and its decision.

Capturing and replaying need a GPU (tests/acceleration/test_cuda.py); what a graph replays, the
sampler drawing from a device tensor and the eager ``EagerSteps``, runs eagerly on the CPU here
(the eager step is held to SB3's ``DQN.train`` by test_snake_dqn.py).
"""

import contextlib

import pytest
import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.gradient_step import CapturedSteps
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.update.steps import EagerSteps
from tests.conftest import small_dqn

PLAIN = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)


def device_buffer_model(n_steps=1, transitions=128):
    """8 games, 64 rows of replay; ``transitions`` of random play in it."""
    return small_dqn(
        PLAIN,
        transitions=transitions,
        replay_buffer_class=DeviceReplayBuffer,
        replay_buffer_kwargs={"n_steps": n_steps, "gamma": 0.9},
        n_steps=n_steps,
    )


def drawn(captured, monkeypatch):
    """One sample of ``captured`` and the indices it drew, read off the buffer's ``samples_at``."""
    calls = []
    original = captured.buffer.samples_at

    def recording(rows, envs, last_row=None):
        calls.append((rows, envs, last_row))
        return original(rows, envs, last_row=last_row)

    monkeypatch.setattr(captured.buffer, "samples_at", recording)
    samples = captured.sample(1, captured.batch_size)
    monkeypatch.setattr(captured.buffer, "samples_at", original)
    return samples, calls[0]


@pytest.mark.parametrize("n_steps", [1, 3])
def test_the_sampler_draws_every_filled_row_and_only_those(monkeypatch, n_steps):
    model = device_buffer_model(n_steps)
    buffer = model.replay_buffer
    assert (buffer.pos, buffer.full) == (16, False)  # 128 transitions of 8 games
    captured = CapturedSteps(model, batch_size=4096)
    captured.refresh()
    assert captured.extent.tolist() == [16, 15]
    samples, (rows, envs, last_row) = drawn(captured, monkeypatch)
    assert set(rows.tolist()) == set(range(16)) and set(envs.tolist()) == set(range(8))
    assert isinstance(last_row, torch.Tensor) and int(last_row) == 15
    # The device-tensor last row gives what the buffer's own (Python int) default gives.
    expected = buffer.samples_at(rows, envs)
    for name, value in expected._asdict().items():
        if value is not None:
            torch.testing.assert_close(getattr(samples, name), value, msg=name)


def test_a_full_buffer_is_drawn_from_every_row_with_the_last_row_written(monkeypatch):
    model = device_buffer_model(n_steps=3, transitions=8 * 64)
    buffer = model.replay_buffer
    assert buffer.full and buffer.pos == 0
    captured = CapturedSteps(model, batch_size=8192)
    captured.refresh()
    assert captured.extent.tolist() == [64, 63]
    _, (rows, _, last_row) = drawn(captured, monkeypatch)
    assert set(rows.tolist()) == set(range(64)) and int(last_row) == 63


def test_a_step_trains_and_adds_its_loss():
    model = device_buffer_model()
    captured = CapturedSteps(model, batch_size=32)
    captured.refresh()
    before = [p.detach().clone() for p in model.q_net.parameters()]
    captured.recorded_step()
    captured.recorded_step()
    assert float(captured.loss_sum) > 0
    assert any(not torch.equal(p, b) for p, b in zip(model.q_net.parameters(), before, strict=True))
    assert all(group["capturable"] for group in model.policy.optimizer.param_groups)


def test_it_needs_the_device_buffer():
    model = small_dqn(PLAIN)  # a CPU model keeps SB3's buffer
    with pytest.raises(TypeError, match="DeviceReplayBuffer"):
        CapturedSteps(model, batch_size=32)


def test_on_the_cpu_the_graph_is_off_with_its_reason_and_training_runs_eagerly():
    model = device_buffer_model()
    decision = model.active_optimizations.cuda_graph
    assert decision.requested and not decision.active and "CUDA" in decision.reason
    model.train(gradient_steps=2, batch_size=32)
    assert type(model.step_choice.current) is EagerSteps and model._n_updates == 2


def test_new_hyperparameters_or_parameters_drop_a_captured_update():
    """What a graph read on the host while capturing (gamma, clipping, Double DQN) or the optimizer
    state it points at may change; the next update then captures afresh."""
    model = device_buffer_model()
    captured = model.step_choice.current = CapturedSteps(model, batch_size=32)
    model.set_hyperparameters(gamma=0.9)
    assert model.step_choice.current is not captured and model.gamma == 0.9
    assert type(model.step_choice.current) is EagerSteps  # chosen again: eager on the CPU
    captured = model.step_choice.current = CapturedSteps(model, batch_size=32)
    model.set_parameters(model.get_parameters())
    assert type(model.step_choice.current) is EagerSteps


@pytest.mark.parametrize("augment", [False, True])
def test_the_capture_registers_the_augmentations_own_generator(monkeypatch, augment):
    """A CUDA graph refuses a generator it was not told of, and the symmetries are drawn from one
    of their own: the capture registers it (with a stand-in graph, since capturing needs a GPU)."""
    registered = []

    class Graph:
        def register_generator_state(self, generator):
            registered.append(generator)

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph: contextlib.nullcontext())
    model = small_dqn(PLAIN, transitions=128, replay_buffer_class=DeviceReplayBuffer, symmetry_augmentation=augment)
    captured = CapturedSteps(model, batch_size=16)
    captured.refresh()
    captured._capture((1e-3,))
    assert captured.failure == "" and isinstance(captured.graph, Graph)
    assert registered == ([model._augmentation.generator] if augment else [])
