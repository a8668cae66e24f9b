"""``sb3-snake benchmark-learning``: greedy score against wall-clock minutes.

The number a user feels is how soon the agent plays well, so this benchmark trains for a
wall-clock budget and judges the models saved along the way:

1. Each run (a system and a seed) trains in a process of its own, started fresh, so that every
   run pays what a user pays: importing torch and SB3, building the model, compiling it.
   The clock starts before the process does. With ``cold_cache`` (the default) each run gets
   empty caches: ``TORCHINDUCTOR_CACHE_DIR``, so compilation starts from nothing, and
   ``SB3_SNAKE_CACHE_DIR``, so ``auto`` settings are measured as on a machine's first run;
   otherwise the user's caches are used and the result records whether the compile cache held
   anything.
2. Every ``every_seconds`` of counted time the model is saved; the time spent saving is taken
   off the clock (:class:`Stopwatch`), so checkpoints cost the run nothing. Training stops when
   the counted time reaches the budget, with a last checkpoint.
3. After all training, every checkpoint plays ``episodes`` greedy games on the evaluation seeds
   (the same games for each), and the run's curve is greedy mean score against minutes.

Two systems run the same way: ``sb3_snake`` is ``sb3-snake train`` with the ``.env`` settings
and the default config (or a hyperparameter file), through :func:`sb3_snake.training.run.train`;
``plain_sb3`` is what a user would otherwise write, ``DQN("MlpPolicy", SnakeEnv())`` with SB3's
defaults. SB3's exploration schedule is a fraction of ``total_timesteps``, so plain SB3 is given
the env steps it reaches in the budget, at the rate measured by a short calibration run before
the benchmark (not counted): the total a user who sized the run to the budget would pass.

The report gives, per system, the time each seed first reached a greedy mean of 10, 20, 25 and
30 (:data:`SCORE_THRESHOLDS`), their median and spread, the greedy mean at 60 s
(:data:`SCORE_AT_SECONDS`) and the final score. Each checkpoint records both the point it fell
due at (``due_seconds``: every ``every_seconds``, and the budget) and the counted time it was
taken (``seconds``, the first env step at or after its point, later where a step was long, such
as one that compiled); the score "at 60 s" is that of the last checkpoint due at or before 60 s,
and the report gives the latest time such a checkpoint was really taken beside it.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.common.system import system_info

SYSTEMS = ("sb3_snake", "plain_sb3")
#: Greedy mean scores whose time to reach the report gives.
SCORE_THRESHOLDS = (10, 20, 25, 30)
#: Counted seconds at which the report gives the greedy mean (the first target: 20 within a minute).
SCORE_AT_SECONDS = (60,)
#: Seconds of plain SB3 learning whose env steps/s sets its ``total_timesteps``.
CALIBRATION_SECONDS = 10.0


@dataclass(frozen=True)
class LearningPlan:
    """What one ``sb3-snake benchmark-learning`` run does."""

    minutes: float = 15.0  #: counted wall-clock budget of each run
    every_seconds: float = 15.0  #: counted seconds between checkpoints
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 100  #: greedy games per checkpoint evaluation
    systems: tuple[str, ...] = SYSTEMS
    board_size: int = 10
    cold_cache: bool = True  #: a fresh, empty compile cache for each run
    env_file: str | None = None  #: the ``.env`` of the sb3_snake runs (None: ./.env when present)
    #: sb3_snake's changes to the defaults, as in a ``--hyperparams`` file (config and batch size)
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def quick(cls, **changes: Any) -> LearningPlan:
        """Two minutes per run, a checkpoint every 10 s: the shape of the curve, not its end."""
        return replace(cls(minutes=2.0, every_seconds=10.0), **changes)

    def __post_init__(self) -> None:
        problems = [
            (0 < self.minutes < math.inf, f"--minutes must be a positive number, got {self.minutes}"),
            (
                0 < self.every_seconds < math.inf,
                f"--every must be a positive number of seconds, got {self.every_seconds}",
            ),
            (len(self.seeds) >= 1, "--seeds must be at least 1"),
            (self.episodes >= 1, f"--episodes must be at least 1, got {self.episodes}"),
            (set(self.systems) <= set(SYSTEMS), f"systems must be among {', '.join(SYSTEMS)}, got {self.systems}"),
        ]
        problem = next((message for ok, message in problems if not ok), "")
        if problem:
            raise ValueError(problem)

    @property
    def budget_seconds(self) -> float:
        return self.minutes * 60


# ---------------------------------------------------------------------- the clock and checkpoints


class Stopwatch:
    """Seconds since ``start`` (a ``time.time()`` value, so it holds across processes), less the
    time spent inside :meth:`paused`."""

    def __init__(self, start: float, clock: Callable[[], float] = time.time):
        self.start, self.clock, self.paused_seconds = start, clock, 0.0

    def elapsed(self) -> float:
        return self.clock() - self.start - self.paused_seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        began = self.clock()
        try:
            yield
        finally:
            self.paused_seconds += self.clock() - began


class WallClockCheckpoints(BaseCallback):
    """Saves the model every ``every`` counted seconds and stops learning at ``budget``.

    Saving happens with the stopwatch paused. A checkpoint is recorded at the counted time it
    was taken and the point it fell due at (a long step can make the first later than the
    second; points missed during one step are skipped, not saved twice, and the checkpoint
    stands for the latest of them). When the budget is reached, a last checkpoint is saved
    (due at the budget) and ``learn`` stops.
    """

    def __init__(
        self,
        stopwatch: Stopwatch,
        every: float,
        budget: float,
        directory: Path,
        save: Callable[[Any, Path], None],
    ):
        super().__init__()
        self.stopwatch, self.every, self.budget, self.directory, self.save = stopwatch, every, budget, directory, save
        self.saved: list[dict[str, Any]] = []  #: counted seconds, env steps and file of each checkpoint
        self._next = every

    def _on_step(self) -> bool:
        now = self.stopwatch.elapsed()
        finished = now >= self.budget
        if now >= self._next or finished:
            due = self.budget
            while self._next <= now:
                due, self._next = self._next, self._next + self.every
            self.checkpoint(min(now, self.budget) if finished else now, self.budget if finished else due)
        return not finished

    def checkpoint(self, seconds: float, due_seconds: float | None = None) -> None:
        """Save the model now, off the clock, as the checkpoint of counted time ``seconds``, due
        at ``due_seconds`` (default: ``seconds``)."""
        with self.stopwatch.paused():
            path = self.directory / f"t{len(self.saved):04d}.zip"
            self.save(self.model, path)
            self.saved.append(
                {
                    "seconds": seconds,
                    "due_seconds": seconds if due_seconds is None else due_seconds,
                    "env_steps": int(self.num_timesteps),
                    "path": str(path),
                }
            )


# ---------------------------------------------------------------------- curves and times


def time_to_score(curve: Sequence[dict[str, Any]], threshold: float) -> float | None:
    """Counted seconds of the first checkpoint whose greedy mean reaches ``threshold``."""
    return next((point["seconds"] for point in curve if point["mean_score"] >= threshold), None)


def score_at(curve: Sequence[dict[str, Any]], seconds: float) -> dict[str, Any] | None:
    """The point of the last checkpoint due at or before ``seconds``: the model as it stood at
    that point of the budget, whenever the checkpoint was really taken. None where none was due
    by then, or the run ended before ``seconds`` (a 30-s run has no score at 60 s)."""

    def due(point: dict[str, Any]) -> float:
        return point.get("due_seconds", point["seconds"])

    if not curve or due(curve[-1]) < seconds:
        return None
    points = [point for point in curve if due(point) <= seconds]
    return points[-1] if points else None


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Median, min and max over seeds; a seed that never got there counts as later than all.

    ``median`` is None when the median seed never got there; ``reached`` says how many did.
    """
    reached = sorted(value for value in values if value is not None)
    ordered = reached + [float("inf")] * (len(values) - len(reached))
    middle = statistics.median(ordered) if ordered else float("inf")
    return {
        "median": None if middle == float("inf") else middle,
        "min": reached[0] if reached else None,
        "max": ordered[-1] if len(reached) == len(values) and reached else None,
        "reached": f"{len(reached)}/{len(values)}",
    }


