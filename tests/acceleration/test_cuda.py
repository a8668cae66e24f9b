"""The CUDA paths, run for real on a GPU: training, kernels, compile, ``auto``, the CLI.

CI has no GPU, so every test here is skipped there; the rules behind them (what is active on
CUDA and why) are tested as logic on the CPU in test_optimizations.py (beside this file) and
tests/autotune/test_autotune.py. On a GPU machine, plain ``pytest`` runs them.
"""

import copy
import gc
import json

import numpy as np
import pytest
import torch
from stable_baselines3 import DQN
from torch.profiler import ProfilerActivity, profile
from typer.testing import CliRunner

from sb3_snake.acceleration.optimizations import COMPILE_ON_CPU_ONLY, Decision, probe_sdpa
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune import Machine, resolve_auto
from sb3_snake.benchmark.gradient_step import measure_halving_on_oom
from sb3_snake.cli import app
from sb3_snake.dqn.gradient_step import CapturedSteps
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.update.capture import WARMUP_STEPS
from tests.conftest import SMALL_POLICY, cuda, fixed_batch, small_dqn

pytestmark = cuda

EAGER = {
    "use_bf16": False,
    "use_flash_attention": False,
    "use_torch_compile": False,
    "num_threads": 1,
    "use_cuda_graph": False,
}


def gpu_model(n_steps=1, dqn_kwargs=None, **settings):
    settings = OptimizationSettings(**{**EAGER, **settings})
    return small_dqn(settings, board_size=6, transitions=128, device="cuda", n_steps=n_steps, **(dqn_kwargs or {}))


@pytest.mark.parametrize("n_steps", [1, 3])
def test_update_on_the_gpu_matches_sb3_dqn_train(monkeypatch, n_steps):
    """The parity test of tests/dqn/test_snake_dqn.py, on the device-resident replay buffer.

    One step, compared by loss and gradients: CUDA's attention and gather backward passes add
    in no fixed order, and Adam turns that last-bit noise of a near-zero gradient into a step
    of the full learning rate, so parameters after several steps are no fair comparison here.
    """
    ours = gpu_model(n_steps=n_steps, sdpa_backend="math")
    assert isinstance(ours.replay_buffer, DeviceReplayBuffer)
    theirs = copy.deepcopy(ours)
    batch = fixed_batch(ours, monkeypatch)
    assert batch.observations.device.type == "cuda" and (batch.discounts is not None) == (n_steps > 1)
    monkeypatch.setattr(theirs.replay_buffer, "sample", ours.replay_buffer.sample)
    ours.train(gradient_steps=1, batch_size=32)
    DQN.train(theirs, gradient_steps=1, batch_size=32)
    assert ours.logger.name_to_value["train/loss"] == pytest.approx(theirs.logger.name_to_value["train/loss"])
    for (name, mine), reference in zip(ours.q_net.named_parameters(), theirs.q_net.parameters(), strict=True):
        assert mine.device.type == "cuda"
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def cuda_kernel_names(model):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model.train(gradient_steps=2, batch_size=32)
        torch.cuda.synchronize()
    return {event.name for event in prof.events()}


def test_bf16_and_flash_are_active_and_the_flash_kernel_runs():
    model = gpu_model(use_bf16=True, use_flash_attention=True)
    active = model.active_optimizations
    assert active.bf16.active and active.flash.active, (active.bf16, active.flash)
    names = cuda_kernel_names(model)
    assert "aten::_scaled_dot_product_flash_attention" in names
    assert not any("scaled_dot_product_attention_math" in name for name in names)
    q_values = model.q_net(torch.as_tensor(model.observation_space.sample()[None], device="cuda"))
    assert q_values.dtype == torch.float32


def test_flash_without_bf16_is_reported_off_and_attention_still_runs():
    model = gpu_model(use_bf16=False, use_flash_attention=True)
    assert not model.active_optimizations.flash.active
    assert "bf16" in model.active_optimizations.flash.reason
    model.train(gradient_steps=2, batch_size=32)


