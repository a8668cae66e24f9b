"""The speed benchmark commands: ``benchmark-env``, ``benchmark-train``, ``benchmark-grad``,
``benchmark-replay`` and the full ``benchmark`` (learning curves: ``cli.learning``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from sb3_snake.acceleration.settings import OptimizationSettings, check_env_file_writable
from sb3_snake.benchmark.env_throughput import DEFAULT_NUM_ENVS
from sb3_snake.benchmark.gradient_step import DEFAULT_BATCH_SIZES
from sb3_snake.benchmark.results import RESULTS_DIR, save_results
from sb3_snake.cli.common import app, user_errors
from sb3_snake.cli.options import (
    ONLINE,
    OPTIMIZATIONS,
    Device,
    EnvFileOption,
    OutputOption,
    WandbMode,
    from_flags,
    load_settings,
    parameters,
    settings_parameters,
    with_parameters,
)
from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import parse
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.common.system import check_device, cpu_cores, resolve_device
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.tracking import resolve_mode


def _parse_int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{option}: expected comma-separated positive integers such as 64,4096, got {text!r}")
    return values


def _parse_combinations(text: str) -> tuple[str, ...]:
    """Comma-separated optimization combinations of the gradient benchmark."""
    from sb3_snake.benchmark import gradient_step

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in gradient_step.COMBINATION_NAMES]
    if unknown or not names:
        raise UsageError(
            f"--combinations: unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(gradient_step.COMBINATIONS)}, each optionally with "
            f"{gradient_step.GRAPH_SUFFIX} (CUDA)"
        )
    return names


ThreadsOption = Annotated[str | None, typer.Option(help="torch intra-op threads (default: torch's).")]
DeviceOption = Annotated[Device, typer.Option(help="cpu or cuda.")]
RepeatsOption = Annotated[int, typer.Option(min=1, help="Timed runs per figure (median reported).")]


def _benchmark_threads(threads: str | None) -> int | None:
    if threads is None:
        return None
    value = parse(OptimizationSettings, "num_threads", threads)
    return cpu_cores() if value == "auto" else value


def _benchmark_target(device: Device, threads: str | None, output: Path) -> tuple[str, int | None]:
    """A single-device benchmark's checks, before it measures: the device, the thread count, the folder."""
    with user_errors():
        target = resolve_device(device.value).type
        count = _benchmark_threads(threads)
        check_writable_dir(output, what="--output folder", create=True)
    return target, count


@contextmanager
def _maybe_threads(count: int | None) -> Iterator[None]:
    from sb3_snake.acceleration.optimizations import torch_threads

    if count is None:
        yield
    else:
        with torch_threads(count):
            yield


