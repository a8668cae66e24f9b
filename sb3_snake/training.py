"""A training run, top to bottom: settings, env, model, callbacks, learn, save, summary.

:func:`train` is what ``sb3-snake train`` calls; a Python user gets the same run with
``train(TrainConfig(...), OptimizationSettings.load(), run_dir)``.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.logger import HumanOutputFormat, Logger

from sb3_snake.algorithm import SnakeDQN
from sb3_snake.benchmark.system import system_info
from sb3_snake.callbacks import (
    BestModelSelection,
    EpisodeBudget,
    EpisodeCheckpoint,
    EpisodeMetrics,
    EpisodeRecord,
    ProgressReport,
    replay_buffer_path,
    save_atomically,
)
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.envs.rules import SnakeRules
from sb3_snake.optimizations import cpu_has_native_bf16
from sb3_snake.report import resolve_device, summary_lines
from sb3_snake.settings import OptimizationSettings
from sb3_snake.tracking import WandbOutput, WandbRun

#: Upper bound on env steps of a run that stops by episodes, so ``learn`` always has a total.
MAX_TIMESTEPS = 10**12


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of a run. Defaults make ``sb3-snake train --episodes 1000`` a short,
    visibly learning run on a 2-core CPU."""

    episodes: int | None = 1000  #: stop once this many episodes (all envs together) finished
    timesteps: int | None = None  #: stop after this many env steps (all envs together)
    time_limit_minutes: float | None = None  #: stop after this much wall time
    n_envs: int = 16  #: games stepped together
    board_size: int = 10  #: side of the board
    seed: int = 0  #: seeds the envs, the networks and exploration
    device: str = "auto"  #: auto, cpu or cuda
    learning_rate: float = 5e-4  #: Adam step size
    buffer_size: int = 100_000  #: replay buffer capacity in transitions
    learning_starts: int = 1_000  #: env steps of random play before learning
    replay_ratio: float = 32.0  #: gradient samples per env step (SB3's DQN default is 8: 32 per 4 steps)
    train_freq: int | None = None  #: vector-env steps between updates (None: from replay_ratio)
    gradient_steps: int | None = None  #: gradient steps per update (None: from replay_ratio)
    gamma: float = 0.99  #: discount
    target_update_interval: int = 1_000  #: env steps between target network copies
    exploration_initial_eps: float = 1.0  #: epsilon at the start
    exploration_final_eps: float = 0.02  #: epsilon at the end of the decay
    exploration_steps: int = 10_000  #: env steps over which epsilon decays linearly
    double_dqn: bool = False  #: Double DQN targets (online net picks, target net values)
    dueling: bool = False  #: dueling head: Q = V + A - mean(A)
    head_view: bool = True  #: the extractor also sees the board re-centred on the head (extractor.HeadView)
    n_steps: int = 1  #: n-step returns (SB3's NStepReplayBuffer)
    symmetry_augmentation: bool = False  #: replay each transition under a random board symmetry
    checkpoint_every: int | None = None  #: finished episodes between checkpoints (None: none)
    select_every: int | None = None  #: env steps between greedy evaluations that keep best_model.zip
    select_episodes: int = 32  #: greedy games per such evaluation
    save_replay_buffer: bool = False  #: save the replay buffer beside checkpoints and the model
    verbose: int = 0  #: 1 prints SB3's training metrics

    def __post_init__(self) -> None:
        if self.episodes is not None and self.episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {self.episodes}")
        if self.timesteps is not None and self.timesteps < 1:
            raise ValueError(f"timesteps must be at least 1, got {self.timesteps}")
        if self.time_limit_minutes is not None and self.time_limit_minutes <= 0:
            raise ValueError(f"time limit must be positive, got {self.time_limit_minutes} minutes")
        if self.episodes is None and self.timesteps is None and self.time_limit_minutes is None:
            raise ValueError("give at least one of episodes, timesteps or a time limit")
        if self.n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, got {self.n_envs}")
        SnakeRules(self.board_size)  # raises a ValueError naming a bad board size
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda was requested but no CUDA GPU is available; use --device cpu or auto")
        if self.n_steps < 1:
            raise ValueError(f"n_steps must be at least 1, got {self.n_steps}")
        if self.replay_ratio <= 0:
            raise ValueError(f"replay_ratio must be positive, got {self.replay_ratio}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {self.checkpoint_every}")
        if self.select_every is not None and self.select_every < 1:
            raise ValueError(f"select_every must be at least 1, got {self.select_every}")
        if self.select_episodes < 1:
            raise ValueError(f"select_episodes must be at least 1, got {self.select_episodes}")

    def update_schedule(self, batch_size: int) -> tuple[int, int]:
        """``(train_freq, gradient_steps)``: given ones win, else the pair that meets ``replay_ratio``.

        One update of ``gradient_steps`` batches every ``train_freq`` vector steps samples
        ``batch_size * gradient_steps / (train_freq * n_envs)`` per env step.
        """
        steps_per_update = batch_size / (self.replay_ratio * self.n_envs)
        train_freq = self.train_freq or max(1, round(steps_per_update))
        gradient_steps = self.gradient_steps or max(1, round(self.replay_ratio * self.n_envs * train_freq / batch_size))
        return train_freq, gradient_steps

    def dqn_kwargs(self, batch_size: int) -> dict[str, Any]:
        """The arguments of :class:`SnakeDQN` this config sets, for a given batch size."""
        names = (
            "learning_rate",
            "buffer_size",
            "learning_starts",
            "gamma",
            "target_update_interval",
            "exploration_initial_eps",
            "exploration_final_eps",
            "exploration_steps",
            "double_dqn",
            "n_steps",
            "symmetry_augmentation",
            "seed",
            "verbose",
        )
        train_freq, gradient_steps = self.update_schedule(batch_size)
        return {
            **{name: getattr(self, name) for name in names},
            "train_freq": train_freq,
            "gradient_steps": gradient_steps,
            "batch_size": batch_size,
            "policy_kwargs": {
                "dueling": self.dueling,
                **({} if self.head_view else {"features_extractor_kwargs": {"head_view_dim": 0}}),
            },
        }


