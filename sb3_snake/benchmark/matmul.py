"""How close a gradient step comes to the machine's limit: FLOPs counted, the matmul peak, and
the matmul ceiling of the step's own products.

Every row of ``benchmark-grad`` carries the FLOPs of a gradient step per sample, counted by
``torch.utils.flop_counter.FlopCounterMode`` around one ``SnakeDQN.train`` step (:func:`count_flops_per_sample`,
the eager fp32 model with the math SDPA path), the GFLOP/s that makes, its fraction of this machine's matmul
peak in the row's precision (:func:`matmul_peak`, measured in the same run), and the **matmul ceiling** of its
batch size and precision (:func:`matmul_ceiling`: the step's own products replayed back to back, alone). Peak
to ceiling is what the shapes cost; ceiling to row is what everything else in the step costs.
Design notes: docs/design-notes.md, "sb3_snake/benchmark/matmul.py".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune import filled_model
from sb3_snake.common.system import native_bf16
from sb3_snake.common.timing import device_sync, time_runs
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.training.run import TrainConfig

#: Side of the square matrices whose product measures the matmul peak, per device type: on a GPU
#: a 2048 product takes tens of microseconds, too close to the cost of timing it.
PEAK_MATRIX_SIZE = {"cpu": 2048, "cuda": 8192}
#: The bf16 product's size on a CPU without native bf16, where bf16 is emulated: there it is a
#: slow path, not a peak, and a 2048 product took over half a minute (about three and a half
#: minutes for :func:`matmul_peaks`' six, on a 2-core AVX2-only CPU).
EMULATED_BF16_PEAK_SIZE = 512


def matmul_peak(
    device: str = "cpu", dtype: torch.dtype = torch.float32, size: int | None = None, repeats: int = 5
) -> float:
    """GFLOP/s of one ``size`` x ``size`` matrix product in ``dtype``: the fastest of ``repeats``
    (after one untimed product), the peak a dense gradient step could approach. The fastest, not
    the median: a product slowed by another process or the host says nothing about the peak,
    and a peak read low would flatter every row's share of it (on a shared machine the median
    of a few products can read far lower one minute than the minute before)."""
    size = size or PEAK_MATRIX_SIZE[torch.device(device).type]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    torch.mm(a, b)  # warms up, untimed
    durations, _ = time_runs(lambda: torch.mm(a, b), device_sync(device), seconds=0, repeats=repeats)
    return 2 * size**3 / min(durations) / 1e9


def matmul_peaks(device: str = "cpu", size: int | None = None) -> dict[str, float]:
    """:func:`matmul_peak` in fp32 and bf16, GFLOP/s; bf16 of :data:`EMULATED_BF16_PEAK_SIZE`
    where the device has no native bf16 (and no size is given)."""
    bf16_size = size
    if size is None and not native_bf16(device):
        bf16_size = EMULATED_BF16_PEAK_SIZE
    return {"fp32": matmul_peak(device, torch.float32, size), "bf16": matmul_peak(device, torch.bfloat16, bf16_size)}


def train_step_model(
    settings: OptimizationSettings, device: str, board_size: int, transitions: int, batch_size: int
) -> SnakeDQN:
    """A model whose gradient step is the one ``sb3-snake train`` trains with (its default
    policy, view and augmentation; :func:`~sb3_snake.autotune.filled_model`),
    ``transitions`` of random play in its buffer."""
    config = TrainConfig(algo="dqn")
    return filled_model(
        settings,
        device,
        board_size,
        transitions,
        config.policy_kwargs(),
        batch_size=batch_size,
        egocentric=config.egocentric,
        symmetry_augmentation=config.symmetry_augmentation,
    )


def count_flops_per_sample(device: str = "cpu", batch_size: int = 256, board_size: int = 10) -> float:
    """FLOPs of one gradient step of ``sb3-snake train``'s default policy per sample, counted by FlopCounterMode
    around ``SnakeDQN.train`` (online and target passes, backward, on the eager fp32 model)."""
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False)
    model = train_step_model(settings, device, board_size, max(1024, batch_size), batch_size)
    with FlopCounterMode(display=False) as counter:
        model.train(gradient_steps=1, batch_size=batch_size)
    return counter.get_total_flops() / batch_size


@dataclass(frozen=True)
class TensorLayout:
    """What a recorded product needs of one of its tensors to be replayed on fresh data."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorLayout:
        return cls(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device)

    def fresh(self) -> torch.Tensor:
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device).uniform_()


