"""A training run, top to bottom: run folder, model, logging, callbacks, learn, save, summary.

:func:`train` is what ``sb3-snake train`` calls; a Python user gets the same run with
``train(TrainConfig(...), OptimizationSettings.load())``. :class:`TrainConfig` declares every
option once (value, one-line help, group), and the CLI builds its options from it.

Resuming: :func:`resume_config` gives the config a saved model trained with, changed by what
the caller asks; :func:`train` applies the whole config to the loaded model (what cannot change,
such as the board or the network's shape, is refused), and the summary records what the model
really trained with, read back from the model.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger, TensorBoardOutputFormat
from stable_baselines3.common.utils import get_latest_run_id

from sb3_snake.acceleration.autotune import batch_candidates, resolve_auto
from sb3_snake.acceleration.report import summary_lines
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.acceleration.threads import AdaptiveThreads
from sb3_snake.common.system import available_memory_bytes, capabilities, check_device, resolve_device
from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.save_format import MAX_BOARD_SIZE
from sb3_snake.dqn.snake_dqn import SnakeDQN, TrainingDiverged
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.envs.rules import SnakeRules, board_space, has_countdown
from sb3_snake.persistence import (
    legacy_replay_buffer_path,
    load_model,
    load_replay_buffer,
    replay_buffer_path,
    save_model,
    saved_metadata,
    write_json,
)
from sb3_snake.training.callbacks import (
    BestModelSelection,
    EpisodeBudget,
    EpisodeCheckpoint,
    EpisodeMetrics,
    EpisodeRecord,
    ProgressReport,
    RunCancelled,
    StopRequest,
)
from sb3_snake.training.evaluation import MAX_SEED
from sb3_snake.training.run_directory import claim_run_directory
from sb3_snake.training.tracking import WandbOutput, WandbRun, resolve_mode

#: Upper bound on env steps of a run that stops by episodes, so ``learn`` always has a total.
MAX_TIMESTEPS = 10**12
#: Episodes of a run given no limit at all.
DEFAULT_EPISODES = 1000
#: Share of the available memory a run may plan to use.
MEMORY_HEADROOM = 0.9
#: The extractor's sizes a run sets (TrainConfig fields of the same name).
EXTRACTOR_SIZES = ("embed_dim", "num_layers", "head_view_dim")
#: What the extractor builds for a keyword that a saved model's ``policy_kwargs`` leave out.
EXTRACTOR_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(SnakeAttentionExtractor).parameters.items()
    if parameter.default is not parameter.empty
}

RUN, ENVIRONMENT, DQN = "Run, checkpoints and logging", "Environment", "DQN hyperparameters"


def option(default: Any, help: str, group: str, flag: str | None = None) -> Any:
    """A config field with its one-line help and option group (the CLI's ``--help`` panels)."""
    return field(default=default, metadata={"help": help, "group": group, "flag": flag})


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run is asked to do. Defaults make ``sb3-snake train --episodes 1000`` a short,
    visibly learning run on a 2-core CPU. A value that cannot work raises one ValueError."""

    episodes: int | None = option(None, "Stop once this many episodes (all games) finished; 1000 with no limit.", RUN)
    timesteps: int | None = option(None, "Stop after this many env steps (all games together).", RUN)
    time_limit_minutes: float | None = option(None, "Stop after this many minutes of training.", RUN, "--time-limit")
    n_envs: int = option(16, "Games stepped together.", ENVIRONMENT)
    board_size: int = option(10, f"Side of the board (4 to {MAX_BOARD_SIZE}).", ENVIRONMENT)
    seed: int = option(0, "Seed of envs, networks and exploration.", ENVIRONMENT)
    device: str = option("auto", "auto, cpu or cuda.", ENVIRONMENT)
    countdown: bool = option(
        False, "Observe a countdown channel: on each body cell, the moves until it is free.", ENVIRONMENT
    )
    learning_rate: float = option(5e-4, "Adam step size.", DQN)
    learning_rate_half_life: int = option(
        200_000, "Env steps after --early-steps in which the learning rate halves (0: constant).", DQN
    )
    buffer_size: int = option(100_000, "Replay capacity (transitions).", DQN)
    learning_starts: int = option(1_000, "Env steps of random play before learning.", DQN)
    replay_ratio: float = option(32.0, "Gradient samples per env step (SB3's DQN default: 8).", DQN)
    early_replay_ratio: float = option(16.0, "Gradient samples per env step for the first --early-steps.", DQN)
    early_steps: int = option(50_000, "Env steps trained at --early-replay-ratio (0: none).", DQN)
    train_freq: int | None = option(None, "Vector-env steps between updates (default: from --replay-ratio).", DQN)
    gradient_steps: int | None = option(None, "Gradient steps per update (default: from --replay-ratio).", DQN)
    gamma: float = option(0.99, "Discount.", DQN)
    target_update_interval: int = option(1_000, "Env steps between target network copies.", DQN)
    exploration_initial_eps: float = option(1.0, "Epsilon at the start.", DQN)
    exploration_final_eps: float = option(0.02, "Epsilon after the decay.", DQN)
    exploration_steps: int = option(10_000, "Env steps of linear epsilon decay.", DQN)
    double_dqn: bool = option(False, "Double DQN targets (online net picks, target net values).", DQN)
    dueling: bool = option(False, "Dueling head: Q = V + A - mean(A).", DQN)
    head_view: bool = option(True, "The extractor also sees the board re-centred on the snake's head.", DQN)
    head_view_dim: int = option(64, "Features of the head view (with --head-view).", DQN)
    embed_dim: int = option(32, "Width of the extractor's transformer (a multiple of its 2 heads).", DQN)
    num_layers: int = option(0, "Transformer blocks of the extractor (0: token embedding and attention pooling).", DQN)
    n_steps: int = option(1, "n-step returns (SB3's NStepReplayBuffer).", DQN)
    symmetry_augmentation: bool = option(False, "Replay each transition under a random board symmetry.", DQN)
    food_shaping: float = option(
        1.0, "Potential-based reward shaping towards the food, its scale (0: off; scores are unchanged).", DQN
    )
    compile_after: int = option(
        8_000, "With torch.compile on: gradient steps trained eagerly before compiling (0: compile at once).", RUN
    )
    checkpoint_every: int | None = option(None, "Episodes between atomic checkpoints (checkpoint.zip).", RUN)
    select_every: int | None = option(None, "Env steps between greedy evaluations that keep best_model.zip.", RUN)
    select_episodes: int = option(32, "Greedy games per --select-every evaluation.", RUN)
    save_replay_buffer: bool = option(False, "Save the replay buffer beside checkpoints and the model.", RUN)
    tensorboard_log: str | None = option(None, "Folder for SB3's TensorBoard logs (needs the tensorboard extra).", RUN)
    verbose: int = option(0, "1: print SB3's training metrics.", RUN)

    def __post_init__(self) -> None:
        if self.episodes is None and self.timesteps is None and self.time_limit_minutes is None:
            object.__setattr__(self, "episodes", DEFAULT_EPISODES)
        problem = self._first_problem()
        if problem:
            raise ValueError(problem)

    def _first_problem(self) -> str:
        def finite(value: float) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        checks = [
            (self.episodes is None or self.episodes >= 1, f"episodes must be at least 1, got {self.episodes}"),
            (self.timesteps is None or self.timesteps >= 1, f"timesteps must be at least 1, got {self.timesteps}"),
            (
                self.time_limit_minutes is None or (finite(self.time_limit_minutes) and self.time_limit_minutes > 0),
                f"time limit must be a positive number of minutes, got {self.time_limit_minutes}",
            ),
            (self.n_envs >= 1, f"n_envs must be at least 1, got {self.n_envs}"),
            (
                self.board_size <= MAX_BOARD_SIZE,
                f"board_size must be at most {MAX_BOARD_SIZE}, got {self.board_size}",
            ),
            (0 <= self.seed <= MAX_SEED, f"seed must be from 0 to {MAX_SEED}, got {self.seed}"),
            (
                finite(self.learning_rate) and self.learning_rate > 0,
                f"learning_rate must be a positive finite number, got {self.learning_rate}",
            ),
            (
                self.learning_rate_half_life >= 0,
                f"learning_rate_half_life must be at least 0, got {self.learning_rate_half_life}",
            ),
            (self.buffer_size >= 1, f"buffer_size must be at least 1, got {self.buffer_size}"),
            (self.learning_starts >= 0, f"learning_starts must be at least 0, got {self.learning_starts}"),
            (
                finite(self.replay_ratio) and self.replay_ratio > 0,
                f"replay_ratio must be a positive finite number, got {self.replay_ratio}",
            ),
            (
                finite(self.early_replay_ratio) and self.early_replay_ratio > 0,
                f"early_replay_ratio must be a positive finite number, got {self.early_replay_ratio}",
            ),
            (self.early_steps >= 0, f"early_steps must be at least 0, got {self.early_steps}"),
            (self.train_freq is None or self.train_freq >= 1, f"train_freq must be at least 1, got {self.train_freq}"),
            (
                self.gradient_steps is None or self.gradient_steps >= 1,
                f"gradient_steps must be at least 1, got {self.gradient_steps}",
            ),
            (finite(self.gamma) and 0 <= self.gamma <= 1, f"gamma must be from 0 to 1, got {self.gamma}"),
            (
                self.target_update_interval >= 1,
                f"target_update_interval must be at least 1, got {self.target_update_interval}",
            ),
            *[
                (finite(eps) and 0 <= eps <= 1, f"{name} must be from 0 to 1, got {eps}")
                for name, eps in (
                    ("exploration_initial_eps", self.exploration_initial_eps),
                    ("exploration_final_eps", self.exploration_final_eps),
                )
            ],
            (self.exploration_steps >= 1, f"exploration_steps must be at least 1, got {self.exploration_steps}"),
            (self.n_steps >= 1, f"n_steps must be at least 1, got {self.n_steps}"),
            (
                finite(self.food_shaping) and self.food_shaping >= 0,
                f"food_shaping must be a finite number of at least 0, got {self.food_shaping}",
            ),
            (self.compile_after >= 0, f"compile_after must be at least 0, got {self.compile_after}"),
            (self.head_view_dim >= 1, f"head_view_dim must be at least 1, got {self.head_view_dim}"),
            (
                self.embed_dim >= 2 and self.embed_dim % 2 == 0,
                f"embed_dim must be an even number (2 attention heads), got {self.embed_dim}",
            ),
            (self.num_layers >= 0, f"num_layers must be at least 0, got {self.num_layers}"),
            (
                self.checkpoint_every is None or self.checkpoint_every >= 1,
                f"checkpoint_every must be at least 1, got {self.checkpoint_every}",
            ),
            (
                self.select_every is None or self.select_every >= 1,
                f"select_every must be at least 1, got {self.select_every}",
            ),
            (self.select_episodes >= 1, f"select_episodes must be at least 1, got {self.select_episodes}"),
            (0 <= self.verbose <= 2, f"verbose must be 0, 1 or 2, got {self.verbose}"),
        ]
        problem = next((message for ok, message in checks if not ok), "")
        if problem:
            return problem
        SnakeRules(self.board_size, countdown=self.countdown)  # raises a ValueError naming a bad board size
        try:
            check_device(self.device, option="device")
        except ValueError as error:
            return str(error)
        return ""

    def update_schedule(self, batch_size: int) -> tuple[int, int]:
        """``(train_freq, gradient_steps)``: given ones win, else the pair that meets ``replay_ratio``.

        One update of ``gradient_steps`` batches every ``train_freq`` vector steps samples
        ``batch_size * gradient_steps / (train_freq * n_envs)`` per env step.
        """
        steps_per_update = batch_size / (self.replay_ratio * self.n_envs)
        train_freq = self.train_freq or max(1, round(steps_per_update))
        gradient_steps = self.gradient_steps or max(1, round(self.replay_ratio * self.n_envs * train_freq / batch_size))
        return train_freq, gradient_steps

    def schedule_kwargs(self, batch_size: int) -> dict[str, Any]:
        """The update schedule as :class:`SnakeDQN` arguments: ``update_schedule``'s pair, and the
        fraction of it trained before ``early_steps`` (the early replay ratio over the ratio that
        pair really gives, which rounds ``replay_ratio``)."""
        train_freq, gradient_steps = self.update_schedule(batch_size)
        return {
            "batch_size": batch_size,
            "train_freq": train_freq,
            "gradient_steps": gradient_steps,
            "early_steps": self.early_steps,
            "early_update_fraction": self.early_replay_ratio * train_freq * self.n_envs / (batch_size * gradient_steps),
        }

    def check_batch_size(self, batch_size: int) -> None:
        """Raise ValueError unless ``batch_size`` fits this config's replay buffer."""
        if batch_size > self.buffer_size:
            raise ValueError(
                f"batch size {batch_size} is larger than the replay buffer ({self.buffer_size} transitions); "
                "lower --batch-size or raise --buffer-size"
            )

    def network(self) -> dict[str, Any]:
        """What shapes the network and the replay buffer: fixed once a model is built."""
        return {
            "board_size": self.board_size,
            "countdown": self.countdown,
            "dueling": self.dueling,
            "embed_dim": self.embed_dim,
            "num_layers": self.num_layers,
            "head_view_dim": self.head_view_dim if self.head_view else 0,
            "n_steps": self.n_steps,
        }

    def policy_kwargs(self) -> dict[str, Any]:
        network = self.network()
        extractor = {name: network[name] for name in EXTRACTOR_SIZES}
        return {"dueling": self.dueling, "features_extractor_kwargs": extractor}

    def dqn_kwargs(self, batch_size: int) -> dict[str, Any]:
        """The arguments of :class:`SnakeDQN` this config sets, for a given batch size."""
        return {
            **{name: getattr(self, name) for name in _MODEL_FIELDS},
            "seed": self.seed,
            "verbose": self.verbose,
            "compile_after": self.compile_after,
            **self.schedule_kwargs(batch_size),
            "policy_kwargs": self.policy_kwargs(),
        }

    def memory_estimate(self, batch_size: int) -> dict[str, int]:
        """Bytes a run of this config will hold, by part (an estimate, stated before training)."""
        space = board_space(self.board_size, self.countdown)
        channels, cells = space.shape[0], self.board_size**2
        observation = channels * cells
        with torch.device("meta"):
            extractor = SnakeAttentionExtractor(space, **self.policy_kwargs()["features_extractor_kwargs"])
        parameters = sum(parameter.numel() for parameter in extractor.parameters())
        head_view_inputs = channels * (2 * self.board_size - 1) ** 2 if self.head_view else 0
        return {
            "replay buffer": self.buffer_size * (2 * observation + 24),
            "games": self.n_envs * (4 * observation + cells + 128) + 8 * cells * cells,
            # online and target networks, gradients, Adam's two moments
            "networks": 5 * 4 * parameters,
            "one batch": 4 * 4 * batch_size * (head_view_inputs + observation),
        }


#: TrainConfig fields that are SnakeDQN arguments of the same name.
_MODEL_FIELDS = (
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
    "food_shaping",
    "learning_rate_half_life",
)


@dataclass(frozen=True)
class WandbOptions:
    enabled: bool = False
    project: str = "sb3-snake"
    mode: str = "online"


def check_memory(config: TrainConfig, batch_size: int, available: int | None = None) -> None:
    """Raise ValueError, stating what is needed, when the run would not fit in memory."""
    available = available_memory_bytes() if available is None else available
    parts = config.memory_estimate(batch_size)
    needed = sum(parts.values())
    if available is not None and needed > MEMORY_HEADROOM * available:
        detail = ", ".join(f"{name} {size / 2**30:.1f} GiB" for name, size in parts.items())
        raise ValueError(
            f"this run needs about {needed / 2**30:.1f} GiB ({detail}) but {available / 2**30:.1f} GiB are "
            "available; lower --buffer-size, --n-envs or --board-size"
        )


# ---------------------------------------------------------------------- hyperparameter files


#: Keys of a hyperparameter file besides TrainConfig's fields: the settings a search may choose.
SETTING_KEYS = ("batch_size",)
#: TrainConfig fields that are run limits and outputs, not hyperparameters; a file may not set them.
RUN_KEYS = (
    "episodes",
    "timesteps",
    "time_limit_minutes",
    "device",
    "checkpoint_every",
    "select_every",
    "select_episodes",
    "save_replay_buffer",
    "tensorboard_log",
    "verbose",
    "compile_after",
)


def hyperparameter_keys() -> list[str]:
    return [f.name for f in fields(TrainConfig) if f.name not in RUN_KEYS] + list(SETTING_KEYS)


def split_hyperparameters(values: dict[str, Any], origin: str = "hyperparameters") -> tuple[dict, dict]:
    """``(config_values, settings_values)`` of a hyperparameter mapping; an unknown key is one
    ValueError that names the nearest known key."""
    known = hyperparameter_keys()
    for key in values:
        if key not in known:
            nearest = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            hint = f"; did you mean {nearest[0]}?" if nearest else f"; known: {', '.join(known)}"
            raise ValueError(f"{origin}: unknown key {key!r}{hint}")
    try:
        config_values = {key: _field_value(key, value) for key, value in values.items() if key not in SETTING_KEYS}
    except ValueError as error:
        raise ValueError(f"{origin}: {error}") from None
    return config_values, {key: value for key, value in values.items() if key in SETTING_KEYS}


#: How a hyperparameter's type is named when a value does not have it.
_KIND_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string", "None": "null"}


def _field_value(name: str, value: Any) -> Any:
    """``value`` as TrainConfig field ``name`` declares it (a whole float such as ``1e5`` as an
    int; a bool is not a number), else one ValueError saying what it must be."""
    kinds = next(f for f in fields(TrainConfig) if f.name == name).type.split(" | ")
    if isinstance(value, bool):
        fits = "bool" in kinds
    elif isinstance(value, (int, float)):
        if "int" in kinds and float(value).is_integer():
            return int(value)
        fits = "float" in kinds
    else:
        fits = (value is None and "None" in kinds) or (isinstance(value, str) and "str" in kinds)
    if not fits:
        raise ValueError(f"{name} must be {' or '.join(_KIND_NAMES[kind] for kind in kinds)}, got {value!r}")
    return value


def read_hyperparameters(path: Path) -> dict[str, Any]:
    """A hyperparameter file (``.json``, or ``.yaml``/``.yml`` as RL Zoo writes them): one mapping of
    keys from :func:`hyperparameter_keys` to values. Every problem is one ValueError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"hyperparameter file {path} cannot be read ({error})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as error:  # noqa: BLE001 - JSON or YAML syntax, reported in one line
        raise ValueError(
            f"hyperparameter file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {error}"
        ) from None
    if not isinstance(values, dict):
        raise ValueError(f"hyperparameter file {path} must hold one mapping of keys to values")
    split_hyperparameters(values, origin=f"hyperparameter file {path}")
    return values


# ---------------------------------------------------------------------- resume


def resume_config(path: Path, trusted: bool = False, **changes: Any) -> TrainConfig:
    """The config the saved model at ``path`` trained with, with ``changes`` applied.

    Run limits and run options are not part of a model and come from ``changes`` or the
    defaults. The update schedule is kept as the replay ratio, so it follows a new batch size
    or number of games; ``train_freq`` and ``gradient_steps`` are kept as such only where the
    model had them set explicitly (they differ from what its replay ratio gives).
    """
    metadata = saved_metadata(path, trusted)
    saved, policy_kwargs = metadata["hyperparameters"], metadata["policy_kwargs"] or {}
    extractor = trained_extractor(policy_kwargs)
    values = {name: saved[name] for name in _MODEL_FIELDS if name in saved}
    head_view_dim = extractor["head_view_dim"]
    replay_ratio = saved["batch_size"] * saved["gradient_steps"] / (saved["train_freq"] * metadata["n_envs"])
    values.update(
        n_envs=metadata["n_envs"],
        board_size=metadata["observation_shape"][-1],
        countdown=has_countdown(metadata["observation_shape"]),
        dueling=bool(policy_kwargs.get("dueling", False)),
        head_view=head_view_dim != 0,
        head_view_dim=head_view_dim or TrainConfig.head_view_dim,
        embed_dim=extractor["embed_dim"],
        num_layers=extractor["num_layers"],
        seed=saved.get("seed") or 0,
        replay_ratio=replay_ratio,
        early_steps=saved.get("early_steps", 0),
        food_shaping=saved.get("food_shaping", 0.0),  # models saved before shaping trained without it
        early_replay_ratio=saved.get("early_update_fraction", 1.0) * replay_ratio,
        learning_rate_half_life=saved.get("learning_rate_half_life", 0),  # older models trained at one rate
    )
    schedule = (saved["train_freq"], saved["gradient_steps"])
    if TrainConfig(**values).update_schedule(saved["batch_size"]) != schedule:
        values.update(train_freq=schedule[0], gradient_steps=schedule[1])
    return TrainConfig(**{**values, **changes})


def trained_extractor(policy_kwargs: dict[str, Any]) -> dict[str, int]:
    """The extractor sizes a saved model was built with (``embed_dim``, ``num_layers``,
    ``head_view_dim``), taking the extractor's own default for a size its ``policy_kwargs`` leave
    out (``num_layers`` before sb3-snake had the option)."""
    given = policy_kwargs.get("features_extractor_kwargs") or {}
    return {name: given.get(name, EXTRACTOR_DEFAULTS[name]) for name in EXTRACTOR_SIZES}


def apply_config(model: SnakeDQN, config: TrainConfig, batch_size: int) -> None:
    """Make a loaded model train as ``config`` says; refuse what cannot change on resume."""
    trained = {
        "board_size": model.observation_space.shape[-1],
        "countdown": has_countdown(model.observation_space.shape),
        "dueling": bool(model.policy_kwargs.get("dueling", False)),
        **trained_extractor(model.policy_kwargs),
        "n_steps": model.n_steps,
    }
    for name, wanted in config.network().items():
        if wanted != trained[name]:
            flag = option_flag("head_view" if name == "head_view_dim" and 0 in (wanted, trained[name]) else name)
            raise ValueError(
                f"{flag} cannot change on resume: the model was trained with {trained[name]}, this run asks for "
                f"{wanted}; leave {flag} out or start a new run"
            )
    changes = {name: getattr(config, name) for name in _MODEL_FIELDS if name != "n_steps"}
    model.set_hyperparameters(**changes, **config.schedule_kwargs(batch_size), verbose=config.verbose)


def option_flag(name: str) -> str:
    """The command-line spelling of TrainConfig field ``name``."""
    meta = next(f for f in fields(TrainConfig) if f.name == name).metadata
    return meta.get("flag") or "--" + name.replace("_", "-")


# ---------------------------------------------------------------------- the run


def build_model(
    config: TrainConfig, settings: OptimizationSettings, resume: Path | None = None, trusted: bool = False
) -> SnakeDQN:
    """The env and model of a run: a new one, or one resumed from a checkpoint (with its saved
    replay buffer, and the config applied)."""
    device = resolve_device(config.device)
    settings = resolve_settings(config, settings)
    env = BatchedSnakeVecEnv(
        config.n_envs, board_size=config.board_size, device="cpu", seed=config.seed, countdown=config.countdown
    )
    if resume is None:
        kwargs = config.dqn_kwargs(settings.batch_size)
        return SnakeDQN("AttentionPolicy", env, optimizations=settings, device=device, **kwargs)
    model = load_model(resume, settings, trusted=trusted, env=env, device=device, for_training=True)
    apply_config(model, config, settings.batch_size)
    _load_saved_replay_buffer(model, Path(resume), trusted)
    return model


def _load_saved_replay_buffer(model: SnakeDQN, model_path: Path, trusted: bool) -> None:
    buffer, legacy = replay_buffer_path(model_path), legacy_replay_buffer_path(model_path)
    if buffer.is_file():
        load_replay_buffer(model, buffer)
    elif legacy.is_file():
        if not trusted:
            raise ValueError(
                f"{legacy} is a pickled replay buffer, which can run code when loaded; pass --trust-model if you "
                "trust it, or move it away to resume without it"
            )
        try:
            model.load_replay_buffer(legacy)
        except Exception as error:  # noqa: BLE001 - a truncated or foreign pickle
            raise ValueError(f"replay buffer {legacy} cannot be read ({type(error).__name__}: {error})") from None


def resolve_settings(
    config: TrainConfig, settings: OptimizationSettings, console: Console | None = None
) -> OptimizationSettings:
    """``settings`` with each ``auto`` measured on this machine for this run's policy (or read
    from the cache of an earlier measurement): :func:`sb3_snake.acceleration.autotune.resolve_auto`."""
    if not settings.auto_fields:
        return settings
    notify = (lambda line: console.print(line, highlight=False, soft_wrap=True)) if console else (lambda line: None)
    device = resolve_device(config.device)
    return resolve_auto(
        settings,
        device,
        config.policy_kwargs(),
        config.board_size,
        max_batch_size=config.buffer_size,
        countdown=config.countdown,
        progress=notify,
    )


def resumed_settings(settings: OptimizationSettings, resume: Path | None, trusted: bool) -> OptimizationSettings:
    """A resumed run keeps its model's batch size unless ``--batch-size`` says otherwise."""
    if resume is None or settings.source("batch_size") == "override":
        return settings
    metadata = saved_metadata(resume, trusted)
    sources = {**settings.sources, "batch_size": "resumed model"}
    return replace(settings, batch_size=metadata["hyperparameters"]["batch_size"], sources=sources)


