"""``sb3-snake tune``: a hyperparameter search on Optuna."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sb3_snake.cli.common import app, interrupt_on_signals, signal_exit_code, user_errors
from sb3_snake.cli.options import OPTIMIZATIONS, load_settings, parameters, settings_parameters, with_parameters
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.roles import ALGORITHMS, DEFAULT_LEARNER
from sb3_snake.training.tuning.space import DEFAULT_TRIAL_MINUTES, PRUNERS, SAMPLERS, TuneConfig

if TYPE_CHECKING:
    import optuna

    from sb3_snake.acceleration.settings import OptimizationSettings

TUNE = "Search"
TRIAL = "One trial"
Sampler = Enum("Sampler", {name: name for name in SAMPLERS}, type=str)
Pruner = Enum("Pruner", {name: name for name in PRUNERS}, type=str)
Algo = Enum("Algo", {name: name for name in ALGORITHMS}, type=str)
#: The library's defaults, which the options show and pass on.
SEARCH, RUN = TuneConfig(), TrainConfig()
DEFAULT_ALGO = Algo(DEFAULT_LEARNER)
DEFAULT_SAMPLER, DEFAULT_PRUNER = Sampler(SEARCH.sampler), Pruner(SEARCH.pruner)


@app.command()
@with_parameters(
    settings_parameters(),
    parameters(
        TrainConfig,
        ["batch_size"],
        panel=OPTIMIZATIONS,
        help="Not for tune: every trial draws its own batch size from the search space.",
        show_defaults=False,
    ),
)
def tune(
    n_trials: Annotated[int, typer.Option(help="Trials this worker runs.", rich_help_panel=TUNE)] = SEARCH.n_trials,
    max_total_trials: Annotated[
        int | None, typer.Option(help="Trials of all workers together, at most.", rich_help_panel=TUNE)
    ] = None,
    n_jobs: Annotated[int, typer.Option(help="Trials this worker runs at once.", rich_help_panel=TUNE)] = SEARCH.n_jobs,
    sampler: Annotated[Sampler, typer.Option(help="Optuna sampler.", rich_help_panel=TUNE)] = DEFAULT_SAMPLER,
    pruner: Annotated[Pruner, typer.Option(help="Optuna pruner.", rich_help_panel=TUNE)] = DEFAULT_PRUNER,
    n_startup_trials: Annotated[
        int, typer.Option(help="Random, unpruned trials before TPE and pruning start.", rich_help_panel=TUNE)
    ] = SEARCH.n_startup_trials,
    storage: Annotated[
        str | None,
        typer.Option(
            help="A journal file (.log) or a database URL (default: runs/tune/STUDY/journal.log).",
            rich_help_panel=TUNE,
        ),
    ] = None,
    study_name: Annotated[
        str, typer.Option(help="The study's name in its storage.", rich_help_panel=TUNE)
    ] = SEARCH.study_name,
    report: Annotated[
        bool,
        typer.Option("--report", help="Run no trial: print the best and write the files again.", rich_help_panel=TUNE),
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler.", rich_help_panel=TUNE)] = None,
    n_evaluations: Annotated[
        int, typer.Option(help="Greedy evaluations per trial, reported to the pruner.", rich_help_panel=TRIAL)
    ] = SEARCH.n_evaluations,
    eval_episodes: Annotated[
        int, typer.Option(help="Greedy games per evaluation.", rich_help_panel=TRIAL)
    ] = SEARCH.eval_episodes,
    timesteps: Annotated[int | None, typer.Option(help="Env steps per trial.", rich_help_panel=TRIAL)] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            help=f"Minutes per trial (default {DEFAULT_TRIAL_MINUTES:g} without --timesteps).", rich_help_panel=TRIAL
        ),
    ] = None,
    algo: Annotated[Algo, typer.Option(help="The learner trials train.", rich_help_panel=TRIAL)] = DEFAULT_ALGO,
    board_size: Annotated[int, typer.Option(help="Side of the board.", rich_help_panel=TRIAL)] = RUN.board_size,
    n_envs: Annotated[
        int | None, typer.Option(help="Games stepped together (default: the learner's).", rich_help_panel=TRIAL)
    ] = None,
    **options: Any,
) -> None:
    """Hyperparameter search on Optuna: one machine by default, many with the same --storage URL."""
    from sb3_snake.training.tuning import best_line, load_study, trial_config, write_report

    env_file, batch_size = options.pop("env_file"), options.pop("batch_size")
    with user_errors():
        _reject_batch_size(batch_size)
        settings = load_settings(env_file, options)
        games = {"n_envs": n_envs} if n_envs is not None else {}
        trial = trial_config(timesteps, time_limit, algo=algo.value, board_size=board_size, **games)
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
        study = _run_trials(config, settings)
    typer.echo(best_line(study))
    for path in write_report(study, config.folder):
        typer.echo(f"wrote {path}")


def _reject_batch_size(batch_size: str | None) -> None:
    if batch_size is not None:
        raise UsageError(
            "--batch-size does not apply to tune: every trial draws its own batch size from the search space; "
            "leave it out (train --hyperparams runs the best trial's)"
        )


def _run_trials(config: TuneConfig, settings: OptimizationSettings) -> optuna.Study:
    """Run this worker's trials of ``config``'s study; a signal stops them and exits with its code."""
    from optuna import logging as optuna_logging

    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.training.tuning import tune as run_tune

    optuna_logging.set_verbosity(optuna_logging.WARNING)  # this command prints one line per trial itself
    with interrupt_on_signals() as received:
        try:
            with torch_threads(threads_for(settings, "auto")), user_errors():
                return run_tune(config, settings, notify=typer.echo)
        except KeyboardInterrupt:
            typer.echo("stopped: the running trial was marked failed; run the same command to continue", err=True)
            raise typer.Exit(signal_exit_code(received)) from None
