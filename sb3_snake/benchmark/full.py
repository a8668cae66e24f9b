"""``sb3-snake benchmark``: the gradient-step sweep and the end-to-end comparison in one run.

The result is one JSON document (``benchmark_results/benchmark_results_full_<UTC>.json``)
holding the system, the plan that ran, every measurement, the configuration chosen for
training (:func:`~sb3_snake.benchmark.gradient_step.choose_configuration`) and the end-to-end
speedup of ``sb3-snake train`` over plain SB3 DQN at the same replay ratio.
:func:`write_benchmark_choice` writes the chosen configuration into a ``.env`` file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from sb3_snake.acceleration.settings import OptimizationSettings, write_env_file
from sb3_snake.benchmark import end_to_end, gradient_step
from sb3_snake.common.system import system_info
from sb3_snake.training.config import TrainConfig


@dataclass(frozen=True)
class BenchmarkPlan:
    """What one ``sb3-snake benchmark`` run measures."""

    batch_sizes: tuple[int, ...] = gradient_step.DEFAULT_BATCH_SIZES
    combinations: tuple[str, ...] = tuple(gradient_step.COMBINATIONS)
    device: str = "cpu"
    gradient_steps: int = 4  #: gradient steps per call of ``SnakeDQN.train`` in a timed run
    seconds_per_repeat: float = 0.5  #: length of a timed run of gradient steps (calibrated)
    repeats: int = 3  #: timed repeats per figure (median reported)
    end_to_end_steps: int = 4_000  #: env steps per timed repeat of the training loops
    end_to_end_warmup: int = 4_000  #: env steps learned before timing (compilation included)
    end_to_end: bool = True

    @classmethod
    def quick(cls, **changes: Any) -> BenchmarkPlan:
        """A plan short enough for a small CPU: two batch sizes, the combinations without
        compilation (on a few cores one compile takes longer than all the measurements), and
        shorter end-to-end windows. The end-to-end run still uses the settings as given."""
        plan = cls(
            batch_sizes=(256, 1024),
            combinations=("fp32", "bf16", "flash", "bf16+flash"),
            gradient_steps=2,
            seconds_per_repeat=0.25,
            end_to_end_steps=1_500,
            end_to_end_warmup=2_000,
        )
        return replace(plan, **changes)


def run_benchmark(
    plan: BenchmarkPlan,
    settings: OptimizationSettings,
    progress: Callable[[str], None] = lambda line: None,
    config: TrainConfig | None = None,
) -> dict[str, Any]:
    """Run ``plan``; the end-to-end loop of ``sb3-snake train`` runs with ``settings`` and
    ``config`` (the defaults when ``None``)."""
    progress("measuring this machine's matmul peak and counting the FLOPs of a gradient step...")
    peaks, flops = gradient_step.matmul_peaks(plan.device), gradient_step.count_flops_per_sample(plan.device)
    rows = gradient_step.sweep(
        plan.batch_sizes,
        plan.combinations,
        plan.device,
        plan.gradient_steps,
        plan.repeats,
        flops_per_sample=flops,
        peaks=peaks,
        seconds=plan.seconds_per_repeat,
        ceiling=lambda batch_size, bf16: gradient_step.matmul_ceiling(batch_size, bf16, plan.device),
        progress=lambda r: progress(
            f"  {r.combination} batch {r.batch_size}: {r.samples_per_second:,.0f} samples/s"
            + (f" (out of memory at {', '.join(map(str, r.out_of_memory_at))})" if r.out_of_memory_at else "")
        ),
    )
    report: dict[str, Any] = {
        "benchmark": "full",
        "system": system_info(),
        "plan": asdict(plan),
        "settings": {
            "gradient_step": gradient_step.gradient_settings(
                plan.device, plan.gradient_steps, plan.repeats, plan.seconds_per_repeat
            ),
            "end_to_end": settings.as_dict(),
        },
        "matmul_peak_gflops": peaks,
        "flops_per_sample": flops,
        "gradient_step": rows,
        "best": gradient_step.choose_configuration(rows),
        "end_to_end": None,
    }
    if plan.end_to_end:
        report["end_to_end"] = end_to_end.run_end_to_end(
            settings, plan.end_to_end_warmup, plan.end_to_end_steps, plan.repeats, progress, config
        )
    return report


def format_report(report: dict[str, Any]) -> str:
    """The gradient table, the chosen configuration and the end-to-end comparison."""
    table = {"results": report["gradient_step"]}
    table.update({key: report[key] for key in ("matmul_peak_gflops", "flops_per_sample") if key in report})
    lines = [gradient_step.format_table(table)]
    best = report["best"]
    lines.append(
        f"\nbest: {best['combination']} at batch {best['batch_size']} "
        f"({best['samples_per_second']:,.0f} samples/s; {best['rule']}; fastest overall "
        f"{best['fastest']['combination']} at {best['fastest']['batch_size']}: "
        f"{best['fastest']['samples_per_second']:,.0f})"
    )
    e2e = report["end_to_end"]
    if e2e:
        ours, plain = e2e["sb3_snake"], e2e["plain_sb3"]["best"]
        lines.append(f"\nend-to-end at replay ratio {e2e['replay_ratio']:g} (env steps/s, median [min-max]):")
        for label, run in (("sb3-snake train", ours), ("plain SB3 DQN", plain)):
            lines.append(
                f"  {label:<16} {run['env_steps_per_second']:>9,.0f} "
                f"[{run['min_env_steps_per_second']:,.0f}-{run['max_env_steps_per_second']:,.0f}]"
                f"  {run['threads']} thread(s), batch {run['setup']['batch_size']}, {run['setup']['n_envs']} env(s)"
            )
        lines.append(f"  speedup          {e2e['speedup']:.2f}x")
    return "\n".join(lines)


#: The settings a benchmark chooses for training (:class:`OptimizationSettings` field names), in
#: the order they are written into ``.env``: the batch size and the switches of the chosen combination.
CHOSEN_SETTINGS = ("batch_size", "use_bf16", "use_flash_attention", "use_torch_compile", "use_cuda_graph")


def env_values_from(report: dict[str, Any]) -> dict[str, Any]:
    """The settings of the report's chosen configuration (``report["best"]``), by field name."""
    return {name: report["best"][name] for name in CHOSEN_SETTINGS}


