"""``benchmark-learning``: greedy score against minutes or env steps, per seed, for sb3-snake
against plain SB3 (DQN, PPO), or for two sb3-snake settings against each other."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sb3_snake.benchmark.results import RESULTS_DIR, save_results, utc_stamp
from sb3_snake.cli.common import app, interrupt_on_signals, signal_exit_code, user_errors
from sb3_snake.cli.options import EnvFileOption, OutputOption, load_settings
from sb3_snake.common.paths import check_writable_dir, claim_new_path

if TYPE_CHECKING:
    from sb3_snake.benchmark.learning import LearningPlan


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