@app.command("benchmark-env")
def benchmark_env(
    num_envs: Annotated[str, typer.Option(help="Comma-separated numbers of games.")] = ",".join(
        map(str, DEFAULT_NUM_ENVS)
    ),
    device: Annotated[
        list[Device] | None, typer.Option(help="cpu or cuda; repeat for both (default: all present).")
    ] = None,
    repeats: RepeatsOption = 5,
    seconds: Annotated[float, typer.Option(min=0.01, help="Seconds per timed run.")] = 0.5,
    threads: ThreadsOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Env steps/s of the batched env at several sizes against a Python loop over one SnakeEnv."""
    import torch

    from sb3_snake.benchmark.env_throughput import format_table, run_env_benchmark

    with user_errors():
        sizes = _parse_int_list(num_envs, "--num-envs")
        devices = [check_device(d.value, allow_auto=False) for d in device or []]
        count = _benchmark_threads(threads)
        check_writable_dir(output, what="--output folder", create=True)
    with _maybe_threads(count):
        typer.echo(
            f"Measuring {len(sizes)} sizes, {repeats} runs of {seconds:g}s each, "
            f"{torch.get_num_threads()} torch threads..."
        )
        report = run_env_benchmark(
            sizes,
            devices or None,
            seconds_per_repeat=seconds,
            repeats=repeats,
            progress=lambda r: typer.echo(
                f"  {r.env} {r.api} {r.device} x{r.num_envs}: {r.steps_per_second:,.0f} steps/s"
            ),
        )
    typer.echo(format_table(report))
    typer.echo(f"Saved {save_results('env_throughput', report, output)}")


@app.command("benchmark-train")
def benchmark_train(
    algo: Annotated[str, typer.Option(help="The learner: pqn or dqn.")] = "pqn",
    policy: Annotated[str | None, typer.Option(help="PQN's network: mlp, cnn or attention (default: its).")] = None,
    threads: ThreadsOption = None,
    repeats: RepeatsOption = 5,
    warmup_steps: Annotated[
        int, typer.Option(min=1, help="Env steps learned untimed first (the compile too).")
    ] = 100_000,
    window_steps: Annotated[int, typer.Option(min=1, help="Env steps of each timed window.")] = 200_000,
    env_file: EnvFileOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Env steps/s of sb3-snake train's learner with the optimization layer (the .env's settings,
    the compile made at once) against itself eager in float32, in alternating timed windows of
    one process; the gradient step's FLOPs and its matmul ceiling beside them."""
    from sb3_snake.benchmark.train_speed import measure_layer_speedup

    with user_errors():
        settings = load_settings(env_file, {})
        config = TrainConfig(algo=algo, **({"policy": policy} if policy else {}), device="cpu")
        count = _benchmark_threads(threads) or cpu_cores()
        check_writable_dir(output, what="--output folder", create=True)
        if settings.auto_fields:
            from sb3_snake.training.run import resolve_settings

            config, settings = resolve_settings(config, settings)
    report = measure_layer_speedup(config, settings, count, warmup_steps, window_steps, repeats, progress=typer.echo)
    median = report["env_steps_per_second"]
    typer.echo(
        f"{algo} ({config.policy}), {count} threads: layer {median['layer']['median']:,.0f} env steps/s against "
        f"{median['eager_fp32']['median']:,.0f} eager fp32: {report['speedup']:.2f}x; the step at "
        f"{report['matmul_ceiling_fraction']:.0%} of its matmul ceiling"
    )
    typer.echo(f"Saved {save_results('train_speed', report, output)}")


@app.command("benchmark-grad")
def benchmark_grad(
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = ",".join(
        map(str, DEFAULT_BATCH_SIZES)
    ),
    combinations: Annotated[
        str | None, typer.Option(help="Comma-separated combinations (default: all; on CUDA each also with +graph).")
    ] = None,
    device: DeviceOption = Device.cpu,
    gradient_steps: Annotated[int, typer.Option(min=1, help="Gradient steps per call of SnakeDQN.train.")] = 4,
    seconds: Annotated[
        float, typer.Option(min=0, help="Seconds per timed run, in whole calls (0: one call a run).")
    ] = 0.5,
    repeats: RepeatsOption = 5,
    threads: ThreadsOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Gradient samples/s of SnakeDQN for each batch size and optimization combination."""
    from sb3_snake.benchmark import gradient_step

    with user_errors():
        sizes = _parse_int_list(batch_sizes, "--batch-sizes")
        default = gradient_step.combination_names(device.value)
        names = _parse_combinations(combinations) if combinations is not None else default
    target, count = _benchmark_target(device, threads, output)
    with _maybe_threads(count):
        report = gradient_step.run_gradient_step_benchmark(
            sizes,
            names,
            target,
            gradient_steps,
            repeats,
            progress=lambda r: typer.echo(
                f"  {r.combination} batch {r.batch_size}: {r.samples_per_second:,.0f} samples/s"
            ),
            seconds=seconds,
        )
    typer.echo(gradient_step.format_table(report))
    typer.echo(f"Saved {save_results('gradient_step', report, output)}")


@app.command("benchmark-replay")
def benchmark_replay(
    device: DeviceOption = Device.cpu,
    repeats: RepeatsOption = 7,
    batch_size: Annotated[int, typer.Option(min=1, help="Transitions per sampled batch.")] = 512,
    threads: ThreadsOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Replay sampling time of SB3's buffers against the device-resident buffer, 1-step and n-step."""
    from sb3_snake.benchmark.replay_sampling import run_replay_benchmark

    target, count = _benchmark_target(device, threads, output)
    with _maybe_threads(count):
        report = run_replay_benchmark(
            target,
            batch_size=batch_size,
            repeats=repeats,
            progress=lambda r: typer.echo(
                f"  {r.buffer} buffer, n_steps {r.n_steps}: {r.milliseconds_per_batch:.3f} ms per batch"
            ),
        )
    typer.echo(f"Saved {save_results('replay_sampling', report, output)}")


@app.command()
@with_parameters(
    settings_parameters(),
    parameters(
        TrainConfig,
        ["batch_size"],
        panel=OPTIMIZATIONS,
        help="The end-to-end run's replay samples per gradient step, or auto (default: .env's).",
        show_defaults=False,
    ),
)
def benchmark(
    batch_sizes: Annotated[
        str | None,
        typer.Option(help="Comma-separated batch sizes of the sweep (default: 256,...,8192; quick: 256,1024)."),
    ] = None,
    combinations: Annotated[
        str | None,
        typer.Option(help="Comma-separated optimization combinations (default: all; quick: those without compile)."),
    ] = None,
    device: Annotated[Device, typer.Option(help="auto, cpu or cuda.")] = Device.auto,
    repeats: RepeatsOption = 3,
    quick: Annotated[
        bool, typer.Option("--quick", help="A short run: batch 256 and 1024, no compile, shorter end-to-end windows.")
    ] = False,
    end_to_end: Annotated[
        bool,
        typer.Option("--end-to-end/--no-end-to-end", help="Also time sb3-snake train against plain SB3 DQN."),
    ] = True,
    write_env: Annotated[
        bool, typer.Option("--write-env", help="Write the chosen batch size and flags into the .env file.")
    ] = False,
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="Log the results to Weights & Biases.")] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "sb3-snake",
    wandb_mode: Annotated[WandbMode, typer.Option(help="W&B mode (WANDB_MODE wins).")] = ONLINE,
    output: OutputOption = RESULTS_DIR,
    **options: Any,
) -> None:
    """Gradient-step sweep and end-to-end training speed against plain SB3, in one run.

    The end-to-end run of sb3-snake train uses the settings of .env and the flags given; the
    sweep tries every combination itself. Results go to
    benchmark_results/benchmark_results_full_<UTC>.json.
    """
    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.benchmark.full import BenchmarkPlan, format_report, run_benchmark, write_benchmark_choice
    from sb3_snake.training.options import load_config

    env_file, batch_size = options.pop("env_file"), options.pop("batch_size")
    target_env = env_file or Path(".env")
    with user_errors():
        settings = load_settings(env_file, options)
        given = from_flags(TrainConfig, {"batch_size": batch_size})
        config = load_config(
            env_file, algo="dqn", **given
        )  # the end-to-end run (SnakeDQN), its batch as train reads it
        sweep = _sweep_changes(device, quick, batch_sizes, combinations)
        changes = {"repeats": repeats, "end_to_end": end_to_end, **sweep}
        mode = resolve_mode(wandb_mode.value) if wandb else "disabled"
        check_writable_dir(output, what="--output folder", create=True)
        if write_env:
            check_env_file_writable(target_env)
    plan = BenchmarkPlan.quick(**changes) if quick else BenchmarkPlan(**changes)

    typer.echo(
        f"Gradient sweep: {len(plan.combinations)} combinations x {len(plan.batch_sizes)} batch sizes on "
        f"{plan.device}, {plan.repeats} repeats each" + ("; then end-to-end training speed" if end_to_end else "")
    )
    with torch_threads(threads_for(settings, plan.device)):
        report = run_benchmark(plan, settings, progress=typer.echo, config=config)
    typer.echo(format_report(report))
    path = save_results("benchmark_results_full", report, output)
    typer.echo(f"Saved {path}")

    if write_env:
        with user_errors():
            written = write_benchmark_choice(report, target_env, path.name)
        typer.echo(written)
    if wandb:
        _log_to_wandb(report, path, wandb_project, mode)


