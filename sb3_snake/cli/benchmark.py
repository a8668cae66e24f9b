"""The benchmark commands: ``benchmark-env``, ``benchmark-grad``, ``benchmark-replay``,
``benchmark-learning`` and the full ``benchmark``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sb3_snake.acceleration.settings import OptimizationSettings, check_env_file_writable
from sb3_snake.benchmark.env_throughput import DEFAULT_NUM_ENVS
from sb3_snake.benchmark.gradient_step import DEFAULT_BATCH_SIZES
from sb3_snake.benchmark.results import RESULTS_DIR, save_results, utc_stamp
from sb3_snake.cli.common import app, interrupt_on_signals, signal_exit_code, user_errors
from sb3_snake.cli.options import (
    ONLINE,
    OPTIMIZATIONS,
    Device,
    EnvFileOption,
    WandbMode,
    from_flags,
    load_settings,
    parameters,
    settings_parameters,
    with_parameters,
)
from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import parse
from sb3_snake.common.paths import check_writable_dir, claim_new_path
from sb3_snake.common.system import check_device, cpu_cores, resolve_device
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.tracking import resolve_mode

if TYPE_CHECKING:
    from sb3_snake.benchmark.learning import LearningPlan


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
OutputOption = Annotated[Path, typer.Option(help="Folder for the JSON results.")]


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


def _research(text: str, *names: str, **limits: Any) -> Any:
    """An option of benchmark-learning's research loop, shown in a --help panel of its own."""
    return typer.Option(*names, help=text, rich_help_panel="Research loop", **limits)


EnvStepsOption = Annotated[int | None, _research("Train each run this many env steps instead of --minutes.", min=1)]
EveryStepsOption = Annotated[int | None, _research("Env steps between checkpoints (default: a tenth).", min=1)]
ParallelOption = Annotated[int, _research("Runs at once, each in its own process with one torch thread.", min=1)]
RunThreadsOption = Annotated[
    int | None, _research("torch threads of every run (default: 1 with --parallel, else each system's).", min=1)
]
CompareOption = Annotated[
    Path | None,
    _research("Compare seed by seed sb3-snake's defaults (or --hyperparams), arm A, with this file's, arm B."),
]
FinalEpisodesOption = Annotated[
    int | None,
    _research("Greedy games of a final evaluation of the last checkpoint (200 with --env-steps or --compare).", min=0),
]


BaselineOption = Annotated[
    bool | None,
    typer.Option(
        "--baseline/--no-baseline", help='Also train plain SB3 DQN("MlpPolicy") the same way (not with --compare).'
    ),
]
PpoOption = Annotated[
    bool | None,
    typer.Option("--ppo/--no-ppo", help="Also train SB3's PPO, attention extractor, batched env (not with --compare)."),
]
PqnOption = Annotated[
    bool,
    typer.Option("--pqn", help="Also train sb3-snake's PQN on train's game, 128 games (not with --compare)."),
]


