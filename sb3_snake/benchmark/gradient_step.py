"""Samples/s of SnakeDQN's gradient step for each batch size and optimization combination.

The step measured is the one ``sb3-snake train`` trains with at its defaults (policy, view and augmentation:
:func:`~sb3_snake.benchmark.matmul.train_step_model`), on a replay buffer of real transitions. Per
configuration a fresh model is built (and compiled, when asked), warmed up untimed, and timed over ``repeats``
runs of about ``seconds`` each through ``SnakeDQN.train`` (:func:`~sb3_snake.common.timing.time_runs`): the
median run, the slowest and fastest beside it, and the peak memory. A batch size that runs out of memory is
halved until it fits. Every row also carries the FLOPs per sample, the GFLOP/s and how close they come to the
matmul peak and ceiling (:mod:`sb3_snake.benchmark.matmul`).
Design notes: docs/design-notes.md, "sb3_snake/benchmark/gradient_step.py".
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune import BATCH_TOLERANCE, smallest_fast_enough
from sb3_snake.benchmark.matmul import (
    PEAK_MATRIX_SIZE,
    count_flops_per_sample,
    efficiency,
    matmul_ceiling,
    matmul_peaks,
    train_step_model,
)
from sb3_snake.benchmark.results import peak_memory_mib, reset_peak_memory
from sb3_snake.common.system import system_info
from sb3_snake.common.timing import device_sync, time_runs

DEFAULT_BATCH_SIZES = (256, 512, 1024, 2048, 4096, 8192)

#: Combination name -> (use_bf16, use_flash_attention, use_torch_compile).
COMBINATIONS: dict[str, tuple[bool, bool, bool]] = {
    "fp32": (False, False, False),
    "bf16": (True, False, False),
    "flash": (False, True, False),
    "compile": (False, False, True),
    "bf16+flash": (True, True, False),
    "bf16+compile": (True, False, True),
    "flash+compile": (False, True, True),
    "all": (True, True, True),
}
#: A combination named with this suffix also replays the step as one CUDA graph (CUDA only);
#: one without it never does, whatever ``USE_CUDA_GRAPH`` says.
GRAPH_SUFFIX = "+graph"
#: Every combination name ``--combinations`` takes: each of :data:`COMBINATIONS`, with or without the graph.
COMBINATION_NAMES = (*COMBINATIONS, *(name + GRAPH_SUFFIX for name in COMBINATIONS))


def combination_names(device: str = "cpu", names: Sequence[str] = tuple(COMBINATIONS)) -> tuple[str, ...]:
    """The combinations ``names`` worth measuring on ``device``: on CUDA those without a compile
    (nothing compiles there: :func:`~sb3_snake.acceleration.optimizations.compile_unavailable`),
    each also with the graph."""
    names = tuple(names)
    if device != "cuda":
        return names
    eager = tuple(name for name in names if not COMBINATIONS[name][2])
    return eager + tuple(name + GRAPH_SUFFIX for name in eager)


def parse_combination(name: str) -> tuple[bool, bool, bool, bool]:
    """``(use_bf16, use_flash_attention, use_torch_compile, use_cuda_graph)`` of a combination name."""
    graph = name.endswith(GRAPH_SUFFIX)
    base = name.removesuffix(GRAPH_SUFFIX)
    if base not in COMBINATIONS:
        raise KeyError(name)
    return (*COMBINATIONS[base], graph)


@dataclass(frozen=True)
class GradientStepResult:
    combination: str
    batch_size: int
    samples_per_second: float  #: median over repeats
    updates_per_second: float
    min_samples_per_second: float
    max_samples_per_second: float
    active: dict[str, bool]  #: which optimizations were really active
    peak_memory_mib: float  #: max_memory_allocated on CUDA, peak RSS on CPU
    steps_per_repeat: int = 0  #: gradient steps in each timed run
    requested_batch_size: int | None = None  #: the batch size asked for, when out-of-memory halved it
    out_of_memory_at: tuple[int, ...] = ()  #: batch sizes that ran out of memory, in order


def measure_gradient_step(
    combination: str,
    batch_size: int,
    device: str = "cpu",
    gradient_steps: int = 4,
    repeats: int = 5,
    warmup_calls: int = 1,
    board_size: int = 10,
    buffer_size: int = 16384,
    seconds: float = 0.5,
) -> GradientStepResult:
    """Time ``DQN.train`` for one combination and batch size: ``repeats`` runs of about
    ``seconds`` each, made of calls of ``gradient_steps`` steps (``seconds`` of 0: one call a run)."""
    use_bf16, use_flash, use_compile, use_graph = parse_combination(combination)
    settings = OptimizationSettings(
        use_bf16=use_bf16,
        use_flash_attention=use_flash,
        use_torch_compile=use_compile,
        num_threads=torch.get_num_threads(),
        use_cuda_graph=use_graph,
    )
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    reset_peak_memory(device)
    model = train_step_model(settings, device, board_size, max(buffer_size, batch_size), batch_size)
    for _ in range(warmup_calls):  # as timed: the first compiled call fixes the steps each call holds
        model.train(gradient_steps=gradient_steps, batch_size=batch_size)
    sync = device_sync(device)
    durations, calls = time_runs(
        lambda: model.train(gradient_steps=gradient_steps, batch_size=batch_size), sync, seconds, repeats
    )
    rates = [batch_size * gradient_steps * calls / d for d in durations]
    active = model.active_optimizations
    return GradientStepResult(
        combination,
        batch_size,
        statistics.median(rates),
        statistics.median(rates) / batch_size,
        min(rates),
        max(rates),
        {
            "bf16": active.bf16.active,
            "flash_attention": active.flash.active,
            "torch_compile": active.compile.active,
            "cuda_graph": active.cuda_graph.active,
        },
        peak_memory_mib(device),
        steps_per_repeat=gradient_steps * calls,
    )


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` means the device (or the host) ran out of memory."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    message = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in message or "can't allocate memory" in message)


def measure_halving_on_oom(
    combination: str,
    batch_size: int,
    device: str = "cpu",
    measure: Callable[..., GradientStepResult] = measure_gradient_step,
    **kwargs: Any,
) -> GradientStepResult:
    """:func:`measure_gradient_step`, halving the batch size each time it runs out of memory."""
    failed: list[int] = []
    while True:
        try:
            result = measure(combination, batch_size, device, **kwargs)
        except Exception as error:
            if not is_out_of_memory(error) or batch_size == 1:
                raise
            failed.append(batch_size)  # the next measurement starts by freeing what this one held
            batch_size //= 2
            continue
        if failed:
            result = replace(result, requested_batch_size=failed[0], out_of_memory_at=tuple(failed))
        return result


def sweep(
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    combinations: Sequence[str] = tuple(COMBINATIONS),
    device: str = "cpu",
    gradient_steps: int = 4,
    repeats: int = 5,
    progress: Callable[[GradientStepResult], None] | None = None,
    measure: Callable[..., GradientStepResult] = measure_gradient_step,
    flops_per_sample: float | None = None,
    peaks: dict[str, float] | None = None,
    seconds: float = 0.5,
    ceiling: Callable[[int, bool], float] | None = None,
) -> list[dict[str, Any]]:
    """Every combination at every batch size (halved on out-of-memory), as JSON-ready rows
    with each row's speed relative to fp32 at the same batch size, and, given the counted
    ``flops_per_sample`` and the matmul ``peaks``, its GFLOP/s and fraction of the peak; given
    ``ceiling`` (GFLOP/s of a batch size's products alone, in bf16 or not: :func:`matmul_ceiling`),
    each row's ceiling too, measured once per batch size and precision."""
    results = []
    timed = {"gradient_steps": gradient_steps, "repeats": repeats, "seconds": seconds}
    for combination in combinations:
        for batch_size in batch_sizes:
            result = measure_halving_on_oom(combination, batch_size, device, measure, **timed)
            results.append(result)
            if progress:
                progress(result)
    fp32 = {r.batch_size: r.samples_per_second for r in results if r.combination == "fp32"}
    ceilings: dict[tuple[int, bool], float] = {}
    rows = []
    for r in results:
        row = {
            **asdict(r),
            "speedup_vs_fp32": r.samples_per_second / fp32[r.batch_size] if r.batch_size in fp32 else None,
        }
        if flops_per_sample is not None and peaks is not None:
            key = (r.batch_size, r.active["bf16"])
            if ceiling is not None and key not in ceilings:
                ceilings[key] = ceiling(*key)
            row.update(efficiency(r.samples_per_second, flops_per_sample, r.active["bf16"], peaks, ceilings.get(key)))
        rows.append(row)
    return rows


def choose_configuration(rows: Sequence[dict[str, Any]], tolerance: float = BATCH_TOLERANCE) -> dict[str, Any]:
    """The configuration to train with: the fastest combination, at its smallest batch size
    within ``tolerance`` of that combination's peak samples/s.

    DQN learns per update and ``sb3-snake train`` holds the replay ratio, so a larger batch
    means fewer updates for the same samples: a batch 8x larger that is 5% faster is a worse
    choice. Rows whose requested optimizations were not all active (bf16 on a machine without
    it, say) only repeat a simpler combination and are not candidates.
    """
    candidates = [row for row in rows if _all_requested_active(row)] or list(rows)
    fastest = max(candidates, key=lambda row: row["samples_per_second"])
    same_combination = {row["batch_size"]: row for row in candidates if row["combination"] == fastest["combination"]}
    rates = {size: row["samples_per_second"] for size, row in same_combination.items()}
    chosen = same_combination[smallest_fast_enough(rates, tolerance)]
    use_bf16, use_flash, use_compile, use_graph = parse_combination(chosen["combination"])
    return {
        "combination": chosen["combination"],
        "batch_size": chosen["batch_size"],
        "samples_per_second": chosen["samples_per_second"],
        "use_bf16": use_bf16,
        "use_flash_attention": use_flash,
        "use_torch_compile": use_compile,
        "use_cuda_graph": use_graph,
        "fastest": {key: fastest[key] for key in ("combination", "batch_size", "samples_per_second")},
        "rule": f"fastest combination, smallest batch within {tolerance:.0%} of its peak",
    }


def _all_requested_active(row: dict[str, Any]) -> bool:
    names = ("bf16", "flash_attention", "torch_compile", "cuda_graph")
    requested = dict(zip(names, parse_combination(row["combination"]), strict=True))
    return all(row["active"].get(name, False) for name, wanted in requested.items() if wanted)


def run_gradient_step_benchmark(
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    combinations: Sequence[str] = tuple(COMBINATIONS),
    device: str = "cpu",
    gradient_steps: int = 4,
    repeats: int = 5,
    progress: Callable[[GradientStepResult], None] | None = None,
    seconds: float = 0.5,
) -> dict[str, Any]:
    """:func:`sweep` with the system it ran on, its matmul peaks, the counted FLOPs per sample
    and the chosen configuration; JSON-ready."""
    peaks, flops = matmul_peaks(device), count_flops_per_sample(device)
    rows = sweep(
        batch_sizes,
        combinations,
        device,
        gradient_steps,
        repeats,
        progress,
        flops_per_sample=flops,
        peaks=peaks,
        seconds=seconds,
        ceiling=lambda batch_size, bf16: matmul_ceiling(batch_size, bf16, device),
    )
    return {
        "benchmark": "gradient_step",
        "system": system_info(),
        "settings": gradient_settings(device, gradient_steps, repeats, seconds),
        "matmul_peak_gflops": peaks,
        "flops_per_sample": flops,
        "results": rows,
        "best": choose_configuration(rows),
    }


def gradient_settings(device: str, gradient_steps: int, repeats: int, seconds: float) -> dict[str, Any]:
    return {
        "device": device,
        "seconds_per_repeat": seconds,
        "gradient_steps_per_call": gradient_steps,
        "repeats": repeats,
        "matmul_peak_matrix_size": PEAK_MATRIX_SIZE[torch.device(device).type],
        "policy": "AttentionPolicy (default sizes)",
        "statistic": "median over repeats",
        "peak_memory": (
            "torch.cuda.max_memory_allocated on CUDA; on CPU the process's peak RSS during the "
            "configuration, which includes memory kept from earlier configurations"
        ),
    }


def format_table(report: dict[str, Any]) -> str:
    header = f"{'combination':<13} {'batch':>6} {'samples/s':>11} {'spread':>15} {'updates/s':>10} {'vs fp32':>8}"
    lines = [f"{header} {'GFLOP/s':>8} {'of peak':>8} {'ceiling':>8} {'peak MiB':>9}  active"]
    for r in report["results"]:
        speedup = f"{r['speedup_vs_fp32']:.2f}x" if r["speedup_vs_fp32"] else "-"
        active = ",".join(k for k, v in r["active"].items() if v) or "none"
        spread = f"{r['min_samples_per_second']:,.0f}-{r['max_samples_per_second']:,.0f}"
        batch = f"{r['batch_size']}" + ("*" if r["out_of_memory_at"] else "")
        gflops = f"{r['gflops']:.1f}" if r.get("gflops") is not None else "-"
        of_peak = f"{r['peak_fraction']:.0%} {r['peak_precision']}" if r.get("peak_fraction") is not None else "-"
        ceiling = f"{r['matmul_ceiling_fraction']:.0%}" if r.get("matmul_ceiling_fraction") is not None else "-"
        lines.append(
            f"{r['combination']:<13} {batch:>6} {r['samples_per_second']:>11,.0f} {spread:>15} "
            f"{r['updates_per_second']:>10.2f} {speedup:>8} {gflops:>8} {of_peak:>8} {ceiling:>8} "
            f"{r['peak_memory_mib']:>9,.0f}  {active}"
        )
    if any(r["out_of_memory_at"] for r in report["results"]):
        lines.append("* halved after running out of memory at a larger batch size")
    if "matmul_peak_gflops" in report:
        peaks = report["matmul_peak_gflops"]
        lines.append(
            f"{report['flops_per_sample'] / 1e6:.2f} MFLOP per sample (counted); matmul peak of this machine: "
            f"fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s"
        )
    if any(r.get("matmul_ceiling_fraction") is not None for r in report["results"]):
        lines.append(
            "ceiling: the step's own matrix products replayed alone, as a share of the same peak "
            "(what the step would reach if all else took no time)"
        )
    return "\n".join(lines)