@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_each_sdpa_backend_gives_the_q_values_of_the_math_kernel(backend):
    """Under bf16 autocast, where every kernel runs; one that cannot run here says why."""
    reference = gpu_model(use_bf16=True, sdpa_backend="math")
    model = gpu_model(use_bf16=True, use_flash_attention=backend == "flash", sdpa_backend=backend)
    model.q_net.load_state_dict(reference.q_net.state_dict())
    decision = model.active_optimizations.flash if backend == "flash" else model.active_optimizations.sdpa
    if not decision.active:
        assert decision.reason, f"{backend} is off without a reason"
        pytest.skip(f"{backend} does not run on this GPU: {decision.reason}")
    observations = torch.as_tensor(np.stack([model.observation_space.sample() for _ in range(64)]), device="cuda")
    with torch.no_grad():
        expected, got = reference.q_net(observations), model.q_net(observations)
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


def test_on_the_gpu_nothing_compiles_in_training_and_the_step_is_captured(monkeypatch):
    started = []
    monkeypatch.setattr("sb3_snake.update.compile.CompileJob", lambda *args, **kwargs: started.append(args))
    model = gpu_model(use_cuda_graph=True, use_torch_compile=True, compile_after=0)
    assert model.active_optimizations.compile == Decision.off(COMPILE_ON_CPU_ONLY)
    model.train(gradient_steps=WARMUP_STEPS + 2, batch_size=32)
    assert started == [] and model.q_net._compiled_call_impl is None
    assert model.active_optimizations.cuda_graph.active and model.step_choice.current.replays == 2


def test_auto_measures_this_gpu_and_caches_what_it_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = OptimizationSettings(use_bf16="auto", use_flash_attention="auto", use_torch_compile=False, num_threads=1)
    resolved, _, batch_source = resolve_auto(asked, "auto", "cuda", SMALL_POLICY, 6)
    assert resolved.auto_fields == () and batch_source.startswith("auto: chose ")
    for field in ("use_bf16", "use_flash_attention"):
        assert resolved.source(field).startswith("auto: chose "), resolved.source(field)
    (cached,) = tmp_path.glob("*.json")
    assert torch.cuda.get_device_name() in cached.read_text()
    # What auto chose is what runs: a named kernel is active, not a fallback under its name.
    active = small_dqn(resolved, board_size=6, transitions=64, device="cuda").active_optimizations
    if resolved.sdpa_backend not in ("auto", "flash"):
        assert active.sdpa.active, active.sdpa.reason
    assert active.flash.active == resolved.use_flash_attention, active.flash.reason
    assert active.bf16.active == resolved.use_bf16


def test_a_kernel_that_cannot_run_says_why_without_printing_warnings(recwarn):
    runs, reason = probe_sdpa(torch.device("cuda"), torch.float32, "flash")
    assert not runs and "dtype" in reason, reason
    assert len(recwarn) == 0


def test_the_probe_finds_the_kernels_that_need_bf16_and_no_compile():
    machine = Machine.probe(torch.device("cuda"))
    assert "flash" in machine.kernels and "flash" in machine.bf16_only and "efficient" not in machine.bf16_only
    assert machine.compile_unavailable == COMPILE_ON_CPU_ONLY  # auto never measures a compile on a GPU


def test_out_of_memory_halves_the_batch_on_the_gpu():
    """A real CUDA out-of-memory error: the process may use 512 MiB of this GPU beyond what it holds."""
    gc.collect()  # models of earlier tests, CUDA graphs' pools among them
    torch.cuda.empty_cache()
    allowed = torch.cuda.memory_reserved() + 2**29
    torch.cuda.set_per_process_memory_fraction(allowed / torch.cuda.get_device_properties(0).total_memory)
    try:
        result = measure_halving_on_oom("fp32", 2**19, "cuda", gradient_steps=1, repeats=1, buffer_size=1024, seconds=0)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert result.requested_batch_size == 2**19 and result.batch_size < 2**19
    assert result.out_of_memory_at[0] == 2**19 and result.samples_per_second > 0


