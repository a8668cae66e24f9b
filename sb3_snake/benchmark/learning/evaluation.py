"""Judging a trained run: every checkpoint played greedily into the run's curve, the last one
again with more games for the final evaluation, and the run's times (or env steps) to each score."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sb3_snake.benchmark.learning.summary import SCORE_AT_SECONDS, SCORE_THRESHOLDS, score_at, time_to_score

#: Plays a run's checkpoints for so many greedy games each: its curve (:func:`evaluate_checkpoints`).
EvaluateRun = Callable[[dict[str, Any], int], list[dict[str, Any]]]


def evaluate_checkpoints(run: dict[str, Any], episodes: int, settings: Any = None) -> list[dict[str, Any]]:
    """Every checkpoint of ``run`` played greedily on the evaluation seeds: the run's curve."""
    from stable_baselines3 import DQN, PPO

    from sb3_snake.persistence import load_model
    from sb3_snake.training.evaluation import evaluate

    curve = []
    for checkpoint in run["checkpoints"]:
        if run["system"] in ("sb3_snake", "pqn"):
            model = load_model(checkpoint["path"], settings)
        elif run["system"] == "sb3_ppo":
            model = PPO.load(checkpoint["path"], device="cpu")
        else:
            model = DQN.load(checkpoint["path"], device="cpu")
        result = evaluate(model, episodes, seed=0)
        # The due env steps of a budget of them; the exploring games' mean when learning (Checkpoints) kept it.
        kept = {key: checkpoint[key] for key in ("due_env_steps", "exploring_score") if key in checkpoint}
        curve.append(
            {
                "seconds": checkpoint["seconds"],
                "due_seconds": checkpoint.get("due_seconds", checkpoint["seconds"]),
                **kept,
                "minutes": checkpoint["seconds"] / 60,
                "env_steps": checkpoint["env_steps"],
                **{
                    key: result[key]
                    for key in (
                        "mean_score",
                        "median_score",
                        "max_score",
                        "win_rate",
                        "mean_length",
                        "max_length",
                        "ends",
                    )
                },
            }
        )
    return curve


def with_settings_of(env_file: str | None) -> EvaluateRun:
    """:func:`evaluate_checkpoints` with the optimization settings the runs trained with (``env_file``'s)."""

    def evaluate_run(run: dict[str, Any], episodes: int) -> list[dict[str, Any]]:
        from sb3_snake.acceleration.settings import OptimizationSettings

        # The run's settings; load_model does not compile a model loaded for acting.
        return evaluate_checkpoints(run, episodes, OptimizationSettings.load(env_file))

    return evaluate_run


def judge_run(entry: dict[str, Any], evaluate_run: EvaluateRun, episodes: int, final_episodes: int, by: str) -> None:
    """Add to the trained run ``entry`` its ``curve`` (``episodes`` games per checkpoint), its
    ``final`` evaluation (the last checkpoint again, ``final_episodes`` games; none at 0), its
    ``<by>_to_score`` for each of :data:`SCORE_THRESHOLDS` and, on a budget of seconds, its
    ``mean_score_at`` each of :data:`SCORE_AT_SECONDS`.

    :param by: the budget's unit, ``seconds`` or ``env_steps``.
    :raises Exception: whatever playing a checkpoint raised; ``entry`` may then be half-judged.
    """
    entry["curve"] = evaluate_run(entry, episodes)
    if final_episodes and entry["checkpoints"]:
        last = evaluate_run({**entry, "checkpoints": entry["checkpoints"][-1:]}, final_episodes)
        entry["final"] = {"episodes": final_episodes, **last[0]}
    entry[f"{by}_to_score"] = {str(t): time_to_score(entry["curve"], t, by=by) for t in SCORE_THRESHOLDS}
    if by == "seconds":
        points = {str(t): score_at(entry["curve"], t) for t in SCORE_AT_SECONDS}
        entry["mean_score_at"] = {t: None if point is None else point["mean_score"] for t, point in points.items()}
