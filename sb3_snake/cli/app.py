"""The ``sb3-snake`` command line: parses options, builds settings, calls library functions.

Each option is declared once: ``train``'s options are made from :class:`~sb3_snake.training.run.TrainConfig`'s
fields (name, help, group, default) and the optimization flags from the settings' keys
(:meth:`OptimizationSettings.flag <sb3_snake.acceleration.settings.OptimizationSettings.flag>`). An option
left out is ``None`` and falls through to the config's default, to ``.env``, or, on
``--resume``, to what the model trained with.

Every user error, from Click's parser or from the library, is one line on stderr
(``error: ...``) and exit code 2 (:func:`fail`). The process state belongs here: the CLI sets
torch's thread count for the command (``torch_threads``) and turns SIGINT/SIGTERM into a
:class:`~sb3_snake.training.callbacks.StopRequest`.
"""

from __future__ import annotations

import inspect
import json
import math
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import click
import typer
from typer.core import TyperGroup

from sb3_snake.acceleration.settings import COMPILE_MODES, SDPA_BACKENDS, OptimizationSettings, check_env_file_writable
from sb3_snake.benchmark.env_throughput import DEFAULT_NUM_ENVS
from sb3_snake.benchmark.gradient_step import DEFAULT_BATCH_SIZES
from sb3_snake.benchmark.results import RESULTS_DIR, save_results, utc_stamp
from sb3_snake.common.paths import check_writable_dir, check_writable_file, claim_new_path
from sb3_snake.common.system import check_device, cpu_cores, resolve_device
from sb3_snake.training.tracking import WANDB_MODES, resolve_mode

#: Click's exception classes: recent Typer vendors its own Click (``typer._click``), older
#: Typer uses the ``click`` package; both raise usage errors as ``ClickException``.
_CLICK_ERRORS = tuple({click.ClickException, *(getattr(typer, "TyperException", click.ClickException),)})
_ABORTS = tuple({click.exceptions.Abort, typer.Abort})


class OneLineErrors(TyperGroup):
    """Click's usage errors (bad choice, bad number, unknown option) as one line, exit 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except _ABORTS:
            if not standalone_mode:
                raise
            sys.exit(1)
        except _CLICK_ERRORS as error:
            if not standalone_mode:
                raise
            if type(error).__name__ == "NoArgsIsHelpError":  # help shown for a bare command
                error.show()
                sys.exit(0)
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            message = message.replace("Value error, ", "")
            typer.echo(f"error: {' '.join(message.split())}", err=True)
            sys.exit(2)
        if standalone_mode:
            sys.exit(result if isinstance(result, int) else 0)
        return result


app = typer.Typer(
    name="sb3-snake",
    help="Train, evaluate and benchmark Stable-Baselines3 agents on Snake.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineErrors,
)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


WandbMode = Enum("WandbMode", {mode: mode for mode in WANDB_MODES}, type=str)
ONLINE = WandbMode("online")
CompileMode = Enum("CompileMode", {mode: mode for mode in COMPILE_MODES}, type=str)
SdpaBackend = Enum("SdpaBackend", {backend: backend for backend in SDPA_BACKENDS}, type=str)

OPTIMIZATIONS = "Optimizations (override .env)"


def fail(message: str) -> typer.Exit:
    """The one way a command reports a user error: one line on stderr; raise the returned exit (2)."""
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code=2)


@contextmanager
def user_errors() -> Iterator[None]:
    """The library's ValueErrors (SettingsError is one) become :func:`fail`."""
    try:
        yield
    except ValueError as error:
        raise fail(str(error)) from None


# ---------------------------------------------------------------------- options, declared once