@dataclass(frozen=True)
class WandbOptions:
    enabled: bool = False
    project: str = "sb3-snake"
    mode: str = "online"


@contextmanager
def stop_on_signals(budget: EpisodeBudget) -> Iterator[None]:
    """SIGINT and SIGTERM ask the run to stop after the current step instead of killing it."""

    def request_stop(signum: int, frame: Any) -> None:
        budget.stop_requested = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def build_model(config: TrainConfig, settings: OptimizationSettings, resume: Path | None = None) -> SnakeDQN:
    """The env and model of a run (a new one, or one resumed from a checkpoint)."""
    device = resolve_device(config.device)
    env = BatchedSnakeVecEnv(config.n_envs, board_size=config.board_size, device="cpu", seed=config.seed)
    if resume is not None:
        return load_for_resume(resume, env, settings, device)
    return SnakeDQN(
        "AttentionPolicy", env, optimizations=settings, device=device, **config.dqn_kwargs(settings.batch_size)
    )


def train(
    config: TrainConfig,
    settings: OptimizationSettings,
    run_dir: Path,
    resume: Path | None = None,
    wandb_options: WandbOptions = WandbOptions(),
    console: Console | None = None,
) -> dict[str, Any]:
    """Train until the first limit of ``config`` (episodes, env steps, wall time) or a signal.

    Writes ``model.zip``, ``summary.json`` and ``episodes.json`` into ``run_dir`` (and
    ``checkpoint.zip`` every ``config.checkpoint_every`` episodes, ``best_model.zip`` when
    ``config.select_every`` is set) and returns the summary.
    """
    console = console or Console()
    run_dir.mkdir(parents=True, exist_ok=True)
    model = build_model(config, settings, resume)

    active = model.active_optimizations
    for line in summary_lines(
        active, {"envs": config.n_envs, "board size": f"{config.board_size}x{config.board_size}"}
    ):
        console.print(line, highlight=False)

    hyperparameters = {
        **asdict(config),
        "policy": "AttentionPolicy",
        "batch_size": model.batch_size,
        "train_freq": model.train_freq.frequency,
        "gradient_steps": model.gradient_steps,
    }
    tracking = WandbRun(
        wandb_options.project,
        wandb_options.mode if wandb_options.enabled else "disabled",
        {"hyperparameters": hyperparameters, "optimizations": active.as_dict(), "capabilities": capabilities()},
        run_dir,
        name=run_dir.name,
        notify=lambda text: console.print(text, highlight=False),
    )
    outputs = [HumanOutputFormat(console.file)] if config.verbose else []
    if tracking.active:
        outputs.append(WandbOutput(tracking))
    model.set_logger(Logger(folder=None, output_formats=outputs))

    record = EpisodeRecord()
    start = time.perf_counter()
    steps_before = model.num_timesteps
    max_seconds = config.time_limit_minutes * 60 if config.time_limit_minutes is not None else None
    budget = EpisodeBudget(config.episodes, record, start, config.timesteps, max_seconds)
    callbacks = [budget, ProgressReport(budget, console), EpisodeMetrics(budget, tracking.log)]
    if config.checkpoint_every:
        callbacks.append(EpisodeCheckpoint(budget, run_dir, config.checkpoint_every, config.save_replay_buffer))
    selection = None
    if config.select_every:
        selection = BestModelSelection(run_dir, config.select_every, config.select_episodes, tracking.log)
        callbacks.append(selection)
    with stop_on_signals(budget):
        model.learn(
            MAX_TIMESTEPS,
            callback=CallbackList(callbacks),
            reset_num_timesteps=resume is None,
            log_interval=max(1, config.n_envs),
        )
    wall_seconds = time.perf_counter() - start

    save_atomically(model, run_dir / "model.zip", config.save_replay_buffer)
    env_steps = model.num_timesteps - steps_before
    summary = {
        "episodes": len(record),
        "target_episodes": config.episodes,
        "stopped_by": budget.stopped_by,
        "env_steps": env_steps,
        "total_env_steps": model.num_timesteps,
        "wall_seconds": wall_seconds,
        "env_steps_per_second": env_steps / wall_seconds if wall_seconds > 0 else 0.0,
        "mean_score_last_100": record.mean_score_last(100),
        "best_score": record.best_score,
        "mean_episode_steps_last_100": sum(record.lengths[-100:]) / max(1, len(record.lengths[-100:])),
        "hyperparameters": hyperparameters,
        "optimizations": {
            name: {"value": value, "source": settings.source(name)} for name, value in settings.as_dict().items()
        },
        "active": active.as_dict(),
        "best_model": selection.best if selection else None,
        "selection_history": selection.history if selection else None,
        "resumed_from": str(resume) if resume else None,
        "wandb_mode": tracking.mode,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (run_dir / "episodes.json").write_text(json.dumps(asdict(record)) + "\n")
    tracking.finish({key: value for key, value in summary.items() if isinstance(value, (int, float, str))})
    return summary


def capabilities() -> dict[str, Any]:
    """Facts about the machine that decide which optimizations can be active."""
    return {
        **system_info(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cuda_bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    }


def load_for_resume(
    path: Path, env: BatchedSnakeVecEnv, settings: OptimizationSettings, device: torch.device
) -> SnakeDQN:
    """Load a checkpoint to continue training on ``env``, with its replay buffer when saved."""
    model = load_model(path, settings, device)
    if model.observation_space.shape != env.observation_space.shape:
        trained = model.observation_space.shape[-1]
        raise ValueError(
            f"resume file {path} was trained on a {trained}x{trained} board, not "
            f"{env.observation_space.shape[-1]}x{env.observation_space.shape[-1]}; "
            f"pass --board-size {trained}"
        )
    model.set_env(env)
    buffer = replay_buffer_path(path)
    if buffer.is_file():
        model.load_replay_buffer(buffer)
    return model


def load_model(path: Path, settings: OptimizationSettings, device: torch.device | str = "auto") -> SnakeDQN:
    """Load a saved SnakeDQN, turning a missing or unreadable file into one clear ValueError."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"model file {path} does not exist")
    try:
        return SnakeDQN.load(path, device=device, optimizations=settings)
    except Exception as error:  # noqa: BLE001 - any failure to read the zip is a bad model file
        raise ValueError(f"model file {path} cannot be loaded ({type(error).__name__}: {error})") from error