def _sweep_changes(device: Device, quick: bool, batch_sizes: str | None, combinations: str | None) -> dict[str, object]:
    """The gradient sweep's device, batch sizes and combinations from ``benchmark``'s options; by
    default the plan's combinations that run on the device."""
    from sb3_snake.benchmark import gradient_step
    from sb3_snake.benchmark.full import BenchmarkPlan

    changes: dict[str, object] = {"device": resolve_device(device.value).type}
    if batch_sizes is not None:
        changes["batch_sizes"] = tuple(_parse_int_list(batch_sizes, "--batch-sizes"))
    if combinations is not None:
        changes["combinations"] = _parse_combinations(combinations)
    else:
        base = (BenchmarkPlan.quick() if quick else BenchmarkPlan()).combinations
        changes["combinations"] = gradient_step.combination_names(changes["device"], base)
    return changes


def _log_to_wandb(report: dict[str, Any], path: Path, project: str, mode: str) -> None:
    """Log ``benchmark``'s ``report``, saved at ``path``, to a W&B run named after the file."""
    from sb3_snake.benchmark.full import log_to_wandb
    from sb3_snake.training.tracking import WandbRun

    config = {key: report[key] for key in ("system", "plan", "settings")}
    tracking = WandbRun(project, mode, config, Path("runs") / path.stem, name=path.stem, notify=typer.echo)
    log_to_wandb(report, tracking)
    typer.echo(f"W&B: {tracking.mode}")
