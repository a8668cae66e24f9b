"""What a finished run reports and keeps: the hyperparameters it really trained with (read back
from the model), ``summary.json``, and the files saved atomically, the summary last."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sb3_snake.common.errors import TrainingDiverged
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.persistence import save_model, write_json
from sb3_snake.pqn import PQN
from sb3_snake.training.callbacks import EpisodeRecord, RunCallbacks
from sb3_snake.training.config import MODEL_FIELDS, POLICY_ALIASES_BY_OPTION, PQN_ARGUMENTS, TrainConfig, fields_of
from sb3_snake.training.evaluation import latest_evaluation
from sb3_snake.training.learners import learner
from sb3_snake.training.roles import DEFAULT_LEARNER, DEFAULT_LEARNER_REASON


@dataclass(frozen=True)
class Outcome:
    """How ``learn`` ended: its wall time and env steps (this run's only), and the divergence
    that stopped it, if one did."""

    wall_seconds: float
    env_steps: int
    diverged: TrainingDiverged | None


def batch_size_source(config: TrainConfig) -> str:
    """Where the batch size came from (the config's source); for a learner whose batches are cut
    from a rollout, also how it cuts it."""
    if config.batches_from_rollout and config.batch_size != "auto":
        minibatches = config.rollout_samples // config.batch_size
        rollout = f"{config.rollout_steps} moves x {config.n_envs} games in {minibatches} minibatches"
        return f"{config.source('batch_size')}; {rollout}"
    return config.source("batch_size")


def trained_hyperparameters(model: SnakeDQN | PQN, config: TrainConfig) -> dict[str, Any]:
    """What the model really trains with (read from it by its learner), beside the run's own
    options (the learners' own options left out: the model's values stand for those it used)."""
    unused = (
        *MODEL_FIELDS,
        *PQN_ARGUMENTS,
        *fields_of(lambda role: role.learner not in (None, config.algo)),
        "sources",
    )
    run_options = {name: value for name, value in asdict(config).items() if name not in unused}
    return {**run_options, **learner(config.algo).hyperparameters(model)}


def build_summary(
    model: SnakeDQN | PQN, config: TrainConfig, callbacks: RunCallbacks, outcome: Outcome
) -> dict[str, Any]:
    """The run's ``summary.json``: limits, speed, scores, what trained, what was active.

    ``last_evaluation`` is the latest greedy evaluation during training (``--eval-every`` or
    ``--select-every``): what the model plays. ``mean_score_last_100`` and ``best_score`` are
    the exploring games', from standard starts only."""
    settings, record, budget = model.active_optimizations.settings, callbacks.record, callbacks.budget
    stopped_by = "diverged" if outcome.diverged is not None else budget.stopped_by
    selection = callbacks.selection
    return {
        "learner": {
            "name": model.description_name,
            "policy": POLICY_ALIASES_BY_OPTION[config.policy],
            "why": DEFAULT_LEARNER_REASON if config.algo == DEFAULT_LEARNER else f"asked for: --algo {config.algo}",
        },
        "episodes": len(record),
        "target_episodes": config.episodes,
        "stopped_by": stopped_by,
        "stop_reason": budget.stop.reason if stopped_by == "stop" else None,
        "error": str(outcome.diverged) if outcome.diverged is not None else None,
        "env_steps": outcome.env_steps,
        "total_env_steps": model.num_timesteps,
        "wall_seconds": outcome.wall_seconds,
        "env_steps_per_second": outcome.env_steps / outcome.wall_seconds if outcome.wall_seconds > 0 else 0.0,
        "last_evaluation": latest_evaluation(callbacks.evaluations),
        "evaluations": callbacks.evaluation.history if callbacks.evaluation else None,
        "mean_score_last_100": record.mean_score_last(100),
        "best_score": record.best_score,
        "mean_episode_steps_last_100": sum(record.lengths[-100:]) / max(1, len(record.lengths[-100:])),
        "hyperparameters": trained_hyperparameters(model, config),
        "batch_size": {"value": model.batch_size, "source": batch_size_source(config)},
        "optimizations": {
            name: {"value": value, "source": settings.source(name)} for name, value in settings.as_dict().items()
        },
        "auto": dict(settings.auto_record) or None,
        "active": model.optimizations_in_effect().as_dict(),
        "threads": callbacks.threads.tuner.as_dict() if callbacks.threads else None,
        "best_model": selection.best if selection else None,
        "selection_history": selection.history if selection else None,
    }


def save_run(
    model: SnakeDQN | PQN,
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
