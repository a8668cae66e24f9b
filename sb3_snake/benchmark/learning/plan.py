"""The plan of a learning benchmark and its run: every system and seed trained in a process of its
own, every checkpoint then played greedily, and one JSON-ready report."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sb3_snake.benchmark.learning.runs import (
    CALIBRATION_SECONDS,
    RunFailed,
    RunSpec,
    calibrate_plain_sb3,
    check_sb3_snake_run,
    run_in_process,
)
from sb3_snake.benchmark.learning.summary import SCORE_AT_SECONDS, SCORE_THRESHOLDS, score_at, summarize, time_to_score
from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import system_info

#: ``sb3-snake train``; plain SB3 DQN("MlpPolicy") as its defaults give it; SB3's PPO with the
#: attention extractor on the batched env, the peer a user would pick.
SYSTEMS = ("sb3_snake", "plain_sb3", "sb3_ppo")


#: The largest seed NumPy and the envs take (2**32 - 1), checked for every run before the first.
MAX_SEED = 2**32 - 1
#: The most seeds of one plan: each is a run of minutes per system (1,000 quick runs are 33 hours
#: per system), so more is a typo, refused before a tuple of them is built.
MAX_SEEDS = 1000
#: The shortest interval between checkpoints. Each is a saved model, played for ``episodes`` games
#: after training, and is taken at the first env step at or after its point; below a second,
#: saving and playing checkpoints outweighs the training they measure, and the points of several
#: fall within one env step of a run's first seconds (an update, a compile) anyway.
MIN_EVERY_SECONDS = 1.0
#: Every system's board when neither the plan nor its hyperparameters name one.
DEFAULT_BOARD_SIZE = 10


def seed_range(first: int, count: int) -> tuple[int, ...]:
    """The seeds ``first, first + 1, ...``, ``count`` of them, checked before any is made."""
    problem = _seeds_problem(first, first + count - 1, count)
    if problem:
        raise UsageError(problem)
    return tuple(range(first, first + count))


def _seeds_problem(lowest: int, highest: int, count: int) -> str:
    if count < 1:
        return "--seeds must be at least 1"
    if count > MAX_SEEDS:
        return f"--seeds must be at most {MAX_SEEDS} (a run of minutes per seed and system), got {count:,}"
    if not 0 <= lowest <= highest <= MAX_SEED:
        return f"seeds must be 0 to {MAX_SEED}, got {lowest} to {highest}: lower --first-seed or --seeds"
    return ""


@dataclass(frozen=True)
class LearningPlan:
    """What one ``sb3-snake benchmark-learning`` run does. Everything is checked on construction,
    the sb3_snake runs' config included, so a bad value is refused before any run starts."""

    minutes: float = 15.0  #: counted wall-clock budget of each run
    every_seconds: float = 15.0  #: counted seconds between checkpoints, at least :data:`MIN_EVERY_SECONDS`
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 100  #: greedy games per checkpoint evaluation
    systems: tuple[str, ...] = SYSTEMS
    #: every system's board; None: the hyperparameters' ``board_size``, else :data:`DEFAULT_BOARD_SIZE`
    board_size: int | None = None
    cold_cache: bool = True  #: a fresh, empty compile cache for each run
    env_file: str | None = None  #: the ``.env`` of the sb3_snake runs (None: ./.env when present)
    #: sb3_snake's changes to the defaults, as in a ``--hyperparams`` file (config and batch size)
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def quick(cls, **changes: Any) -> LearningPlan:
        """Two minutes per run, a checkpoint every 10 s: the shape of the curve, not its end."""
        return cls(**{"minutes": 2.0, "every_seconds": 10.0, **changes})

    def __post_init__(self) -> None:
        problems = [
            "" if 0 < self.minutes < math.inf else f"--minutes must be a positive number, got {self.minutes}",
            ""
            if MIN_EVERY_SECONDS <= self.every_seconds < math.inf
            else f"--every must be a number of seconds of at least {MIN_EVERY_SECONDS:g}, got {self.every_seconds}",
            _seeds_problem(min(self.seeds, default=0), max(self.seeds, default=0), len(self.seeds)),
            "" if self.episodes >= 1 else f"--episodes must be at least 1, got {self.episodes}",
            ""
            if set(self.systems) <= set(SYSTEMS)
            else f"systems must be among {', '.join(SYSTEMS)}, got {self.systems}",
        ]
        problem = next((message for message in problems if message), "")
        if problem:
            raise UsageError(problem)
        object.__setattr__(self, "board_size", self._board_size())
        if "sb3_snake" in self.systems:
            check_sb3_snake_run(self.spec("sb3_snake", max(self.seeds), Path()))

    def _board_size(self) -> int:
        """The plan's board, or the hyperparameters' (one UsageError when they name two)."""
        from sb3_snake.training.hyperparameters import check_hyperparameters

        named = check_hyperparameters(self.hyperparameters).get("board_size")
        if self.board_size is not None and named is not None and named != self.board_size:
            raise UsageError(
                f"the plan's board_size {self.board_size} and the hyperparameters' {named} differ; give one of them"
            )
        return next(size for size in (self.board_size, named, DEFAULT_BOARD_SIZE) if size is not None)

    @property
    def budget_seconds(self) -> float:
        return self.minutes * 60

    def spec(self, system: str, seed: int, directory: Path, total_timesteps: int | None = None) -> RunSpec:
        """The run of ``system`` and ``seed`` this plan makes, in ``directory``."""
        return RunSpec(
            system,
            seed,
            self.budget_seconds,
            self.every_seconds,
            self.board_size,
            str(directory),
            self.env_file,
            self.hyperparameters if system == "sb3_snake" else {},
            total_timesteps if system == "plain_sb3" else None,
        )