def summarize(runs: Sequence[dict[str, Any]], thresholds: Sequence[float] = SCORE_THRESHOLDS) -> dict[str, Any]:
    """Per system: time to each threshold (median and spread over seeds) and the final score."""
    summary: dict[str, Any] = {}
    for system in dict.fromkeys(run["system"] for run in runs):
        own = [run for run in runs if run["system"] == system]
        finals = [run["curve"][-1]["mean_score"] if run["curve"] else 0.0 for run in own]
        at = {seconds: [score_at(run["curve"], seconds) for run in own] for seconds in SCORE_AT_SECONDS}
        summary[system] = {
            "seeds": [run["seed"] for run in own],
            "seconds_to_score": {
                str(threshold): spread([time_to_score(run["curve"], threshold) for run in own])
                for threshold in thresholds
            },
            "mean_score_at": {
                str(seconds): None
                if None in points
                else {
                    **_median_min_max([point["mean_score"] for point in points]),
                    "latest_taken_seconds": max(point["seconds"] for point in points),
                }
                for seconds, points in at.items()
            },
            "final_mean_score": _median_min_max(finals),
            "env_steps": {"median": statistics.median(run["env_steps"] for run in own)},
        }
    return summary


def _median_min_max(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# ---------------------------------------------------------------------- one run, in its own process


@dataclass(frozen=True)
class RunSpec:
    system: str
    seed: int
    budget_seconds: float
    every_seconds: float
    board_size: int
    directory: str
    env_file: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    total_timesteps: int | None = None  #: plain_sb3 only: what its exploration schedule spans


def run_in_process(spec: RunSpec, cache_dir: str | None) -> dict[str, Any]:
    """Train ``spec`` in a fresh process (spawned); the clock starts before the process does.

    ``cache_dir``: a folder for the run's own compile and auto-settings caches (None: the user's).
    """
    result_path = Path(spec.directory) / "run.json"
    result_path.parent.mkdir(parents=True, exist_ok=True)
    caches = {"TORCHINDUCTOR_CACHE_DIR": None, "SB3_SNAKE_CACHE_DIR": None}
    if cache_dir is not None:
        caches = {"TORCHINDUCTOR_CACHE_DIR": f"{cache_dir}/inductor", "SB3_SNAKE_CACHE_DIR": f"{cache_dir}/sb3-snake"}
    start = time.time()
    with _environment(**caches):
        process = multiprocessing.get_context("spawn").Process(
            target=_run_and_write, args=(asdict(spec), start, str(result_path))
        )
        process.start()
    process.join()
    if process.exitcode != 0 or not result_path.is_file():
        raise RuntimeError(
            f"the {spec.system} run of seed {spec.seed} failed (exit code {process.exitcode}); "
            f"its output is in {Path(spec.directory) / 'train.log'}"
        )
    return json.loads(result_path.read_text())


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Environment variables set (None: left as they are) for processes started inside."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update({key: value for key, value in values.items() if value is not None})
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_and_write(spec: dict[str, Any], start: float, result_path: str) -> None:
    result = run_system(RunSpec(**spec), Stopwatch(start))
    Path(result_path).write_text(json.dumps(result, indent=2) + "\n")


def run_system(spec: RunSpec, stopwatch: Stopwatch) -> dict[str, Any]:
    """Train one system for the budget on ``stopwatch``, saving checkpoints; runs in the child.

    ``startup_seconds`` in the result is the counted time already gone when this starts: the
    process's start and its imports, when the clock began in the parent.
    """
    startup_seconds = stopwatch.elapsed()
    directory = Path(spec.directory)
    checkpoints_dir = directory / "checkpoints"
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    trainer = _train_sb3_snake if spec.system == "sb3_snake" else _train_plain_sb3
    with open(directory / "train.log", "w") as log:
        result = trainer(spec, stopwatch, checkpoints_dir, log)
    return {"system": spec.system, "seed": spec.seed, "startup_seconds": startup_seconds, **result}


def _train_sb3_snake(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    import torch
    from rich.console import Console

    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.persistence import save_model
    from sb3_snake.training.hyperparameters import check_hyperparameters
    from sb3_snake.training.options import load_config
    from sb3_snake.training.run import train

    settings = OptimizationSettings.load(spec.env_file)
    # The budget is the checkpoints' to enforce; the config's limit is only a backstop.
    config = load_config(
        spec.env_file,
        **{**check_hyperparameters(spec.hyperparameters), "seed": spec.seed, "board_size": spec.board_size},
        time_limit_minutes=2 * spec.budget_seconds / 60,
    )
    threads = threads_for(settings, config.device)
    checkpoints = WallClockCheckpoints(
        stopwatch, spec.every_seconds, spec.budget_seconds, checkpoints_dir, lambda model, path: save_model(model, path)
    )
    with torch_threads(threads):
        summary = train(
            config,
            settings,
            Path(spec.directory) / "run",
            callbacks=[checkpoints],
            console=Console(file=log, width=100),
        )
        threads = torch.get_num_threads()
    return {
        "checkpoints": checkpoints.saved,
        "env_steps": summary["env_steps"],
        "threads": threads,
        "batch_size": summary["hyperparameters"]["batch_size"],
        "optimizations": summary["active"],
    }


def _train_plain_sb3(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    import torch
    from stable_baselines3 import DQN

    from sb3_snake.envs import SnakeEnv

    # On the CPU even where a GPU exists, as benchmark.end_to_end does: a 64x64 MLP at batch
    # 32 runs faster there. torch's own thread count, as a user's script would have.
    model = DQN("MlpPolicy", SnakeEnv(board_size=spec.board_size), seed=spec.seed, device="cpu")
    checkpoints = WallClockCheckpoints(
        stopwatch, spec.every_seconds, spec.budget_seconds, checkpoints_dir, lambda model, path: model.save(path)
    )
    model.learn(spec.total_timesteps or 10**12, callback=checkpoints)
    if not checkpoints.saved or checkpoints.saved[-1]["env_steps"] != model.num_timesteps:
        checkpoints.checkpoint(min(stopwatch.elapsed(), spec.budget_seconds))  # total_timesteps came first
    log.write(f"plain SB3 DQN: {model.num_timesteps} env steps of total_timesteps={spec.total_timesteps}\n")
    return {
        "checkpoints": checkpoints.saved,
        "env_steps": int(model.num_timesteps),
        "threads": torch.get_num_threads(),
        "total_timesteps": spec.total_timesteps,
    }


def calibrate_plain_sb3(seconds: float = CALIBRATION_SECONDS, board_size: int = 10) -> float:
    """Env steps/s of plain SB3 DQN learning with its defaults (a throwaway model)."""
    from stable_baselines3 import DQN

    from sb3_snake.envs import SnakeEnv

    model = DQN("MlpPolicy", SnakeEnv(board_size=board_size), seed=0, device="cpu")
    stopwatch = Stopwatch(time.time())
    stop = WallClockCheckpoints(stopwatch, every=float("inf"), budget=seconds, directory=Path(), save=lambda *_: None)
    model.learn(10**12, callback=stop)
    return model.num_timesteps / max(stopwatch.elapsed(), 1e-9)


# ---------------------------------------------------------------------- evaluation and the report


def evaluate_checkpoints(run: dict[str, Any], episodes: int, settings: Any = None) -> list[dict[str, Any]]:
    """Every checkpoint of ``run`` played greedily on the evaluation seeds: the run's curve."""
    from stable_baselines3 import DQN

    from sb3_snake.persistence import load_model
    from sb3_snake.training.evaluation import evaluate

    curve = []
    for checkpoint in run["checkpoints"]:
        if run["system"] == "sb3_snake":
            model = load_model(checkpoint["path"], settings)
        else:
            model = DQN.load(checkpoint["path"], device="cpu")
        result = evaluate(model, episodes, seed=0)
        curve.append(
            {
                "seconds": checkpoint["seconds"],
                "due_seconds": checkpoint.get("due_seconds", checkpoint["seconds"]),
                "minutes": checkpoint["seconds"] / 60,
                "env_steps": checkpoint["env_steps"],
                **{key: result[key] for key in ("mean_score", "median_score", "max_score", "ends")},
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
    and return the JSON-ready report. ``run``, ``evaluate_run`` and ``calibrate`` are the
    measurements, injectable for tests."""
    evaluate_run = evaluate_run or _evaluate_with_plan_settings(plan)
    total_timesteps = None
    if "plain_sb3" in plan.systems:
        seconds = min(CALIBRATION_SECONDS, plan.budget_seconds / 10)
        progress(f"calibrating plain SB3's env steps/s ({seconds:.0f} s, not counted)...")
        rate = calibrate(seconds, plan.board_size)
        total_timesteps = max(1, int(rate * plan.budget_seconds))
        progress(f"  {rate:,.0f} env steps/s: plain SB3 gets total_timesteps={total_timesteps:,}")
    runs = []
    for seed in plan.seeds:
        for system in plan.systems:
            directory = work_dir / f"{system}-seed{seed}"
            cache_dir = tempfile.mkdtemp(prefix="caches-", dir=work_dir) if plan.cold_cache else None
            cache = compile_cache_state(f"{cache_dir}/inductor" if cache_dir else None)
            progress(f"{system} seed {seed}: training for {plan.minutes:g} min ({cache} compile cache)...")
            spec = RunSpec(
                system,
                seed,
                plan.budget_seconds,
                plan.every_seconds,
                plan.board_size,
                str(directory),
                plan.env_file,
                plan.hyperparameters if system == "sb3_snake" else {},
                total_timesteps if system == "plain_sb3" else None,
            )
            result = run(spec, cache_dir)
            runs.append({**result, "compile_cache": cache})
    for entry in runs:
        progress(f"evaluating {len(entry['checkpoints'])} checkpoints of {entry['system']} seed {entry['seed']}...")
        entry["curve"] = evaluate_run(entry, plan.episodes)
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
        },
        "plain_sb3_total_timesteps": total_timesteps,
        "runs": runs,
        "summary": summarize(runs),
    }


def _evaluate_with_plan_settings(plan: LearningPlan) -> Callable[[dict[str, Any], int], list[dict[str, Any]]]:
    def evaluate_run(run: dict[str, Any], episodes: int) -> list[dict[str, Any]]:
        from sb3_snake.acceleration.settings import OptimizationSettings

        # The run's settings; load_model does not compile a model loaded for acting.
        return evaluate_checkpoints(run, episodes, OptimizationSettings.load(plan.env_file))

    return evaluate_run


def plot_learning_benchmark(report: dict[str, Any], output: Path) -> Path:
    """Greedy mean score against minutes, one line per seed, a colour per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"sb3_snake": "tab:orange", "plain_sb3": "tab:blue"}
    labels = {"sb3_snake": "sb3-snake train", "plain_sb3": 'plain SB3 DQN("MlpPolicy")'}
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for index, run in enumerate(report["runs"]):
        minutes = [0.0] + [point["minutes"] for point in run["curve"]]
        scores = [0.0] + [point["mean_score"] for point in run["curve"]]
        first = all(other["system"] != run["system"] for other in report["runs"][:index])
        axis.plot(
            minutes,
            scores,
            color=colours.get(run["system"], "tab:gray"),
            alpha=0.8,
            label=labels.get(run["system"], run["system"]) if first else None,
        )
    for threshold in SCORE_THRESHOLDS:
        axis.axhline(threshold, color="gray", linewidth=0.5, linestyle=":")
    system = report["system"]
    axis.set_xlabel("wall-clock minutes (imports and compilation included)")
    axis.set_ylabel(f"greedy mean score ({report['plan']['episodes']} games)")
    axis.set_title(f"{system['cpu']}, {system['cpu_cores']} cores, torch {system['torch']}", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


#: A checkpoint taken this many seconds or more after the time it was due is marked late in the summary.
LATE_CHECKPOINT_SECONDS = 5.0


def format_summary(report: dict[str, Any]) -> str:
    """The time to each score and the score at :data:`SCORE_AT_SECONDS` and at the end, per
    system: median over seeds and spread."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}s"

    def scores(cell: dict[str, float] | None) -> str:
        return "-" if cell is None else f"{cell['median']:.2f} ({cell['min']:.2f}-{cell['max']:.2f})"

    late: list[str] = []  # "at T s" cells holding a checkpoint taken well after T

    def scores_at(system: str, seconds_at: int, cell: dict[str, float] | None) -> str:
        if cell is None or cell["latest_taken_seconds"] <= seconds_at + LATE_CHECKPOINT_SECONDS:
            return scores(cell)
        late.append(f"{system} at {seconds_at} s: the last of them taken at {cell['latest_taken_seconds']:.0f} s")
        return scores(cell) + "*"

    lines = [
        f"{'system':<10} "
        + " ".join(f"{'to ' + str(t):>18}" for t in SCORE_THRESHOLDS)
        + "".join(f"   {'at ' + str(t) + ' s':>19}" for t in SCORE_AT_SECONDS)
        + "   final score"
    ]
    for system, entry in report["summary"].items():
        cells = []
        for threshold in SCORE_THRESHOLDS:
            cell = entry["seconds_to_score"][str(threshold)]
            if cell["min"] is None:
                cells.append(f"never {cell['reached']}")
            else:
                cells.append(
                    f"{seconds(cell['median'])} ({seconds(cell['min'])}-{seconds(cell['max'])}) {cell['reached']}"
                )
        at = entry.get("mean_score_at", {})
        lines.append(
            f"{system:<10} "
            + " ".join(f"{cell:>18}" for cell in cells)
            + "".join(f"   {scores_at(system, t, at.get(str(t))):>19}" for t in SCORE_AT_SECONDS)
            + f"   {scores(entry['final_mean_score'])}"
        )
    lines.append(
        "to N: median seconds to a greedy mean of N (fastest-slowest seed, '-' where one never got there), "
        "seeds that got there;\n"
        "at T s: median greedy mean (lowest-highest seed) of each seed's last checkpoint due by T s"
    )
    if late:
        lines.append(
            "* checkpoints due by then but taken later, after a long step (such as a compile): " + "; ".join(late)
        )
    return "\n".join(lines)