@app.command("benchmark-learning")
def benchmark_learning(
    minutes: Annotated[float | None, typer.Option(help="Wall-clock budget of each run (default 15; quick: 2).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per system (0, 1, ...).")] = 3,
    first_seed: Annotated[
        int, typer.Option(min=0, help="The first seed (so several machines or sessions can split the seeds).")
    ] = 0,
    every: Annotated[
        float | None, typer.Option(help="Seconds between checkpoints, not counted (default 15; quick: 10).")
    ] = None,
    episodes: Annotated[int, typer.Option(min=1, help="Greedy games per checkpoint evaluation.")] = 100,
    quick: Annotated[bool, typer.Option("--quick", help="2-minute runs, a checkpoint every 10 s.")] = False,
    baseline: BaselineOption = None,
    ppo: PpoOption = None,
    pqn: PqnOption = False,
    cold_cache: Annotated[
        bool,
        typer.Option(
            "--cold-cache/--warm-cache", help="Empty compile and auto-settings caches per run, or the user's."
        ),
    ] = True,
    hyperparams: Annotated[
        Path | None,
        typer.Option(
            help="Train sb3-snake with this hyperparameter file (as train --hyperparams); its board_size is all boards."
        ),
    ] = None,
    env_steps: EnvStepsOption = None,
    every_steps: EveryStepsOption = None,
    parallel: ParallelOption = 1,
    threads: RunThreadsOption = None,
    compare: CompareOption = None,
    final_episodes: FinalEpisodesOption = None,
    env_file: EnvFileOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Greedy score against wall-clock minutes (or env steps): sb3-snake train against plain SB3
    DQN, SB3's PPO (and with --pqn its PQN), or two sb3-snake settings against each other, per seed.

    Each run trains in a fresh process for the budget (imports and compilation counted),
    saving a checkpoint every few seconds (or env steps) off the clock; every checkpoint then
    plays greedy games. Writes learning_<UTC>.json and .png into --output; checkpoints go under
    runs/benchmark-learning/. A run that fails is named and left out, the others kept, and
    the command exits 1.
    """
    from sb3_snake.benchmark.learning import SYSTEMS, LearningPlan, seed_range
    from sb3_snake.training.hyperparameters import read_hyperparameters

    # Plain SB3 and PPO train unless turned off, PQN when asked; a comparison trains sb3-snake alone.
    wanted = (True, baseline, ppo, pqn) if compare else (True, baseline is not False, ppo is not False, pqn)
    with user_errors():
        load_settings(env_file, {})  # a bad .env is reported now, not by the first run's process
        changes: dict[str, Any] = {
            "seeds": seed_range(first_seed, seeds),
            "episodes": episodes,
            "systems": tuple(system for system, on in zip(SYSTEMS, wanted, strict=True) if on),
            "cold_cache": cold_cache,
            "env_file": str(env_file) if env_file else None,
            "hyperparameters": read_hyperparameters(hyperparams) if hyperparams else {},
            "compare": read_hyperparameters(compare) if compare else None,
            "parallel": parallel,
        }
        given = {"minutes": minutes, "every_seconds": every, "env_steps": env_steps, "every_env_steps": every_steps}
        given |= {"threads": threads, "final_episodes": final_episodes}
        changes.update({key: value for key, value in given.items() if value is not None})
        plan = LearningPlan.quick(**changes) if quick else LearningPlan(**changes)
        check_writable_dir(output, what="--output folder", create=True)
        runs_folder = Path("runs") / "benchmark-learning"
        check_writable_dir(runs_folder, what="runs folder", create=True)
        work_dir = claim_new_path(runs_folder, utc_stamp(), folder=True)
    _run_learning(plan, work_dir, output)


def _run_learning(plan: LearningPlan, work_dir: Path, output: Path) -> None:
    """Run ``benchmark-learning``'s ``plan`` in ``work_dir``, print its summary and save its JSON and
    picture into ``output``; exit 1 when a run failed, with the signal's code when stopped."""
    from sb3_snake.benchmark.learning import format_summary, plot_learning_benchmark, run_learning_benchmark

    runs = len(plan.run_order())
    what = "arms A and B" if plan.compare is not None else ", ".join(plan.systems)
    at_once = f", {plan.parallel} at once" if plan.parallel > 1 else ""
    typer.echo(
        f"{runs} runs of {plan.budget_text}, {plan.checkpoints_text} ({what}; seeds {list(plan.seeds)}{at_once})"
    )
    with interrupt_on_signals() as received:
        try:
            report = run_learning_benchmark(plan, work_dir, progress=typer.echo)
        except KeyboardInterrupt:
            typer.echo(f"stopped: no results written; the runs so far are in {work_dir}", err=True)
            raise typer.Exit(signal_exit_code(received)) from None
    failed = report.get("failed_runs", [])
    if not report["runs"]:
        typer.echo(f"error: every run failed, no results written; the first: {failed[0]['error']}", err=True)
        raise typer.Exit(1)
    typer.echo(format_summary(report))
    path = save_results("learning", report, output)
    picture = plot_learning_benchmark(report, path.with_suffix(".png"))
    typer.echo(f"Saved {path} and {picture}")
    if failed:
        typer.echo(f"error: {len(failed)} of {runs} runs failed (listed above and in the JSON's failed_runs)", err=True)
        raise typer.Exit(1)


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
        config = load_config(env_file, **given)  # the end-to-end run's batch size, as sb3-snake train reads it
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