def write_benchmark_choice(report: dict[str, Any], env_file: str | os.PathLike, results_name: str) -> str:
    """Write the report's chosen configuration into ``env_file`` (its other lines and comments
    kept), with a note naming the results it came from, and return the line that says so.

    :param report: a report of :func:`run_benchmark`.
    :param env_file: the ``.env`` file to change (created if missing).
    :param results_name: the name of the saved results file, written into the note.
    """
    best = report["best"]
    write_env_file(
        env_file, note=f"{results_name}: {best['combination']} at batch {best['batch_size']}", **env_values_from(report)
    )
    return (
        f"Wrote OPTIMAL_BATCH_SIZE={best['batch_size']}, USE_BF16, USE_FLASH_ATTENTION, "
        f"USE_TORCH_COMPILE and USE_CUDA_GRAPH ({best['combination']}) into {env_file}"
    )


def log_to_wandb(report: dict[str, Any], run: Any) -> None:
    """Log a report to a :class:`~sb3_snake.training.tracking.WandbRun`: one step per gradient
    measurement, the chosen configuration and the end-to-end figures in the summary."""
    for row in report["gradient_step"]:
        run.log(
            {
                "batch_size": row["batch_size"],
                f"gradient/{row['combination']}/samples_per_second": row["samples_per_second"],
                f"gradient/{row['combination']}/peak_memory_mib": row["peak_memory_mib"],
                **(
                    {f"gradient/{row['combination']}/peak_fraction": row["peak_fraction"]}
                    if "peak_fraction" in row
                    else {}
                ),
            }
        )
    summary = {f"best/{key}": value for key, value in report["best"].items() if not isinstance(value, dict)}
    e2e = report["end_to_end"]
    if e2e:
        summary.update(
            {
                "end_to_end/sb3_snake_env_steps_per_second": e2e["sb3_snake"]["env_steps_per_second"],
                "end_to_end/plain_sb3_env_steps_per_second": e2e["plain_sb3"]["best"]["env_steps_per_second"],
                "end_to_end/speedup": e2e["speedup"],
                "end_to_end/replay_ratio": e2e["replay_ratio"],
            }
        )
    run.finish(summary)