class _ProductRecorder(TorchDispatchMode):
    """Records every operator FlopCounterMode counts (matmuls, attention) with its tensors' layouts."""

    def __init__(self) -> None:
        super().__init__()
        self.products: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in flop_registry:
            self.products.append((func, *tree_map_only(torch.Tensor, TensorLayout.of, (args, kwargs))))
        return func(*args, **kwargs)


def record_products(step: Callable[[], Any]) -> list[Callable[[], Any]]:
    """The matrix products one call of ``step`` makes, each as a call on fresh tensors of the
    recorded shapes, strides and dtypes."""
    with _ProductRecorder() as recorder:
        step()
    calls = []
    for func, args, kwargs in recorder.products:
        args, kwargs = tree_map_only(TensorLayout, TensorLayout.fresh, (args, kwargs))
        calls.append(lambda func=func, args=args, kwargs=kwargs: func(*args, **kwargs))
    return calls


def step_products(
    batch_size: int, bf16: bool = False, device: str = "cpu", board_size: int = 10
) -> list[Callable[[], Any]]:
    """The matrix products of one eager gradient step of the default policy (forward, backward
    and the target pass, under bf16 autocast when ``bf16``) (:func:`record_products`)."""
    settings = OptimizationSettings(use_bf16=bf16, use_flash_attention=False, use_torch_compile=False)
    model = train_step_model(settings, device, board_size, max(1024, batch_size), batch_size)
    return record_products(lambda: model.train(gradient_steps=1, batch_size=batch_size))


def products_ceiling(products: list[Callable[[], Any]], device: str = "cpu", repeats: int = 5) -> float:
    """GFLOP/s of ``products`` replayed back to back with nothing between them, timed like the
    peak: the fastest of ``repeats`` runs of about 0.2 s each (after an untimed one), counted by
    FlopCounterMode."""

    def replay() -> None:
        for product in products:
            product()

    with FlopCounterMode(display=False) as counter:
        replay()
    durations, calls = time_runs(replay, device_sync(device), seconds=0.2, repeats=repeats)
    return counter.get_total_flops() * calls / min(durations) / 1e9


def matmul_ceiling(
    batch_size: int, bf16: bool = False, device: str = "cpu", board_size: int = 10, repeats: int = 5
) -> float:
    """GFLOP/s of one gradient step's own matrix products (:func:`step_products`) replayed back
    to back with nothing between them: what the step would reach if all else took no time
    (:func:`products_ceiling`). The products are those of the eager step; a compiled step calls
    the same ones, some with their operands laid out otherwise, which can make them a little
    faster or slower, so a row can come near its ceiling but not meaningfully pass it."""
    return products_ceiling(step_products(batch_size, bf16, device, board_size), device, repeats)


def efficiency(
    samples_per_second: float,
    flops_per_sample: float,
    active_bf16: bool,
    peaks: dict[str, float],
    ceiling_gflops: float | None = None,
) -> dict[str, Any]:
    """GFLOP/s achieved and its fraction of the matmul peak of the precision it ran in; given
    the :func:`matmul_ceiling` of the row's batch and precision, that too, as GFLOP/s and as a
    fraction of the same peak."""
    gflops = samples_per_second * flops_per_sample / 1e9
    precision = "bf16" if active_bf16 else "fp32"
    peak = peaks.get(precision)
    row = {
        "flops_per_sample": flops_per_sample,
        "gflops": gflops,
        "peak_precision": precision,
        "peak_fraction": gflops / peak if peak else None,
    }
    if ceiling_gflops is not None:
        row["matmul_ceiling_gflops"] = ceiling_gflops
        row["matmul_ceiling_fraction"] = ceiling_gflops / peak if peak else None
    return row