def _keyword(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _optional(base: Any, decls: list[str], help: str, panel: str, default_text: str | None) -> Any:
    shown = default_text if default_text is not None else False
    return Annotated[base | None, typer.Option(*decls, help=help, rich_help_panel=panel, show_default=shown)]


def _switch(flag: str) -> list[str]:
    return [flag] if "/" in flag else [f"{flag}/--no-{flag[2:]}"]


def config_parameters() -> list[inspect.Parameter]:
    """One option per TrainConfig field: its flag, help, group and shown default."""
    from sb3_snake.training.run import TrainConfig, option_flag

    hints = get_type_hints(TrainConfig)
    parameters = []
    for config_field in fields(TrainConfig):
        hint = hints[config_field.name]
        base = next((arg for arg in getattr(hint, "__args__", (hint,)) if arg is not type(None)), hint)
        flag = option_flag(config_field.name)
        base = {"device": Device, "tensorboard_log": Path}.get(config_field.name, base)
        decls = _switch(flag) if base is bool else [flag]
        default = config_field.default
        shown = None if default is None or base is bool else str(default)
        meta = config_field.metadata
        parameters.append(_keyword(config_field.name, _optional(base, decls, meta["help"], meta["group"], shown)))
    return parameters


def settings_parameters() -> list[inspect.Parameter]:
    """One option per optimization setting, with the flag the settings declare, and ``--env-file``."""
    types = {"batch_size": str, "compile_mode": CompileMode, "sdpa_backend": SdpaBackend, "num_threads": str}
    parameters = []
    for name in OptimizationSettings.__dataclass_fields__:
        if name == "sources":
            continue
        flag, help = OptimizationSettings.flag(name), OptimizationSettings.help(name)
        base = types.get(name, bool)
        decls = _switch(flag) if base is bool else [flag]
        parameters.append(_keyword(name, _optional(base, decls, help, OPTIMIZATIONS, None)))
    env_file = Annotated[
        Path | None,
        typer.Option(help="The .env to read (default: ./.env when present).", rich_help_panel=OPTIMIZATIONS),
    ]
    return [*parameters, _keyword("env_file", env_file)]


def with_parameters(*groups: list[inspect.Parameter]) -> Callable[[Callable], Callable]:
    """Give a ``def command(**options)`` the signature Typer reads its options from."""

    def decorate(command: Callable) -> Callable:
        own = list(inspect.signature(command).parameters.values())[:-1]  # all but **options
        command.__signature__ = inspect.Signature([*own, *(p for group in groups for p in group)])
        return command

    return decorate


def load_settings(env_file: Path | None, options: dict[str, Any]) -> OptimizationSettings:
    """Settings from the command's optimization options (popped from ``options``) over .env."""
    overrides = {name: options.pop(name, None) for name in list(OptimizationSettings.__dataclass_fields__)}
    overrides.pop("sources")
    for name in ("compile_mode", "sdpa_backend"):
        if isinstance(overrides.get(name), Enum):
            overrides[name] = overrides[name].value
    for name in ("num_threads", "batch_size"):
        if overrides.get(name) is not None:
            overrides[name] = OptimizationSettings.parse(name, overrides[name])
    return OptimizationSettings.load(env_file, **overrides)


# ---------------------------------------------------------------------- signals


@contextmanager
def stop_on_signals(stop: Any) -> Iterator[list[int]]:
    """SIGINT/SIGTERM: the first asks the run to stop after this step and save; a second, or
    one before training started, aborts at once (KeyboardInterrupt). Yields the signals seen."""
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        first = not stop.requested
        stop.request(signal.Signals(signum).name)
        if stop.phase in ("preparing", "finished") or not first:
            raise KeyboardInterrupt
        doing = "stopping after this step, saving..." if stop.phase == "training" else "saving..."
        typer.echo(f"{doing} (Ctrl-C again to abort)", err=True)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def signal_exit_code(received: list[int]) -> int:
    """128 + the signal's number, as shells report it: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (received[-1] if received else signal.SIGINT)


# ---------------------------------------------------------------------- train


RUN = "Run, checkpoints and logging"


@app.command()
@with_parameters(config_parameters(), settings_parameters())
def train(
    name: Annotated[str | None, typer.Option(help="Run name: writes into runs/NAME.", rich_help_panel=RUN)] = None,
    output: Annotated[Path | None, typer.Option(help="Run folder (overrides --name).", rich_help_panel=RUN)] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the run already in that folder.", rich_help_panel=RUN)
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue from this checkpoint or model; options given change it.", rich_help_panel=RUN),
    ] = None,
    trust_model: Annotated[
        bool,
        typer.Option(
            "--trust-model", help="Load --resume with SB3's full loader (runs pickled code).", rich_help_panel=RUN
        ),
    ] = False,
    wandb: Annotated[
        bool, typer.Option("--wandb/--no-wandb", help="Log to Weights & Biases.", rich_help_panel=RUN)
    ] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project.", rich_help_panel=RUN)] = "sb3-snake",
    wandb_mode: Annotated[WandbMode, typer.Option(help="W&B mode (WANDB_MODE wins).", rich_help_panel=RUN)] = ONLINE,
    hyperparams: Annotated[
        Path | None,
        typer.Option(
            help="Hyperparameters from a file (JSON or YAML, as tune writes); flags win.", rich_help_panel=RUN
        ),
    ] = None,
    **options: Any,
) -> None:
    """Train SnakeDQN with the attention policy until the first of --episodes, --timesteps, --time-limit."""
    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.training.run import (
        RunCancelled,
        StopRequest,
        TrainConfig,
        TrainingDiverged,
        WandbOptions,
        read_hyperparameters,
        resume_config,
        split_hyperparameters,
    )
    from sb3_snake.training.run import train as run_training

    env_file = options.pop("env_file")
    with user_errors():
        batch_size_flag = options.get("batch_size")
        settings = load_settings(env_file, options)
        given = {key: value.value if isinstance(value, Enum) else value for key, value in options.items()}
        given = {
            key: str(value) if isinstance(value, Path) else value for key, value in given.items() if value is not None
        }
        if hyperparams is not None:
            from_file, file_settings = split_hyperparameters(read_hyperparameters(hyperparams))
            given = {**from_file, **given}
            if "batch_size" in file_settings and batch_size_flag is None:
                sources = {**settings.sources, "batch_size": "hyperparams file"}
                settings = replace(settings, batch_size=file_settings["batch_size"], sources=sources)
        if resume is not None:
            config = resume_config(resume, trust_model, **given)
        else:
            config = TrainConfig(**given)
        check_tensorboard(config.tensorboard_log)
        wandb_options = WandbOptions(wandb, wandb_project, resolve_mode(wandb_mode.value) if wandb else "disabled")
        threads = threads_for(settings, config.device)
    run_dir = output or (Path("runs") / name if name else None)
    stop = StopRequest()
    try:
        with stop_on_signals(stop) as received, torch_threads(threads), user_errors():
            summary = run_training(
                config,
                settings,
                run_dir,
                resume=resume,
                trust_model=trust_model,
                overwrite=overwrite,
                wandb_options=wandb_options,
                stop=stop,
            )
    except TrainingDiverged as error:
        raise fail(str(error)) from None
    except (KeyboardInterrupt, RunCancelled):
        where = {"preparing": "before training started; nothing was saved"}.get(
            stop.phase, "; files saved before it are intact and no partial file was left"
        )
        typer.echo(f"aborted {where}".replace("aborted ;", "aborted;"), err=True)
        raise typer.Exit(signal_exit_code(received)) from None
    report_training(summary)
    if summary["stopped_by"] == "stop":
        raise typer.Exit(signal_exit_code(received))


def check_tensorboard(folder: str | None) -> None:
    """``--tensorboard-log`` needs TensorBoard installed and a writable folder."""
    if folder is None:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise ValueError('--tensorboard-log needs TensorBoard: pip install "sb3-snake[tensorboard]"') from None
    check_writable_dir(Path(folder), what="--tensorboard-log folder", create=True)


def report_training(summary: dict[str, Any]) -> None:
    typer.echo(
        f"{summary['episodes']} episodes, {summary['env_steps']:,} env steps in {summary['wall_seconds']:.1f}s "
        f"({summary['env_steps_per_second']:,.0f} steps/s); mean score of the last 100: "
        f"{summary['mean_score_last_100']:.2f}, best {summary['best_score']}"
    )
    run_dir = Path(summary["run_dir"])
    if summary["stopped_by"] == "stop":
        typer.echo(f"stopped by {summary['stop_reason']}; the model and summary were saved")
    elif summary["stopped_by"] in ("timesteps", "time_limit"):
        typer.echo(f"stopped by the {summary['stopped_by'].replace('_', ' ')}")
    typer.echo(f"saved {run_dir / 'model.zip'} and {run_dir / 'summary.json'}")
    if summary["best_model"] is not None:
        best = summary["best_model"]
        typer.echo(
            f"best greedy evaluation: mean score {best['mean_score']:.2f} at {best['env_steps']:,} env steps, "
            f"saved as {run_dir / 'best_model.zip'}"
        )


# ---------------------------------------------------------------------- eval, play, plot

TrustModelOption = Annotated[
    bool, typer.Option("--trust-model", help="Use SB3's full loader, which runs pickled code: trusted files only.")
]
EnvFileOption = Annotated[Path | None, typer.Option(help="The .env to read (default: ./.env when present).")]


def _load_for_acting(model: Path, env_file: Path | None, trusted: bool) -> Any:
    from sb3_snake.persistence import load_model

    with user_errors():
        return load_model(model, load_settings(env_file, {}), trusted=trusted)


@app.command("eval")
def evaluate_command(
    model: Annotated[Path, typer.Argument(help="A saved model (.zip).")],
    episodes: Annotated[int, typer.Option(help="Greedy games to play.")] = 100,
    seed: Annotated[int, typer.Option(help="Evaluation seed (offset far from training seeds).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    env_file: EnvFileOption = None,
    trust_model: TrustModelOption = False,
) -> None:
    """Greedy evaluation on fresh seeds: mean, median and max score, mean length, win rate, and how
    the games ended (walled in, died with a way out, truncated, won)."""
    from sb3_snake.training.evaluation import check_evaluation, evaluate

    with user_errors():
        check_evaluation(episodes, seed)
    loaded = _load_for_acting(model, env_file, trust_model)
    result = evaluate(loaded, episodes, seed)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(
            f"{result['episodes']} games on {result['board_size']}x{result['board_size']}: mean score "
            f"{result['mean_score']:.2f}, median {result['median_score']:g}, max {result['max_score']}, "
            f"mean length {result['mean_length']:.1f}, win rate {result['win_rate']:.0%}"
        )
        ends = result["ends"]
        typer.echo(
            f"ends: {ends['walled_in']} walled in, {ends['died_with_a_way_out']} died with a way out, "
            f"{ends['truncated']} truncated, {ends['won']} won"
        )


@app.command()
def play(
    model: Annotated[Path, typer.Argument(help="A saved model (.zip).")],
    seed: Annotated[int, typer.Option(help="Game seed.")] = 0,
    fps: Annotated[float, typer.Option(help="Frames per second of the animation.")] = 10.0,
    gif: Annotated[Path | None, typer.Option(help="Record the game to this GIF instead of animating it.")] = None,
    env_file: EnvFileOption = None,
    trust_model: TrustModelOption = False,
) -> None:
    """Play one greedy game, animated in the terminal or recorded as a GIF."""
    from sb3_snake.training.evaluation import check_evaluation
    from sb3_snake.training.evaluation import play as play_game

    with user_errors():
        check_evaluation(1, seed)
        if not (math.isfinite(fps) and fps >= 0):
            raise ValueError(f"--fps must be a finite number >= 0, got {fps}")
        if gif is not None:
            check_writable_file(gif, (".gif",), what="--gif")
    loaded = _load_for_acting(model, env_file, trust_model)
    result = play_game(loaded, seed=seed, fps=fps, gif=gif, out=sys.stdout)
    typer.echo(
        f"score {result['score']}, length {result['length']}, {result['steps']} steps"
        + (f"; saved {result['gif']}" if result["gif"] else "")
    )


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by sb3-snake train.")],
    output: Annotated[Path | None, typer.Option(help="PNG to write (default: RUN_DIR/learning_curve.png).")] = None,
    window: Annotated[int, typer.Option(min=1, help="Episodes in the moving average.")] = 100,
) -> None:
    """Draw the learning curve: score per episode and its moving average, against env steps and time."""
    from sb3_snake.training.plotting import plot_learning_curve

    with user_errors():
        if output is not None:
            check_writable_file(output, (".png",), what="plot output")
        path = plot_learning_curve(run_dir, output, window)
    typer.echo(f"saved {path}")


# ---------------------------------------------------------------------- benchmarks


def _parse_int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ValueError(f"{option}: expected comma-separated positive integers such as 64,4096, got {text!r}")
    return values


def _parse_combinations(text: str) -> tuple[str, ...]:
    """Comma-separated optimization combinations of the gradient benchmark."""
    from sb3_snake.benchmark import gradient_step

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    known = gradient_step.combination_names("cuda")
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(
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
    value = OptimizationSettings.parse("num_threads", threads)
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
    baseline: Annotated[
        bool, typer.Option("--baseline/--no-baseline", help='Also train plain SB3 DQN("MlpPolicy") the same way.')
    ] = True,
    cold_cache: Annotated[
        bool,
        typer.Option(
            "--cold-cache/--warm-cache", help="Empty compile and auto-settings caches per run, or the user's."
        ),
    ] = True,
    hyperparams: Annotated[
        Path | None, typer.Option(help="Train sb3-snake with this hyperparameter file (as train --hyperparams).")
    ] = None,
    env_file: EnvFileOption = None,
    output: OutputOption = RESULTS_DIR,
) -> None:
    """Greedy score against wall-clock minutes: sb3-snake train against plain SB3 DQN, per seed.

    Each run trains in a fresh process for the budget (imports and compilation counted),
    saving a checkpoint every few seconds off the clock; every checkpoint then plays greedy
    games. Writes learning_<UTC>.json and .png into --output; checkpoints go under
    runs/benchmark-learning/.
    """
    from sb3_snake.benchmark.learning import (
        SYSTEMS,
        LearningPlan,
        format_summary,
        plot_learning_benchmark,
        run_learning_benchmark,
    )
    from sb3_snake.training.run import read_hyperparameters

    with user_errors():
        load_settings(env_file, {})  # a bad .env is reported now, not by the first run's process
        changes: dict[str, Any] = {
            "seeds": tuple(range(first_seed, first_seed + seeds)),
            "episodes": episodes,
            "systems": SYSTEMS if baseline else ("sb3_snake",),
            "cold_cache": cold_cache,
            "env_file": str(env_file) if env_file else None,
            "hyperparameters": read_hyperparameters(hyperparams) if hyperparams else {},
        }
        given = {"minutes": minutes, "every_seconds": every}
        changes.update({key: value for key, value in given.items() if value is not None})
        plan = LearningPlan.quick(**changes) if quick else LearningPlan(**changes)
        check_writable_dir(output, what="--output folder", create=True)
        runs_folder = Path("runs") / "benchmark-learning"
        check_writable_dir(runs_folder, what="runs folder", create=True)
        work_dir = claim_new_path(runs_folder, utc_stamp(), folder=True)
    runs = len(plan.seeds) * len(plan.systems)
    typer.echo(f"{runs} runs of {plan.minutes:g} min ({', '.join(plan.systems)}; seeds {list(plan.seeds)})")
    report = run_learning_benchmark(plan, work_dir, progress=typer.echo)
    typer.echo(format_summary(report))
    path = save_results("learning", report, output)
    picture = plot_learning_benchmark(report, path.with_suffix(".png"))
    typer.echo(f"Saved {path} and {picture}")


@app.command()
@with_parameters(settings_parameters())
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
    quick: Annotated[bool, typer.Option("--quick", help="A short run: under 2 minutes on a 2-core CPU.")] = False,
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
    from sb3_snake.acceleration.settings import write_env_file
    from sb3_snake.benchmark import gradient_step
    from sb3_snake.benchmark.full import BenchmarkPlan, format_report, log_to_wandb, run_benchmark
    from sb3_snake.training.tracking import WandbRun

    env_file = options.pop("env_file")
    target_env = env_file or Path(".env")
    with user_errors():
        settings = load_settings(env_file, options)
        changes: dict[str, object] = {"repeats": repeats, "end_to_end": end_to_end}
        changes["device"] = resolve_device(device.value).type
        if batch_sizes is not None:
            changes["batch_sizes"] = tuple(_parse_int_list(batch_sizes, "--batch-sizes"))
        if combinations is not None:
            changes["combinations"] = _parse_combinations(combinations)
        else:
            base = (BenchmarkPlan.quick() if quick else BenchmarkPlan()).combinations
            changes["combinations"] = gradient_step.combination_names(changes["device"], base)
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
        report = run_benchmark(plan, settings, progress=typer.echo)
    typer.echo(format_report(report))
    path = save_results("benchmark_results_full", report, output)
    typer.echo(f"Saved {path}")

    if write_env:
        best = report["best"]
        with user_errors():
            write_env_file(
                target_env,
                note=f"{path.name}: {best['combination']} at batch {best['batch_size']}",
                batch_size=best["batch_size"],
                use_bf16=best["use_bf16"],
                use_flash_attention=best["use_flash_attention"],
                use_torch_compile=best["use_torch_compile"],
                use_cuda_graph=best["use_cuda_graph"],
            )
        typer.echo(
            f"Wrote OPTIMAL_BATCH_SIZE={best['batch_size']}, USE_BF16, USE_FLASH_ATTENTION, "
            f"USE_TORCH_COMPILE and USE_CUDA_GRAPH ({best['combination']}) into {target_env}"
        )
    if wandb:
        config = {key: report[key] for key in ("system", "plan", "settings")}
        tracking = WandbRun(wandb_project, mode, config, Path("runs") / path.stem, name=path.stem, notify=typer.echo)
        log_to_wandb(report, tracking)
        typer.echo(f"W&B: {tracking.mode}")


# ---------------------------------------------------------------------- tune

TUNE = "Search"
TRIAL = "One trial"
Sampler = Enum("Sampler", {name: name for name in ("tpe", "random")}, type=str)
Pruner = Enum("Pruner", {name: name for name in ("median", "halving", "none")}, type=str)
TPE, MEDIAN = Sampler("tpe"), Pruner("median")


@app.command()
@with_parameters(settings_parameters())
def tune(
    n_trials: Annotated[int, typer.Option(help="Trials this worker runs.", rich_help_panel=TUNE)] = 20,
    max_total_trials: Annotated[
        int | None, typer.Option(help="Trials of all workers together, at most.", rich_help_panel=TUNE)
    ] = None,
    n_jobs: Annotated[int, typer.Option(help="Trials this worker runs at once.", rich_help_panel=TUNE)] = 1,
    sampler: Annotated[Sampler, typer.Option(help="Optuna sampler.", rich_help_panel=TUNE)] = TPE,
    pruner: Annotated[Pruner, typer.Option(help="Optuna pruner.", rich_help_panel=TUNE)] = MEDIAN,
    n_startup_trials: Annotated[
        int, typer.Option(help="Random, unpruned trials before TPE and pruning start.", rich_help_panel=TUNE)
    ] = 5,
    storage: Annotated[
        str | None,
        typer.Option(
            help="A journal file (.log) or a database URL (default: runs/tune/STUDY/journal.log).",
            rich_help_panel=TUNE,
        ),
    ] = None,
    study_name: Annotated[str, typer.Option(help="The study's name in its storage.", rich_help_panel=TUNE)] = "snake",
    report: Annotated[
        bool,
        typer.Option("--report", help="Run no trial: print the best and write the files again.", rich_help_panel=TUNE),
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler.", rich_help_panel=TUNE)] = None,
    n_evaluations: Annotated[
        int, typer.Option(help="Greedy evaluations per trial, reported to the pruner.", rich_help_panel=TRIAL)
    ] = 4,
    eval_episodes: Annotated[int, typer.Option(help="Greedy games per evaluation.", rich_help_panel=TRIAL)] = 16,
    timesteps: Annotated[int | None, typer.Option(help="Env steps per trial.", rich_help_panel=TRIAL)] = None,
    time_limit: Annotated[
        float | None, typer.Option(help="Minutes per trial (default 2 without --timesteps).", rich_help_panel=TRIAL)
    ] = None,
    board_size: Annotated[int, typer.Option(help="Side of the board.", rich_help_panel=TRIAL)] = 10,
    n_envs: Annotated[int, typer.Option(help="Games stepped together.", rich_help_panel=TRIAL)] = 16,
    **options: Any,
) -> None:
    """Hyperparameter search on Optuna: one machine by default, many with the same --storage URL."""
    from optuna import logging as optuna_logging

    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.training.run import TrainConfig
    from sb3_snake.training.tuning import TuneConfig, best_line, load_study, write_report
    from sb3_snake.training.tuning import tune as run_tune

    env_file = options.pop("env_file")
    with user_errors():
        settings = load_settings(env_file, options)
        if timesteps is None and time_limit is None:
            time_limit = 2.0
        trial = TrainConfig(
            episodes=None, timesteps=timesteps, time_limit_minutes=time_limit, board_size=board_size, n_envs=n_envs
        )
        config = TuneConfig(
            study_name=study_name,
            storage=storage,
            n_trials=n_trials,
            max_total_trials=max_total_trials,
            n_jobs=n_jobs,
            sampler=sampler.value,
            pruner=pruner.value,
            n_startup_trials=n_startup_trials,
            n_evaluations=n_evaluations,
            eval_episodes=eval_episodes,
            trial=trial,
            seed=seed,
        )
        if report:
            study = load_study(config, create=False)
        else:
            check_writable_dir(config.folder, what="study folder", create=True)
    if not report:
        optuna_logging.set_verbosity(optuna_logging.WARNING)  # this command prints one line per trial itself
        try:
            with torch_threads(threads_for(settings, "auto")), user_errors():
                study = run_tune(config, settings, notify=typer.echo)
        except KeyboardInterrupt:
            typer.echo("stopped: the running trial was marked failed; run the same command to continue", err=True)
            raise typer.Exit(130) from None
    typer.echo(best_line(study))
    for path in write_report(study, config.folder):
        typer.echo(f"wrote {path}")


def main() -> None:
    app()
