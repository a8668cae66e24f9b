"""``sb3-snake train``, and the commands that use a trained model: ``eval``, ``play``, ``plot``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sb3_snake.cli.common import app, fail, in_flags, signal_exit_code, stop_on_signals, user_errors
from sb3_snake.cli.options import (
    ONLINE,
    EnvFileOption,
    TrustModelOption,
    WandbMode,
    from_flags,
    load_settings,
    parameters,
    settings_parameters,
    with_parameters,
)
from sb3_snake.common.paths import check_writable_file
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.roles import RUN
from sb3_snake.training.tracking import resolve_mode

# ---------------------------------------------------------------------- train


@app.command()
@with_parameters(parameters(TrainConfig), settings_parameters())
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
    """Train PQN (the default) or SnakeDQN (--algo dqn) until the first of --episodes, --timesteps, --time-limit."""
    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.common.errors import TrainingDiverged
    from sb3_snake.training.callbacks import RunCancelled, StopRequest
    from sb3_snake.training.options import configure_run
    from sb3_snake.training.run import train as run_training
    from sb3_snake.training.tracking import WandbOptions

    env_file = options.pop("env_file")
    with user_errors():
        settings = load_settings(env_file, options)
        given = from_flags(TrainConfig, options)
        config, settings = configure_run(given, settings, hyperparams, resume, trust_model, env_file)
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
        raise fail(in_flags(error)) from None
    except (KeyboardInterrupt, RunCancelled):
        where = {"preparing": "before training started; nothing was saved"}.get(
            stop.phase, "; files saved before it are intact and no partial file was left"
        )
        typer.echo(f"aborted {where}".replace("aborted ;", "aborted;"), err=True)
        raise typer.Exit(signal_exit_code(received)) from None
    report_training(summary)
    if summary["stopped_by"] == "stop":
        raise typer.Exit(signal_exit_code(received))


def report_training(summary: dict[str, Any]) -> None:
    from sb3_snake.training.evaluation import describe_evaluation

    typer.echo(
        f"{summary['episodes']} episodes, {summary['env_steps']:,} env steps in {summary['wall_seconds']:.1f}s "
        f"({summary['env_steps_per_second']:,.0f} steps/s); exploring games from standard starts, "
        f"mean of the last 100: {summary['mean_score_last_100']:.2f}, best {summary['best_score']}"
    )
    if summary["last_evaluation"] is not None:
        typer.echo(f"last {describe_evaluation(summary['last_evaluation'])}")
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
    from sb3_snake.envs.render import check_fps
    from sb3_snake.training.evaluation import check_evaluation
    from sb3_snake.training.evaluation import play as play_game

    with user_errors():
        check_evaluation(1, seed)
        check_fps(fps)
        if gif is not None:
            check_writable_file(gif, (".gif",), what="--gif")
    loaded = _load_for_acting(model, env_file, trust_model)
    with user_errors():
        result = play_game(loaded, seed=seed, fps=fps, gif=gif, out=sys.stdout)
    typer.echo(
        f"score {result['score']}, length {result['length']}, {result['steps']} steps"
        + (f"; saved {result['gif']}" if result["gif"] else "")
    )


@app.command()
def plot(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="A run folder written by sb3-snake train; or benchmark-learning JSON files, each FILE or "
            "LABEL=PATTERN (a glob whose files draw as one arm, LABEL), drawn together.",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(help="PNG to write (default: RUN_DIR/learning_curve.png; needed for benchmark-learning files)."),
    ] = None,
    window: Annotated[int, typer.Option(min=1, help="Episodes in the moving average of a run folder's plot.")] = 100,
) -> None:
    """Draw the learning curve: score per episode and its moving average, against env steps and time.

    Given benchmark-learning JSON files instead, draws their runs' greedy scores together, one
    colour per arm (a system, A or B, or the LABEL of LABEL=PATTERN), against wall-clock minutes
    and env steps: seeds split over sessions or machines, or arms run in pairs, in one picture.
    """
    from sb3_snake.common.errors import UsageError

    with user_errors():
        # .json files or LABEL=PATTERN (os.path: a name too long is no folder, not an error)
        if any(path.endswith(".json") or ("=" in path and not os.path.isdir(path)) for path in paths):
            from sb3_snake.benchmark.learning import plot_reports, report_files

            if output is None:
                raise UsageError("give --output, the PNG to draw the benchmark-learning files into")
            picture = plot_reports(report_files(paths), output)
        elif len(paths) > 1:
            raise UsageError(f"plot draws one run folder, got {len(paths)}; or give benchmark-learning JSON files")
        else:
            from sb3_snake.training.plotting import plot_learning_curve

            picture = plot_learning_curve(Path(paths[0]), output, window)
    typer.echo(f"saved {picture}")
