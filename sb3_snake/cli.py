"""The ``sb3-snake`` command line: parses options, builds settings, calls library functions."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import torch
import typer

from sb3_snake.benchmark import gradient_step
from sb3_snake.benchmark.env_throughput import DEFAULT_NUM_ENVS, format_table, run_env_benchmark
from sb3_snake.benchmark.system import RESULTS_DIR, save_results
from sb3_snake.settings import OptimizationSettings, SettingsError
from sb3_snake.tracking import WANDB_MODES

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


DEFAULT_EPISODES = 1000
OPTIMIZATIONS = "Optimizations (override .env)"
ENVIRONMENT = "Environment"
DQN = "DQN hyperparameters"
RUN = "Run, checkpoints and logging"


# Optimization overrides shared by the commands that train (flags win over .env).
BatchSizeOption = Annotated[
    int | None,
    typer.Option(help="Replay samples per gradient step (default: OPTIMAL_BATCH_SIZE).", rich_help_panel=OPTIMIZATIONS),
]
CompileOption = Annotated[
    bool | None,
    typer.Option(
        "--compile/--no-compile",
        help="torch.compile the Q-networks.",
        rich_help_panel=OPTIMIZATIONS,
        show_default=False,
    ),
]
FlashAttentionOption = Annotated[
    bool | None,
    typer.Option(
        "--flash-attention/--no-flash-attention",
        help="Restrict SDPA to the FlashAttention kernel.",
        rich_help_panel=OPTIMIZATIONS,
        show_default=False,
    ),
]
Bf16Option = Annotated[
    bool | None,
    typer.Option(
        "--bf16/--no-bf16",
        help="bfloat16 autocast in forward passes.",
        rich_help_panel=OPTIMIZATIONS,
        show_default=False,
    ),
]
EnvFileOption = Annotated[
    Path | None,
    typer.Option(help="The .env to read (default: ./.env when present).", rich_help_panel=OPTIMIZATIONS),
]


def _fail(message: str) -> typer.Exit:
    """Print one clear line to stderr and return the exit (code 2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _parse_combinations(text: str) -> tuple[str, ...]:
    """Comma-separated optimization combinations of the gradient benchmark; unknown ones exit 2."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in gradient_step.COMBINATIONS]
    if unknown or not names:
        raise _fail(
            f"--combinations: unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(gradient_step.COMBINATIONS)}"
        )
    return names


def _load_settings(env_file: Path | None, **overrides: object) -> OptimizationSettings:
    try:
        return OptimizationSettings.load(env_file, **overrides)
    except SettingsError as error:
        raise _fail(str(error)) from None


@app.command()
def train(
    episodes: Annotated[
        int | None,
        typer.Option(
            help="Stop once this many episodes (all envs together) finished (default: 1000 when no other limit).",
            rich_help_panel=RUN,
        ),
    ] = None,
    timesteps: Annotated[
        int | None, typer.Option(help="Stop after this many env steps (all envs together).", rich_help_panel=RUN)
    ] = None,
    time_limit: Annotated[
        float | None, typer.Option(help="Stop after this many minutes of training.", rich_help_panel=RUN)
    ] = None,
    batch_size: BatchSizeOption = None,
    compile: CompileOption = None,
    flash_attention: FlashAttentionOption = None,
    bf16: Bf16Option = None,
    env_file: EnvFileOption = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.", rich_help_panel=ENVIRONMENT)] = "auto",
    n_envs: Annotated[int, typer.Option(min=1, help="Games stepped together.", rich_help_panel=ENVIRONMENT)] = 16,
    board_size: Annotated[int, typer.Option(help="Side of the board (at least 4).", rich_help_panel=ENVIRONMENT)] = 10,
    seed: Annotated[int, typer.Option(help="Seed of envs, networks and exploration.", rich_help_panel=ENVIRONMENT)] = 0,
    learning_rate: Annotated[float, typer.Option(help="Adam step size.", rich_help_panel=DQN)] = 5e-4,
    buffer_size: Annotated[
        int, typer.Option(min=1, help="Replay capacity (transitions).", rich_help_panel=DQN)
    ] = 100_000,
    learning_starts: Annotated[
        int, typer.Option(min=0, help="Env steps before learning.", rich_help_panel=DQN)
    ] = 1_000,
    replay_ratio: Annotated[
        float, typer.Option(min=0.001, help="Gradient samples per env step.", rich_help_panel=DQN)
    ] = 32.0,
    train_freq: Annotated[
        int | None,
        typer.Option(
            min=1, help="Vector-env steps between updates (default: from --replay-ratio).", rich_help_panel=DQN
        ),
    ] = None,
    gradient_steps: Annotated[
        int | None,
        typer.Option(min=1, help="Gradient steps per update (default: from --replay-ratio).", rich_help_panel=DQN),
    ] = None,
    gamma: Annotated[float, typer.Option(min=0.0, max=1.0, help="Discount.", rich_help_panel=DQN)] = 0.99,
    target_update_interval: Annotated[
        int, typer.Option(min=1, help="Env steps between target copies.", rich_help_panel=DQN)
    ] = 1_000,
    exploration_initial_eps: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Epsilon at the start.", rich_help_panel=DQN)
    ] = 1.0,
    exploration_final_eps: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Epsilon after the decay.", rich_help_panel=DQN)
    ] = 0.02,
    exploration_steps: Annotated[
        int, typer.Option(min=1, help="Env steps of linear epsilon decay.", rich_help_panel=DQN)
    ] = 10_000,
    double_dqn: Annotated[
        bool, typer.Option("--double-dqn/--no-double-dqn", help="Double DQN targets.", rich_help_panel=DQN)
    ] = False,
    dueling: Annotated[
        bool, typer.Option("--dueling/--no-dueling", help="Dueling head: Q = V + A - mean(A).", rich_help_panel=DQN)
    ] = False,
    head_view: Annotated[
        bool,
        typer.Option(
            "--head-view/--no-head-view",
            help="Give the attention extractor the board re-centred on the snake's head too.",
            rich_help_panel=DQN,
        ),
    ] = True,
    n_steps: Annotated[int, typer.Option(min=1, help="n-step returns.", rich_help_panel=DQN)] = 1,
    symmetry_augmentation: Annotated[
        bool,
        typer.Option(
            "--symmetry-augmentation/--no-symmetry-augmentation",
            help="Replay each transition under a random one of the board's 8 symmetries.",
            rich_help_panel=DQN,
        ),
    ] = False,
    name: Annotated[str | None, typer.Option(help="Run name: writes into runs/NAME.", rich_help_panel=RUN)] = None,
    output: Annotated[Path | None, typer.Option(help="Run directory (overrides --name).", rich_help_panel=RUN)] = None,
    checkpoint_every: Annotated[
        int | None, typer.Option(min=1, help="Episodes between atomic checkpoints.", rich_help_panel=RUN)
    ] = None,
    save_replay_buffer: Annotated[
        bool, typer.Option(help="Save the replay buffer with checkpoints and model.", rich_help_panel=RUN)
    ] = False,
    select_every: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Env steps between greedy evaluations; the best model is kept as best_model.zip.",
            rich_help_panel=RUN,
        ),
    ] = None,
    select_episodes: Annotated[
        int, typer.Option(min=1, help="Greedy games per --select-every evaluation.", rich_help_panel=RUN)
    ] = 32,
    resume: Annotated[
        Path | None, typer.Option(help="Continue from this checkpoint or model.", rich_help_panel=RUN)
    ] = None,
    wandb: Annotated[
        bool, typer.Option("--wandb/--no-wandb", help="Log to Weights & Biases.", rich_help_panel=RUN)
    ] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project.", rich_help_panel=RUN)] = "sb3-snake",
    wandb_mode: Annotated[
        str, typer.Option(help="online, offline or disabled (WANDB_MODE wins).", rich_help_panel=RUN)
    ] = "online",
    verbose: Annotated[
        int, typer.Option(min=0, max=2, help="1: print SB3's training metrics.", rich_help_panel=RUN)
    ] = 0,
) -> None:
    """Train SnakeDQN with the attention policy until the first of --episodes, --timesteps, --time-limit."""
    from sb3_snake.training import TrainConfig, WandbOptions
    from sb3_snake.training import train as run_training

    if wandb_mode not in WANDB_MODES:
        raise _fail(f"--wandb-mode must be one of {', '.join(WANDB_MODES)}, got {wandb_mode!r}")
    no_limit_given = episodes is None and timesteps is None and time_limit is None
    settings = _load_settings(
        env_file, batch_size=batch_size, use_torch_compile=compile, use_flash_attention=flash_attention, use_bf16=bf16
    )
    try:
        config = TrainConfig(
            episodes=DEFAULT_EPISODES if no_limit_given else episodes,
            timesteps=timesteps,
            time_limit_minutes=time_limit,
            n_envs=n_envs,
            board_size=board_size,
            seed=seed,
            device=device,
            learning_rate=learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            replay_ratio=replay_ratio,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            gamma=gamma,
            target_update_interval=target_update_interval,
            exploration_initial_eps=exploration_initial_eps,
            exploration_final_eps=exploration_final_eps,
            exploration_steps=exploration_steps,
            double_dqn=double_dqn,
            dueling=dueling,
            head_view=head_view,
            n_steps=n_steps,
            symmetry_augmentation=symmetry_augmentation,
            checkpoint_every=checkpoint_every,
            save_replay_buffer=save_replay_buffer,
            select_every=select_every,
            select_episodes=select_episodes,
            verbose=verbose,
        )
    except ValueError as error:
        raise _fail(str(error)) from None
    run_dir = output or Path("runs") / (name or datetime.now().strftime("%Y%m%d-%H%M%S"))
    try:
        summary = run_training(
            config, settings, run_dir, resume=resume, wandb_options=WandbOptions(wandb, wandb_project, wandb_mode)
        )
    except ValueError as error:
        raise _fail(str(error)) from None
    typer.echo(
        f"{summary['episodes']} episodes, {summary['env_steps']:,} env steps in {summary['wall_seconds']:.1f}s "
        f"({summary['env_steps_per_second']:,.0f} steps/s); mean score of the last 100: "
        f"{summary['mean_score_last_100']:.2f}, best {summary['best_score']}"
    )
    if summary["stopped_by"] == "signal":
        typer.echo("stopped by a signal; the model and summary were saved")
    elif summary["stopped_by"] in ("timesteps", "time_limit"):
        typer.echo(f"stopped by the {summary['stopped_by'].replace('_', ' ')}")
    typer.echo(f"saved {run_dir / 'model.zip'} and {run_dir / 'summary.json'}")
    if summary["best_model"] is not None:
        best = summary["best_model"]
        typer.echo(
            f"best greedy evaluation: mean score {best['mean_score']:.2f} at {best['env_steps']:,} env steps, "
            f"saved as {run_dir / 'best_model.zip'}"
        )


def _load_model_or_exit(model: Path, env_file: Path | None):
    from sb3_snake.training import load_model

    settings = _load_settings(env_file)
    try:
        return load_model(model, settings)
    except ValueError as error:
        raise _fail(str(error)) from None


@app.command("eval")
def evaluate_command(
    model: Annotated[Path, typer.Argument(help="A saved model (.zip).")],
    episodes: Annotated[int, typer.Option(help="Greedy games to play.")] = 100,
    seed: Annotated[int, typer.Option(help="Evaluation seed (offset far from training seeds).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    env_file: Annotated[Path | None, typer.Option(help="The .env to read.")] = None,
) -> None:
    """Greedy evaluation on fresh seeds: mean, median and max score, mean length, win rate."""
    from sb3_snake.evaluation import evaluate

    if episodes < 1:
        raise _fail(f"--episodes must be at least 1, got {episodes}")
    result = evaluate(_load_model_or_exit(model, env_file), episodes, seed)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(
            f"{result['episodes']} games on {result['board_size']}x{result['board_size']}: mean score "
            f"{result['mean_score']:.2f}, median {result['median_score']:g}, max {result['max_score']}, "
            f"mean length {result['mean_length']:.1f}, win rate {result['win_rate']:.0%}"
        )


@app.command()
def play(
    model: Annotated[Path, typer.Argument(help="A saved model (.zip).")],
    seed: Annotated[int, typer.Option(help="Game seed.")] = 0,
    fps: Annotated[float, typer.Option(min=0.0, help="Frames per second of the animation.")] = 10.0,
    gif: Annotated[Path | None, typer.Option(help="Record the game to this GIF instead of animating it.")] = None,
    env_file: Annotated[Path | None, typer.Option(help="The .env to read.")] = None,
) -> None:
    """Play one greedy game, animated in the terminal or recorded as a GIF."""
    from sb3_snake.evaluation import play as play_game

    result = play_game(_load_model_or_exit(model, env_file), seed=seed, fps=fps, gif=gif, out=sys.stdout)
    typer.echo(
        f"score {result['score']}, length {result['length']}, {result['steps']} steps"
        + (f"; saved {result['gif']}" if result["gif"] else "")
    )


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by sb3-snake train.")],
    output: Annotated[Path | None, typer.Option(help="PNG to write (default: RUN_DIR/learning_curve.png).")] = None,
    window: Annotated[int, typer.Option(min=1, help="Episodes in the moving average.")] = 100,
) -> None:
    """Draw the learning curve: score per episode and its moving average, against env steps and time."""
    from sb3_snake.plotting import plot_learning_curve

    try:
        path = plot_learning_curve(run_dir, output, window)
    except ValueError as error:
        raise _fail(str(error)) from None
    typer.echo(f"saved {path}")


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
    names = _parse_combinations(combinations)
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


@app.command()
def benchmark(
    batch_sizes: Annotated[
        str | None,
        typer.Option(help="Comma-separated batch sizes of the sweep (default: 256,...,8192; quick: 256,1024)."),
    ] = None,
    combinations: Annotated[
        str | None,
        typer.Option(help="Comma-separated optimization combinations (default: all; quick: those without compile)."),
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per figure (median reported).")] = 3,
    quick: Annotated[bool, typer.Option("--quick", help="A short run: under 2 minutes on a 2-core CPU.")] = False,
    end_to_end: Annotated[
        bool,
        typer.Option("--end-to-end/--no-end-to-end", help="Also time sb3-snake train against plain SB3 DQN."),
    ] = True,
    write_env: Annotated[
        bool, typer.Option("--write-env", help="Write the chosen batch size and flags into the .env file.")
    ] = False,
    batch_size: BatchSizeOption = None,
    compile: CompileOption = None,
    flash_attention: FlashAttentionOption = None,
    bf16: Bf16Option = None,
    env_file: EnvFileOption = None,
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="Log the results to Weights & Biases.")] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project.")] = "sb3-snake",
    wandb_mode: Annotated[str, typer.Option(help="online, offline or disabled (WANDB_MODE wins).")] = "online",
    output: Annotated[Path, typer.Option(help="Folder for the JSON results.")] = RESULTS_DIR,
) -> None:
    """Gradient-step sweep and end-to-end training speed against plain SB3, in one run.

    The end-to-end run of sb3-snake train uses the settings of .env and the flags given; the
    sweep tries every combination itself. Results go to
    benchmark_results/benchmark_results_full_<UTC>.json.
    """
    from sb3_snake.benchmark.full import BenchmarkPlan, format_report, log_to_wandb, run_benchmark
    from sb3_snake.report import resolve_device
    from sb3_snake.settings import write_env_file
    from sb3_snake.tracking import WandbRun

    if wandb_mode not in WANDB_MODES:
        raise _fail(f"--wandb-mode must be one of {', '.join(WANDB_MODES)}, got {wandb_mode!r}")
    if device not in ("auto", "cpu", "cuda"):
        raise _fail(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise _fail("--device cuda was requested but no CUDA GPU is available; use --device cpu or auto")
    changes: dict[str, object] = {"repeats": repeats, "end_to_end": end_to_end}
    changes["device"] = resolve_device(device).type
    if batch_sizes is not None:
        changes["batch_sizes"] = tuple(_parse_int_list(batch_sizes, "--batch-sizes"))
    if combinations is not None:
        changes["combinations"] = _parse_combinations(combinations)
    plan = BenchmarkPlan.quick(**changes) if quick else BenchmarkPlan(**changes)
    target_env = env_file or Path(".env")
    settings = _load_settings(
        env_file, batch_size=batch_size, use_torch_compile=compile, use_flash_attention=flash_attention, use_bf16=bf16
    )

    typer.echo(
        f"Gradient sweep: {len(plan.combinations)} combinations x {len(plan.batch_sizes)} batch sizes on "
        f"{plan.device}, {plan.repeats} repeats each" + ("; then end-to-end training speed" if end_to_end else "")
    )
    report = run_benchmark(plan, settings, progress=typer.echo)
    typer.echo(format_report(report))
    path = save_results("benchmark_results_full", report, output)
    typer.echo(f"Saved {path}")

    if write_env:
        best = report["best"]
        write_env_file(
            target_env,
            note=f"{path.name}: {best['combination']} at batch {best['batch_size']}",
            batch_size=best["batch_size"],
            use_bf16=best["use_bf16"],
            use_flash_attention=best["use_flash_attention"],
            use_torch_compile=best["use_torch_compile"],
        )
        typer.echo(
            f"Wrote OPTIMAL_BATCH_SIZE={best['batch_size']}, USE_BF16, USE_FLASH_ATTENTION and "
            f"USE_TORCH_COMPILE ({best['combination']}) into {target_env}"
        )
    if wandb:
        run_dir = Path("runs") / path.stem
        tracking = WandbRun(
            wandb_project,
            wandb_mode,
            {key: report[key] for key in ("system", "plan", "settings")},
            run_dir,
            name=path.stem,
            notify=typer.echo,
        )
        log_to_wandb(report, tracking)
        typer.echo(f"W&B: {tracking.mode}")


def main() -> None:
    app()