def train(
    config: TrainConfig,
    settings: OptimizationSettings,
    run_dir: Path | None = None,
    *,
    resume: Path | None = None,
    trust_model: bool = False,
    overwrite: bool = False,
    wandb_options: WandbOptions = WandbOptions(),
    stop: StopRequest | None = None,
    callbacks: list[BaseCallback] | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Train until the first limit of ``config`` (episodes, env steps, wall time) or ``stop``.

    Writes ``model.zip``, ``summary.json`` and ``episodes.json`` into ``run_dir`` (a new folder
    under ``runs/`` when ``None``), plus ``checkpoint.zip`` every ``config.checkpoint_every``
    episodes and ``best_model.zip`` when ``config.select_every`` is set, and returns the summary.
    A loss that becomes NaN stops the run: the summary is written, ``model.zip`` is not (the
    last checkpoint stays the last good model), and :class:`TrainingDiverged` is raised.
    ``callbacks`` (SB3 callbacks) run after the run's own, as with ``learn(callback=...)``.
    """
    console, stop = console or Console(), stop or StopRequest()
    settings = resumed_settings(settings, resume, trust_model)
    planned_batch = max(batch_candidates(config.buffer_size)) if settings.batch_size == AUTO else settings.batch_size
    config.check_batch_size(planned_batch)  # bad input is refused before anything is measured
    check_memory(config, planned_batch)
    settings = resolve_settings(config, settings, console)
    with claim_run_directory(run_dir, overwrite=overwrite, resuming=resume is not None, keep=_kept(resume)) as run_dir:
        model = build_model(config, settings, resume, trust_model)
        print_configuration(model, config, run_dir, console)
        tracking = open_tracking(wandb_options, run_config(model, config), run_dir, console)
        model.set_logger(build_logger(config, run_dir, tracking, console, resumed=resume is not None))
        threads = model.active_optimizations.adaptive_threads
        run_callbacks = RunCallbacks.build(config, run_dir, tracking, stop, console, threads, extra=callbacks or [])
        outcome = learn(model, config, run_callbacks, stop, resumed=resume is not None)
        summary = build_summary(model, config, run_callbacks, outcome)
        summary.update(run_dir=str(run_dir), resumed_from=str(resume) if resume else None, wandb_mode=tracking.mode)
        save_run(model, run_dir, summary, run_callbacks.record, config.save_replay_buffer, outcome.diverged is None)
        tracking.finish({key: value for key, value in summary.items() if isinstance(value, (int, float, str))})
        stop.phase = "finished"
    if outcome.diverged is not None:
        raise TrainingDiverged(f"{outcome.diverged}; model.zip was not written, {_last_good(run_dir)}")
    return summary


@dataclass(frozen=True)
class Outcome:
    wall_seconds: float
    env_steps: int
    diverged: TrainingDiverged | None


def learn(model: SnakeDQN, config: TrainConfig, callbacks: RunCallbacks, stop: StopRequest, resumed: bool) -> Outcome:
    """``model.learn`` until a callback stops it; wall time and env steps of this run only."""
    if stop.requested:
        raise RunCancelled(f"{stop.reason} before training started; nothing was trained or saved")
    stop.phase, diverged = "training", None
    start = callbacks.budget.start_time = time.perf_counter()
    steps_before = model.num_timesteps
    try:
        model.learn(
            MAX_TIMESTEPS,
            callback=CallbackList(callbacks.all),
            reset_num_timesteps=not resumed,
            log_interval=max(1, config.n_envs),
        )
    except TrainingDiverged as error:
        diverged = error
    finally:
        callbacks.progress.close()
        if callbacks.threads is not None:
            callbacks.threads.close()
        stop.phase = "saving"
    return Outcome(time.perf_counter() - start, model.num_timesteps - steps_before, diverged)


def _kept(resume: Path | None) -> tuple[Path, ...]:
    if resume is None:
        return ()
    return (Path(resume), replay_buffer_path(resume), legacy_replay_buffer_path(resume))


def _last_good(run_dir: Path) -> str:
    checkpoint = run_dir / "checkpoint.zip"
    if checkpoint.is_file():
        return f"the last good checkpoint is {checkpoint}"
    return "and no checkpoint was written (--checkpoint-every saves one)"


# ---------------------------------------------------------------------- the run's parts


def print_configuration(model: SnakeDQN, config: TrainConfig, run_dir: Path, console: Console) -> None:
    """The configuration summary: each optimization as requested and as active, and the run."""
    extra = {"envs": config.n_envs, "board size": f"{config.board_size}x{config.board_size}", "run folder": run_dir}
    for line in summary_lines(model.active_optimizations, extra):
        console.print(line, highlight=False, soft_wrap=True)


def run_config(model: SnakeDQN, config: TrainConfig) -> dict[str, Any]:
    """What W&B records as the run's config: hyperparameters, optimizations, the machine."""
    return {
        "hyperparameters": trained_hyperparameters(model, config),
        "optimizations": model.active_optimizations.as_dict(),
        "capabilities": capabilities(),
    }


def open_tracking(options: WandbOptions, config: dict[str, Any], run_dir: Path, console: Console) -> WandbRun:
    """A W&B run when ``options.enabled``, else one that never touches W&B."""
    if not options.enabled:
        return WandbRun.off()
    notify = lambda text: console.print(text, highlight=False)  # noqa: E731
    return WandbRun(options.project, resolve_mode(options.mode), config, run_dir, name=run_dir.name, notify=notify)


def build_logger(
    config: TrainConfig, run_dir: Path, tracking: WandbRun, console: Console, resumed: bool = False
) -> Logger:
    """SB3's logger with SB3's own outputs as asked (stdout with ``verbose``, TensorBoard with
    ``tensorboard_log``, numbered ``<run>_<n>`` as SB3 numbers them) and W&B when active."""
    outputs: list[KVWriter] = [HumanOutputFormat(console.file)] if config.verbose else []
    if config.tensorboard_log:
        latest = get_latest_run_id(config.tensorboard_log, run_dir.name)
        number = latest if resumed and latest > 0 else latest + 1
        outputs.append(TensorBoardOutputFormat(str(Path(config.tensorboard_log) / f"{run_dir.name}_{number}")))
    if tracking.active:
        outputs.append(WandbOutput(tracking))
    return Logger(folder=None, output_formats=outputs)


@dataclass
class RunCallbacks:
    """The run's callbacks, by role; ``all`` in the order SB3 calls them."""

    record: EpisodeRecord
    budget: EpisodeBudget
    progress: ProgressReport
    selection: BestModelSelection | None
    threads: AdaptiveThreads | None
    all: list[BaseCallback]

    @classmethod
    def build(
        cls,
        config: TrainConfig,
        run_dir: Path,
        tracking: WandbRun,
        stop: StopRequest,
        console: Console,
        adaptive_threads: tuple[int, ...] = (),
        extra: list[BaseCallback] = (),
    ) -> RunCallbacks:
        """Budget and stop request, progress, W&B episodes, checkpoints, best-model selection, the
        thread count measured while training (when ``adaptive_threads`` names counts to choose
        between), then ``extra``."""
        record = EpisodeRecord()
        max_seconds = config.time_limit_minutes * 60 if config.time_limit_minutes is not None else None
        budget = EpisodeBudget(config.episodes, record, time.perf_counter(), config.timesteps, max_seconds, stop)
        progress = ProgressReport(budget, console)
        callbacks: list[BaseCallback] = [budget, progress, EpisodeMetrics(budget, tracking.log)]
        if config.checkpoint_every:
            callbacks.append(EpisodeCheckpoint(budget, run_dir, config.checkpoint_every, config.save_replay_buffer))
        selection = None
        if config.select_every:
            selection = BestModelSelection(run_dir, config.select_every, config.select_episodes, tracking.log)
            callbacks.append(selection)
        threads = None
        if adaptive_threads:
            threads = AdaptiveThreads(adaptive_threads, notify=lambda line: console.print(line, highlight=False))
            callbacks.append(threads)
        return cls(record, budget, progress, selection, threads, [*callbacks, *extra])


def trained_hyperparameters(model: SnakeDQN, config: TrainConfig) -> dict[str, Any]:
    """What the model really trains with (read from it), beside the run's own options."""
    values = model.hyperparameters()
    actual_ratio = values["batch_size"] * values["gradient_steps"] / (values["train_freq"] * model.n_envs)
    run_options = {name: value for name, value in asdict(config).items() if name not in _MODEL_FIELDS}
    return {
        **run_options,
        **values,
        "policy": "AttentionPolicy",
        "replay_buffer": type(model.replay_buffer).__name__,
        "n_envs": model.n_envs,
        "replay_ratio": actual_ratio,
        "train_freq": values["train_freq"],
        "gradient_steps": values["gradient_steps"],
    }


def build_summary(model: SnakeDQN, config: TrainConfig, callbacks: RunCallbacks, outcome: Outcome) -> dict[str, Any]:
    """The run's ``summary.json``: limits, speed, scores, what trained, what was active."""
    settings, record, budget = model.active_optimizations.settings, callbacks.record, callbacks.budget
    stopped_by = "diverged" if outcome.diverged is not None else budget.stopped_by
    selection = callbacks.selection
    return {
        "episodes": len(record),
        "target_episodes": config.episodes,
        "stopped_by": stopped_by,
        "stop_reason": budget.stop.reason if stopped_by == "stop" else None,
        "error": str(outcome.diverged) if outcome.diverged is not None else None,
        "env_steps": outcome.env_steps,
        "total_env_steps": model.num_timesteps,
        "wall_seconds": outcome.wall_seconds,
        "env_steps_per_second": outcome.env_steps / outcome.wall_seconds if outcome.wall_seconds > 0 else 0.0,
        "mean_score_last_100": record.mean_score_last(100),
        "best_score": record.best_score,
        "mean_episode_steps_last_100": sum(record.lengths[-100:]) / max(1, len(record.lengths[-100:])),
        "hyperparameters": trained_hyperparameters(model, config),
        "optimizations": {
            name: {"value": value, "source": settings.source(name)} for name, value in settings.as_dict().items()
        },
        "active": model.optimizations_in_effect().as_dict(),
        "threads": callbacks.threads.tuner.as_dict() if callbacks.threads else None,
        "best_model": selection.best if selection else None,
        "selection_history": selection.history if selection else None,
    }


def save_run(
    model: SnakeDQN,
    run_dir: Path,
    summary: dict[str, Any],
    record: EpisodeRecord,
    replay_buffer: bool,
    save_model_file: bool = True,
) -> None:
    """Model (and replay buffer), episodes and summary, each atomically; the summary last, so
    a summary on disk means everything it describes is there."""
    if save_model_file:
        save_model(model, run_dir / "model.zip", replay_buffer)
    write_json(run_dir / "episodes.json", asdict(record))
    write_json(run_dir / "summary.json", summary)
