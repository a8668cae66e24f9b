"""The matmul peak, the ceiling of a gradient step's own products, and the counted FLOPs behind
every row's efficiency."""

from types import SimpleNamespace

import pytest
import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import (
    count_flops_per_sample,
    matmul_ceiling,
    matmul_peak,
    step_products,
    train_step_model,
)
from sb3_snake.common import timing
from sb3_snake.training.run import TrainConfig


def test_the_ceiling_replays_exactly_the_products_the_flop_count_counts():
    """The products recorded from one step, replayed on fresh tensors, make the counted FLOPs of
    a step (so ceiling and rows share one count), and a real ceiling is a rate."""
    from torch.utils.flop_counter import FlopCounterMode

    products = step_products(32, board_size=6)
    with FlopCounterMode(display=False) as counter:
        for product in products:
            product()
    assert counter.get_total_flops() == pytest.approx(32 * count_flops_per_sample(batch_size=32, board_size=6))
    assert matmul_ceiling(16, board_size=6, repeats=2) > 0


def test_flops_are_counted_per_sample_and_cover_both_passes_and_the_backward():
    from torch.utils.flop_counter import FlopCounterMode

    per_sample = count_flops_per_sample(batch_size=32, board_size=6)
    # Per sample up to the attention pool's folded query, computed once per batch (a few kFLOP a step).
    assert per_sample == pytest.approx(count_flops_per_sample(batch_size=64, board_size=6), rel=1e-3)
    from sb3_snake.dqn.snake_dqn import SnakeDQN
    from sb3_snake.envs import BatchedSnakeVecEnv

    # FlopCounterMode sees math SDPA
    eager = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False)
    env = BatchedSnakeVecEnv(1, board_size=6)
    policy = TrainConfig().policy_kwargs()  # the policy sb3-snake train builds, which the count measures
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=eager,
        policy_kwargs=policy,
        learning_starts=0,
        buffer_size=64,
        device="cpu",
    )
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.q_net(torch.zeros(16, *model.observation_space.shape))
    forward = counter.get_total_flops() / 16
    # online forward + target forward + backward (about twice a forward, less the input layer)
    assert 3.0 * forward < per_sample < 4.0 * forward


def test_the_benchmarks_time_the_step_sb3_snake_train_trains_with():
    eager = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False)
    model = train_step_model(eager, "cpu", board_size=6, transitions=64, batch_size=16)
    config = TrainConfig(algo="dqn")  # the step benchmark-grad times is SnakeDQN's
    assert model.action_space.n == (3 if config.egocentric else 4)
    assert model.symmetry_augmentation == config.symmetry_augmentation and model.batch_size == 16
    assert model.policy_kwargs["features_extractor_kwargs"] == config.policy_kwargs()["features_extractor_kwargs"]


def test_matmul_peak_is_a_rate():
    assert matmul_peak("cpu", torch.float32, size=128, repeats=3) > 0


def test_matmul_peak_is_the_fastest_product_not_the_median(monkeypatch):
    """Products timed at 0.5, 0.25 and 1.0 s after an untimed one: the peak is the 0.25 s one."""
    clock = iter([10.0, 10.5, 20.0, 20.25, 30.0, 31.0])  # a start and a stop per timed product
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    assert matmul_peak("cpu", torch.float32, size=64, repeats=3) == pytest.approx(2 * 64**3 / 0.25 / 1e9)


def test_without_native_bf16_the_bf16_peak_is_a_smaller_product(monkeypatch):
    """Emulated bf16 is a slow path, not a peak: its product is kept small (a 2048 one took
    over half a minute on a 2-core CPU without native bf16)."""
    from sb3_snake.benchmark import matmul

    sizes = {}
    monkeypatch.setattr(matmul, "matmul_peak", lambda device, dtype, size: sizes.setdefault(dtype, size) or 1.0)
    monkeypatch.setattr(matmul, "native_bf16", lambda device: False)
    matmul.matmul_peaks("cpu")
    assert sizes == {torch.float32: None, torch.bfloat16: matmul.EMULATED_BF16_PEAK_SIZE}
    sizes.clear()
    monkeypatch.setattr(matmul, "native_bf16", lambda device: True)
    matmul.matmul_peaks("cpu")
    assert sizes == {torch.float32: None, torch.bfloat16: None}  # the default size, as for fp32