def test_train_on_cuda_from_the_command_line(tmp_path):
    args = ["--n-envs", "4", "--board-size", "5", "--seed", "1", "--learning-starts", "16"]
    args += ["--exploration-steps", "50", "--buffer-size", "2000", "--no-compile", "--batch-size", "16"]
    result = CliRunner().invoke(
        app, ["train", "--episodes", "6", *args, "--device", "cuda", "--bf16", "--output", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 6
    assert summary["active"]["device"].startswith("cuda")
    assert summary["active"]["bf16_active"] is True
    assert summary["active"]["cuda_graph_active"] is True, summary["active"]["cuda_graph_reason"]


@pytest.mark.parametrize("augment", [False, True], ids=["plain", "symmetries"])
def test_the_captured_step_replays_what_eager_steps_do(augment):
    """Eight updates: the warm-up's eager ones, a capture, replays; the same eight run eagerly
    from the same seed draw the same batches (the generators' offsets advance alike, the
    augmentation's own among them) and end with the same losses and weights, up to the GPU's
    unordered additions."""
    graphed = gpu_model(use_cuda_graph=True, dqn_kwargs={"symmetry_augmentation": augment})
    assert graphed.active_optimizations.cuda_graph.active, graphed.active_optimizations.cuda_graph.reason
    eager = copy.deepcopy(graphed)
    for model in (graphed, eager) if augment else ():
        model._augmentation.generator.manual_seed(7)
    torch.cuda.manual_seed(1)
    graphed.train(gradient_steps=8, batch_size=32)
    captured = graphed.step_choice.current
    assert (captured.eager_steps, captured.replays, captured.failure) == (WARMUP_STEPS, 8 - WARMUP_STEPS, "")
    reference = CapturedSteps(eager, batch_size=32)
    reference.refresh()
    torch.cuda.manual_seed(1)
    for _ in range(8):
        reference.recorded_step()
    expected = float(reference.loss_sum) / 8
    assert graphed.logger.name_to_value["train/loss"] == pytest.approx(expected, rel=1e-3)
    learning_rate = graphed.policy.optimizer.param_groups[0]["lr"]
    for mine, theirs in zip(graphed.q_net.parameters(), eager.q_net.parameters(), strict=True):
        # Adam moves a weight at most about one learning rate per step.
        torch.testing.assert_close(mine, theirs, rtol=0, atol=2 * 8 * learning_rate)
    # A graph that replayed one frozen batch would give other losses than fresh draws: it trains on.
    graphed.train(gradient_steps=4, batch_size=32)
    assert captured.replays == 8 - WARMUP_STEPS + 4 and graphed._n_updates == 12


@pytest.mark.parametrize(
    "settings, dqn_kwargs",
    [
        ({"use_bf16": True, "use_flash_attention": True}, {}),
        ({}, {"double_dqn": True, "symmetry_augmentation": True}),
        ({}, {"n_steps": 3}),
    ],
    ids=["bf16+flash", "double+symmetry", "n-step"],
)
def test_the_graph_captures_each_optimization_and_option(settings, dqn_kwargs):
    n_steps = dqn_kwargs.pop("n_steps", 1)
    model = gpu_model(use_cuda_graph=True, n_steps=n_steps, dqn_kwargs=dqn_kwargs, **settings)
    model.train(gradient_steps=WARMUP_STEPS + 3, batch_size=32)
    assert model.active_optimizations.cuda_graph.active, model.active_optimizations.cuda_graph.reason
    assert model.step_choice.current.replays == 3 and np.isfinite(model.logger.name_to_value["train/loss"])


def test_a_new_learning_rate_is_captured_again_and_a_new_batch_size_too():
    model = gpu_model(use_cuda_graph=True)
    model.train(gradient_steps=WARMUP_STEPS + 1, batch_size=32)
    first = model.step_choice.current
    model.lr_schedule = lambda _progress_remaining: 1e-3  # a schedule that moves, as SB3 applies one
    model.train(gradient_steps=2, batch_size=32)
    assert model.step_choice.current is first and first.learning_rates == (1e-3,) and first.replays == 3
    model.train(gradient_steps=WARMUP_STEPS + 1, batch_size=64)
    assert model.step_choice.current is not first and model.step_choice.current.replays == 1


def test_a_failed_capture_trains_on_eagerly_and_says_why(monkeypatch):
    def refuse(graph, *args, **kwargs):
        raise RuntimeError("capture refused here\nsecond line")

    monkeypatch.setattr(torch.cuda, "graph", refuse)
    model = gpu_model(use_cuda_graph=True)
    model.train(gradient_steps=WARMUP_STEPS + 3, batch_size=32)
    decision = model.active_optimizations.cuda_graph
    assert not decision.active and decision.reason == "the capture failed: capture refused here"
    assert model._n_updates == WARMUP_STEPS + 3 and model.step_choice.current is None
    model.train(gradient_steps=2, batch_size=32)
    assert model._n_updates == WARMUP_STEPS + 5