def evaluate_checkpoints(run: dict[str, Any], episodes: int, settings: Any = None) -> list[dict[str, Any]]:
    """Every checkpoint of ``run`` played greedily on the evaluation seeds: the run's curve."""
    from stable_baselines3 import DQN, PPO

    from sb3_snake.persistence import load_model
    from sb3_snake.training.evaluation import evaluate

    curve = []
    for checkpoint in run["checkpoints"]:
        if run["system"] == "sb3_snake":
            model = load_model(checkpoint["path"], settings)
        elif run["system"] == "sb3_ppo":
            model = PPO.load(checkpoint["path"], device="cpu")
        else:
            model = DQN.load(checkpoint["path"], device="cpu")
        result = evaluate(model, episodes, seed=0)
        curve.append(
            {
                "seconds": checkpoint["seconds"],
                "due_seconds": checkpoint.get("due_seconds", checkpoint["seconds"]),
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


def compile_cache_state(cache_dir: str | None) -> str:
    """``cold`` when the compile cache ``cache_dir`` (None: torch's default) is empty or missing."""
    if cache_dir is None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    path = Path(cache_dir)
    return "warm" if path.is_dir() and any(path.iterdir()) else "cold"


def run_learning_benchmark(
    plan: LearningPlan,
    work_dir: Path,
    progress: Callable[[str], None] = lambda line: None,
    run: Callable[[RunSpec, str | None], dict[str, Any]] = run_in_process,
    evaluate_run: Callable[[dict[str, Any], int], list[dict[str, Any]]] | None = None,
    calibrate: Callable[[float, int], float] = calibrate_plain_sb3,
) -> dict[str, Any]:
    """Train every system and seed of ``plan`` (under ``work_dir``), evaluate the checkpoints,
    and return the JSON-ready report. A run whose process fails (:class:`RunFailed`) is listed
    in the report's ``failed_runs`` and the others go on, as is one whose checkpoints fail to
    play: one crash loses one run, not the benchmark. ``run``, ``evaluate_run`` and
    ``calibrate`` are the measurements, injectable for tests."""
    evaluate_run = evaluate_run or _evaluate_with_plan_settings(plan)
    total_timesteps = None
    if "plain_sb3" in plan.systems:
        seconds = min(CALIBRATION_SECONDS, plan.budget_seconds / 10)
        progress(f"calibrating plain SB3's env steps/s ({seconds:.0f} s, not counted)...")
        rate = calibrate(seconds, plan.board_size)
        total_timesteps = max(1, int(rate * plan.budget_seconds))
        progress(f"  {rate:,.0f} env steps/s: plain SB3 gets total_timesteps={total_timesteps:,}")
    runs, failed = [], []
    for seed in plan.seeds:
        for system in plan.systems:
            directory = work_dir / f"{system}-seed{seed}"
            cache_dir = tempfile.mkdtemp(prefix="caches-", dir=work_dir) if plan.cold_cache else None
            cache = compile_cache_state(f"{cache_dir}/inductor" if cache_dir else None)
            progress(f"{system} seed {seed}: training for {plan.minutes:g} min ({cache} compile cache)...")
            spec = plan.spec(system, seed, directory, total_timesteps)
            try:
                result = run(spec, cache_dir)
            except RunFailed as error:  # the runs done and to come still count
                progress(f"{system} seed {seed}: {error}; the other runs go on")
                failed.append({"system": system, "seed": seed, "error": str(error), "compile_cache": cache})
                continue
            runs.append({**result, "compile_cache": cache})
    evaluated = []
    for entry in runs:
        progress(f"evaluating {len(entry['checkpoints'])} checkpoints of {entry['system']} seed {entry['seed']}...")
        try:
            entry["curve"] = evaluate_run(entry, plan.episodes)
        except Exception as error:  # noqa: BLE001 - one run's checkpoints, not the whole benchmark
            message = f"playing the checkpoints of seed {entry['seed']} failed: {type(error).__name__}: {error}"
            progress(f"{entry['system']} seed {entry['seed']}: {message}; the other runs go on")
            failed.append(
                {
                    "system": entry["system"],
                    "seed": entry["seed"],
                    "error": message,
                    "compile_cache": entry["compile_cache"],
                }
            )
            continue
        evaluated.append(entry)
        entry["seconds_to_score"] = {str(t): time_to_score(entry["curve"], t) for t in SCORE_THRESHOLDS}
        points = {str(t): score_at(entry["curve"], t) for t in SCORE_AT_SECONDS}
        entry["mean_score_at"] = {t: None if point is None else point["mean_score"] for t, point in points.items()}
    return {
        "benchmark": "learning",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "system": system_info(),
        "plan": asdict(plan),
        "method": {
            "clock": "wall clock from before the run's process starts (imports, model build and "
            "compilation included); checkpoint saving is not counted",
            "evaluation": f"{plan.episodes} greedy games on the evaluation seeds per checkpoint, after training",
            "compile_cache": "fresh empty TORCHINDUCTOR_CACHE_DIR and SB3_SNAKE_CACHE_DIR per run (cold)"
            if plan.cold_cache
            else "the user's caches; each run records whether the compile cache held anything",
            "plain_sb3": "DQN('MlpPolicy', SnakeEnv()) with SB3's defaults, torch's default threads, "
            "total_timesteps from a calibration run (not counted)",
            "sb3_ppo": "PPO('MlpPolicy', BatchedSnakeVecEnv(64)) with the attention extractor and "
            "sb3_snake.zoo.ppo's settings, torch's default threads",
        },
        "plain_sb3_total_timesteps": total_timesteps,
        "runs": evaluated,
        "failed_runs": failed,
        "summary": summarize(evaluated),
    }


def _evaluate_with_plan_settings(plan: LearningPlan) -> Callable[[dict[str, Any], int], list[dict[str, Any]]]:
    def evaluate_run(run: dict[str, Any], episodes: int) -> list[dict[str, Any]]:
        from sb3_snake.acceleration.settings import OptimizationSettings

        # The run's settings; load_model does not compile a model loaded for acting.
        return evaluate_checkpoints(run, episodes, OptimizationSettings.load(plan.env_file))

    return evaluate_run
