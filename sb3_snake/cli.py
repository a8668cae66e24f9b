"""The ``sb3-snake`` command line: parses options, builds settings, calls library functions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from sb3_snake.benchmark import gradient_step
from sb3_snake.benchmark.env_throughput import DEFAULT_NUM_ENVS, format_table, run_env_benchmark
from sb3_snake.benchmark.system import RESULTS_DIR, save_results

app = typer.Typer(
    name="sb3-snake",
    help="Train, evaluate and benchmark Stable-Baselines3 agents on Snake.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _main() -> None:
    """Train, evaluate and benchmark Stable-Baselines3 agents on Snake."""


def _parse_int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise typer.BadParameter(
            f"expected comma-separated positive integers such as 64,4096, got {text!r}", param_hint=option
        )
    return values


@app.command("benchmark-env")
def benchmark_env(
    num_envs: Annotated[str, typer.Option(help="Comma-separated numbers of games.")] = ",".join(
        map(str, DEFAULT_NUM_ENVS)
    ),
    device: Annotated[
        list[str] | None, typer.Option(help="cpu or cuda; repeat for both (default: all present).")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per configuration (median reported).")] = 5,
    seconds: Annotated[float, typer.Option(min=0.01, help="Seconds per timed run.")] = 0.5,
    threads: Annotated[int | None, typer.Option(min=1, help="torch intra-op threads (default: torch's).")] = None,
    output: Annotated[Path, typer.Option(help="Folder for the JSON results.")] = RESULTS_DIR,
) -> None:
    """Env steps/s of the batched env at several sizes against a Python loop over one SnakeEnv."""
    sizes = _parse_int_list(num_envs, "--num-envs")
    for name in device or []:
        if name not in ("cpu", "cuda"):
            raise typer.BadParameter(f"expected cpu or cuda, got {name!r}", param_hint="--device")
        if name == "cuda" and not torch.cuda.is_available():
            raise typer.BadParameter(
                "cuda was requested but no CUDA GPU is available; use --device cpu", param_hint="--device"
            )
    if threads is not None:
        torch.set_num_threads(threads)
    typer.echo(
        f"Measuring {len(sizes)} sizes, {repeats} runs of {seconds:g}s each, {torch.get_num_threads()} torch threads..."
    )
    report = run_env_benchmark(
        sizes,
        device or None,
        seconds_per_repeat=seconds,
        repeats=repeats,
        progress=lambda r: typer.echo(f"  {r.env} {r.api} {r.device} x{r.num_envs}: {r.steps_per_second:,.0f} steps/s"),
    )
    typer.echo(format_table(report))
    typer.echo(f"Saved {save_results('env_throughput', report, output)}")


@app.command("benchmark-grad")
def benchmark_grad(
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = ",".join(
        map(str, gradient_step.DEFAULT_BATCH_SIZES)
    ),
    combinations: Annotated[str, typer.Option(help="Comma-separated combinations.")] = ",".join(
        gradient_step.COMBINATIONS
    ),
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    gradient_steps: Annotated[int, typer.Option(min=1, help="Gradient steps per timed run.")] = 4,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per configuration (median reported).")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="torch intra-op threads (default: torch's).")] = None,
    output: Annotated[Path, typer.Option(help="Folder for the JSON results.")] = RESULTS_DIR,
) -> None:
    """Gradient samples/s of SnakeDQN for each batch size and optimization combination."""
    sizes = _parse_int_list(batch_sizes, "--batch-sizes")
    names = [name.strip() for name in combinations.split(",") if name.strip()]
    unknown = [name for name in names if name not in gradient_step.COMBINATIONS]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown combination(s) {unknown}; choose from {', '.join(gradient_step.COMBINATIONS)}",
            param_hint="--combinations",
        )
    if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
        raise typer.BadParameter(
            f"device must be cpu, or cuda on a machine with a GPU; got {device!r}", param_hint="--device"
        )
    if threads is not None:
        torch.set_num_threads(threads)
    report = gradient_step.run_gradient_step_benchmark(
        sizes,
        names,
        device,
        gradient_steps,
        repeats,
        progress=lambda r: typer.echo(f"  {r.combination} batch {r.batch_size}: {r.samples_per_second:,.0f} samples/s"),
    )
    typer.echo(gradient_step.format_table(report))
    typer.echo(f"Saved {save_results('gradient_step', report, output)}")


def main() -> None:
    app()
