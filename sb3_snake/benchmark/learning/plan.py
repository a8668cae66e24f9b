"""The plan of a learning benchmark and its run: every system and seed (or both arms of a
comparison) trained in a process of its own, up to ``parallel`` at once, every checkpoint then
played greedily, and one JSON-ready report."""

from __future__ import annotations

import functools
import math
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sb3_snake.benchmark.learning.evaluation import EvaluateRun, judge_run, with_settings_of
from sb3_snake.benchmark.learning.runs import (
    CALIBRATION_SECONDS,
    RunFailed,
    RunSpec,
    calibrate_plain_sb3,
    check_sb3_snake_run,
    compile_cache_state,
    run_in_process,
    stop_runs,
)
from sb3_snake.benchmark.learning.schedule import run_in_turn
from sb3_snake.benchmark.learning.summary import compare_arms, summarize
from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import system_info

#: ``sb3-snake train``; plain SB3 DQN("MlpPolicy") as its defaults give it; SB3's PPO with the
#: attention extractor on the batched env, the peer a user would pick; the package's PQN
#: (:mod:`sb3_snake.pqn`) on ``sb3-snake train``'s game.
SYSTEMS = ("sb3_snake", "plain_sb3", "sb3_ppo", "pqn")
#: The systems a plan trains when it names none: PQN only when asked.
DEFAULT_SYSTEMS = ("sb3_snake", "plain_sb3", "sb3_ppo")
#: The two arms of a comparison: sb3_snake with the plan's hyperparameters, and with the compared ones.
ARMS = ("A", "B")


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
#: The most checkpoints of a budget of env steps (``env_steps / every_env_steps``), for the same reason.
MAX_CHECKPOINTS = 1000
#: Every system's board when neither the plan nor its hyperparameters name one.
DEFAULT_BOARD_SIZE = 10
#: The budget and checkpoint interval of a plan that names neither: minutes, seconds.
DEFAULT_MINUTES, DEFAULT_EVERY_SECONDS = 15.0, 15.0
#: Greedy games of the final evaluation of a budget of env steps or a comparison: at 200 games the
#: greedy mean of one model is known to a few tenths, well below the differences worth a decision.
FINAL_EPISODES = 200


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


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


@dataclass(frozen=True)
class LearningPlan:
    """What one ``sb3-snake benchmark-learning`` run does. Everything is checked on construction,
    the sb3_snake runs' config (both arms' in a comparison) included, so a bad value is refused
    before any run starts; the fields left None are then resolved as their docs say.

    The budget of each run is minutes of counted wall clock or, with ``env_steps``, env steps
    (exclusive): the first measures what a user waits, the second what a setting learns per
    experience, the same on any machine and under any load.
    """

    #: counted wall-clock budget of each run; None: :data:`DEFAULT_MINUTES`, or none with ``env_steps``
    minutes: float | None = None
    #: counted seconds between checkpoints of a budget in minutes, at least :data:`MIN_EVERY_SECONDS`
    #: (None: :data:`DEFAULT_EVERY_SECONDS`)
    every_seconds: float | None = None
    env_steps: int | None = None  #: a budget of env steps (all games together) instead of minutes
    every_env_steps: int | None = None  #: env steps between checkpoints of such a budget (None: a tenth of it)
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 100  #: greedy games per checkpoint evaluation
    #: greedy games of a final evaluation of each run's last checkpoint, recorded apart (0: none;
    #: None: :data:`FINAL_EPISODES` with ``env_steps`` or ``compare``, else none)
    final_episodes: int | None = None
    systems: tuple[str, ...] | None = None  #: None: :data:`DEFAULT_SYSTEMS`, or sb3_snake alone with ``compare``
    #: every system's board; None: the hyperparameters' ``board_size``, else :data:`DEFAULT_BOARD_SIZE`
    board_size: int | None = None
    cold_cache: bool = True  #: a fresh, empty compile cache for each run
    env_file: str | None = None  #: the ``.env`` of the sb3_snake runs (None: ./.env when present)
    #: sb3_snake's changes to the defaults, as in a ``--hyperparams`` file (config and batch size);
    #: arm A of a comparison
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    #: arm B of a comparison: each seed trains sb3_snake with ``hyperparameters`` (A), then with
    #: these (B); None: no comparison
    compare: dict[str, Any] | None = None
    parallel: int = 1  #: runs at once, each in a process of its own
    #: torch threads of every run; None: 1 when ``parallel`` > 1 (the runs share the cores), else
    #: sb3_snake's settings' and torch's own for the others
    threads: int | None = None

    @classmethod
    def quick(cls, **changes: Any) -> LearningPlan:
        """Two minutes per run, a checkpoint every 10 s: the shape of the curve, not its end."""
        return cls(**{"minutes": 2.0, "every_seconds": 10.0, **changes})

    def __post_init__(self) -> None:
        problem = next((message for message in self._problems() if message), "")
        if problem:
            raise UsageError(problem)
        self._resolve()
        if "sb3_snake" in self.systems:
            for arm in self.arms:
                check_sb3_snake_run(self.spec("sb3_snake", max(self.seeds), Path(), arm=arm))

    def _problems(self) -> list[str]:
        """Every value's problem, in the order a user reads the options ('' where there is none)."""
        return [
            *self._budget_problems(),
            _seeds_problem(min(self.seeds, default=0), max(self.seeds, default=0), len(self.seeds)),
            "" if _whole(self.episodes, 1) else f"--episodes must be at least 1, got {self.episodes}",
            ""
            if self.final_episodes is None or _whole(self.final_episodes, 0)
            else f"--final-episodes must be a whole number of at least 0, got {self.final_episodes}",
            ""
            if set(self.systems or ()) <= set(SYSTEMS)
            else f"systems must be among {', '.join(SYSTEMS)}, got {self.systems}",
            ""
            if self.compare is None or self.systems in (None, ("sb3_snake",))
            else f"a comparison (--compare) trains sb3_snake alone, got systems {self.systems}: "
            "leave out --baseline and --ppo",
            "" if _whole(self.parallel, 1) else f"--parallel must be at least 1, got {self.parallel}",
            ""
            if self.threads is None or _whole(self.threads, 1)
            else f"--threads must be at least 1, got {self.threads}",
        ]

    def _budget_problems(self) -> list[str]:
        if self.env_steps is None:
            return [
                ""
                if self.minutes is None or 0 < self.minutes < math.inf
                else f"--minutes must be a positive number, got {self.minutes}",
                ""
                if self.every_seconds is None or MIN_EVERY_SECONDS <= self.every_seconds < math.inf
                else f"--every must be a number of seconds of at least {MIN_EVERY_SECONDS:g}, got {self.every_seconds}",
                ""
                if self.every_env_steps is None
                else "--every-steps is the interval of a budget of --env-steps; with --minutes give --every",
            ]
        every = self.every_env_steps
        if not _whole(self.env_steps, 1):
            return [f"--env-steps must be a whole number of at least 1, got {self.env_steps}"]
        return [
            ""
            if self.minutes is None
            else "give one budget: minutes (--minutes, --quick) or env steps (--env-steps), not both",
            ""
            if self.every_seconds is None
            else "--every is the interval of a budget of --minutes; with --env-steps give --every-steps",
            ""
            if every is None or (_whole(every, 1) and every <= self.env_steps)
            else f"--every-steps must be a whole number from 1 to --env-steps ({self.env_steps:,}), got {every}",
            ""
            if every is None or not _whole(every, 1) or self.env_steps / every <= MAX_CHECKPOINTS
            else f"--every-steps {every:,} makes more than {MAX_CHECKPOINTS} checkpoints of {self.env_steps:,} "
            f"env steps; give at least {math.ceil(self.env_steps / MAX_CHECKPOINTS):,}",
        ]

    def _resolve(self) -> None:
        """The fields left None set as their docs say (the plan is frozen, so once, here)."""
        by_steps = self.env_steps is not None
        resolved = {
            "minutes": None if by_steps else _given(self.minutes, DEFAULT_MINUTES),
            "every_seconds": None if by_steps else _given(self.every_seconds, DEFAULT_EVERY_SECONDS),
            "every_env_steps": _given(self.every_env_steps, max(1, self.env_steps // 10)) if by_steps else None,
            "final_episodes": _given(
                self.final_episodes, FINAL_EPISODES if by_steps or self.compare is not None else 0
            ),
            "systems": _given(self.systems, ("sb3_snake",) if self.compare is not None else DEFAULT_SYSTEMS),
            "threads": _given(self.threads, 1 if self.parallel > 1 else None),
            "board_size": self._board_size(),
        }
        for name, value in resolved.items():
            object.__setattr__(self, name, value)

    def _board_size(self) -> int:
        """The plan's board, or the hyperparameters' (one UsageError when they name two)."""
        from sb3_snake.training.hyperparameters import check_hyperparameters

        compared = {} if self.compare is None else check_hyperparameters(self.compare, "compared hyperparameters")
        named = [
            (whose, size)
            for whose, size in (
                ("the plan's", self.board_size),
                ("the hyperparameters'", check_hyperparameters(self.hyperparameters).get("board_size")),
                ("the compared hyperparameters'", compared.get("board_size")),
            )
            if size is not None
        ]
        differing = [(whose, size) for whose, size in named if size != named[0][1]]
        if differing:
            (first, size), (other, different) = named[0], differing[0]
            raise UsageError(f"{first} board_size {size} and {other} {different} differ; give one of them")
        return named[0][1] if named else DEFAULT_BOARD_SIZE

    @property
    def budget_unit(self) -> str:
        """What the budget and the checkpoints count: ``seconds`` or ``env_steps``."""
        return "seconds" if self.env_steps is None else "env_steps"

    @property
    def budget(self) -> float:
        """Each run's budget in :attr:`budget_unit`."""
        return self.minutes * 60 if self.env_steps is None else self.env_steps

    @property
    def every(self) -> float:
        """The distance between checkpoints in :attr:`budget_unit`."""
        return self.every_seconds if self.env_steps is None else self.every_env_steps

    @property
    def budget_text(self) -> str:
        """Each run's budget in words: ``15 min`` or ``20,000 env steps``."""
        return f"{self.minutes:g} min" if self.env_steps is None else f"{self.env_steps:,} env steps"

    @property
    def checkpoints_text(self) -> str:
        """The checkpoints' interval in words: ``a checkpoint every 15 s`` or ``... every 2,000 env steps``."""
        if self.env_steps is None:
            return f"a checkpoint every {self.every_seconds:g} s"
        return f"a checkpoint every {self.every_env_steps:,} env steps"

    @property
    def arms(self) -> tuple[str | None, ...]:
        """The arms each sb3_snake seed trains: :data:`ARMS` in a comparison, else one, None."""
        return (None,) if self.compare is None else ARMS

    def run_order(self) -> list[tuple[str, str | None, int]]:
        """``(system, arm, seed)`` of every run in the order they start: seed by seed, each system
        (or arm A, then arm B) in turn, so that ``parallel`` runs side by side are one seed's."""
        return [(system, arm, seed) for seed in self.seeds for system in self.systems for arm in self.arms]

    def spec(
        self, system: str, seed: int, directory: Path, total_timesteps: int | None = None, arm: str | None = None
    ) -> RunSpec:
        """The run of ``system`` (arm ``arm`` of a comparison) and ``seed`` this plan makes, in ``directory``."""
        own = self.compare if arm == "B" else self.hyperparameters
        return RunSpec(
            system,
            seed,
            self.budget,
            self.every,
            self.board_size,
            str(directory),
            self.env_file,
            own if system == "sb3_snake" else {},
            total_timesteps if system == "plain_sb3" else None,
            self.budget_unit,
            self.threads,
        )


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def run_learning_benchmark(
    plan: LearningPlan,
    work_dir: Path,
    progress: Callable[[str], None] = lambda line: None,
    run: Callable[[RunSpec, str | None], dict[str, Any]] = run_in_process,
    evaluate_run: EvaluateRun | None = None,
    calibrate: Callable[[float, int], float] = calibrate_plain_sb3,
) -> dict[str, Any]:
    """Train every run of ``plan`` (under ``work_dir``; up to ``plan.parallel`` at once, in the
    order of :meth:`LearningPlan.run_order`), evaluate the checkpoints (and the last one again
    with ``plan.final_episodes`` games), and return the JSON-ready report, with the paired
    comparison of the arms when ``plan.compare`` is set. A run whose process fails
    (:class:`RunFailed`) is listed in the report's ``failed_runs`` and the others go on, as is
    one whose checkpoints fail to play: one crash loses one run, not the benchmark. ``run``,
    ``evaluate_run`` and ``calibrate`` are the measurements, injectable for tests; ``run`` is
    called from several threads at once when ``plan.parallel`` > 1."""
    evaluate_run = evaluate_run or with_settings_of(plan.env_file)
    progress = _one_line_at_a_time(progress)
    total_timesteps = _plain_sb3_total_timesteps(plan, progress, calibrate)
    train = functools.partial(_train, plan, work_dir, progress, run, total_timesteps=total_timesteps)
    outcomes = run_in_turn([functools.partial(train, *order) for order in plan.run_order()], plan.parallel, stop_runs)
    trained = [entry for ok, entry in outcomes if ok]
    failed = [entry for ok, entry in outcomes if not ok]
    evaluated = [entry for entry in trained if _judge(plan, entry, evaluate_run, progress, failed)]
    report = {
        "benchmark": "learning",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "system": system_info(),
        "plan": asdict(plan),
        "budget": {
            "unit": plan.budget_unit,
            "total": plan.budget,
            "every": plan.every,
            "text": f"{plan.budget_text}, {plan.checkpoints_text}",
        },
        "method": _method(plan),
        "plain_sb3_total_timesteps": total_timesteps,
        "runs": evaluated,
        "failed_runs": failed,
        "summary": summarize(evaluated, by=plan.budget_unit),
    }
    if plan.compare is not None:
        report["comparison"] = compare_arms(evaluated, by=plan.budget_unit)
    return report


def _one_line_at_a_time(progress: Callable[[str], None]) -> Callable[[str], None]:
    """``progress`` for runs reporting from several threads: one line whole before the next."""
    lock = threading.Lock()

    def report(line: str) -> None:
        with lock:
            progress(line)

    return report


def _plain_sb3_total_timesteps(
    plan: LearningPlan, progress: Callable[[str], None], calibrate: Callable[[float, int], float]
) -> int | None:
    """What plain SB3's exploration schedule spans: the budget of env steps, or the env steps a
    calibration run says it reaches in the budget of minutes; None without plain SB3."""
    if "plain_sb3" not in plan.systems:
        return None
    if plan.env_steps is not None:
        return plan.env_steps
    seconds = min(CALIBRATION_SECONDS, plan.budget / 10)
    progress(f"calibrating plain SB3's env steps/s ({seconds:.0f} s, not counted)...")
    rate = calibrate(seconds, plan.board_size)
    total_timesteps = max(1, int(rate * plan.budget))
    progress(f"  {rate:,.0f} env steps/s: plain SB3 gets total_timesteps={total_timesteps:,}")
    return total_timesteps


def _train(
    plan: LearningPlan,
    work_dir: Path,
    progress: Callable[[str], None],
    run: Callable[[RunSpec, str | None], dict[str, Any]],
    system: str,
    arm: str | None,
    seed: int,
    total_timesteps: int | None,
) -> tuple[bool, dict[str, Any]]:
    """One run of the plan: ``(True, its result)``, or ``(False, why it failed)``."""
    name = system if arm is None else f"{system} {arm}"
    directory = work_dir / (f"{system}-seed{seed}" if arm is None else f"{system}-{arm}-seed{seed}")
    cache_dir = tempfile.mkdtemp(prefix="caches-", dir=work_dir) if plan.cold_cache else None
    cache = compile_cache_state(f"{cache_dir}/inductor" if cache_dir else None)
    labels = {} if arm is None else {"arm": arm}
    progress(f"{name} seed {seed}: training for {plan.budget_text} ({cache} compile cache)...")
    try:
        result = run(plan.spec(system, seed, directory, total_timesteps, arm=arm), cache_dir)
    except RunFailed as error:  # the runs done and to come still count
        progress(f"{name} seed {seed}: {error}; the other runs go on")
        return False, {"system": system, **labels, "seed": seed, "error": str(error), "compile_cache": cache}
    return True, {**result, **labels, "compile_cache": cache}


def _judge(
    plan: LearningPlan,
    entry: dict[str, Any],
    evaluate_run: EvaluateRun,
    progress: Callable[[str], None],
    failed: list[dict[str, Any]],
) -> bool:
    """Play ``entry``'s checkpoints (:func:`~.evaluation.judge_run`); False, with the failure
    added to ``failed``, when they fail to play."""
    name = entry["system"] if "arm" not in entry else f"{entry['system']} {entry['arm']}"
    progress(f"evaluating {len(entry['checkpoints'])} checkpoints of {name} seed {entry['seed']}...")
    try:
        judge_run(entry, evaluate_run, plan.episodes, plan.final_episodes, plan.budget_unit)
    except Exception as error:  # noqa: BLE001 - one run's checkpoints, not the whole benchmark
        message = f"playing the checkpoints of seed {entry['seed']} failed: {type(error).__name__}: {error}"
        progress(f"{name} seed {entry['seed']}: {message}; the other runs go on")
        labels = {key: entry[key] for key in ("arm",) if key in entry}
        failed.append(
            {
                "system": entry["system"],
                **labels,
                "seed": entry["seed"],
                "error": message,
                "compile_cache": entry["compile_cache"],
            }
        )
        return False
    return True


def _method(plan: LearningPlan) -> dict[str, str]:
    """How the report's numbers were measured, in words."""
    threads = "each system's own torch threads" if plan.threads is None else f"{plan.threads} torch thread(s) each"
    method = {
        "clock": "wall clock from before the run's process starts (imports, model build and "
        "compilation included); checkpoint saving is not counted",
        "evaluation": f"{plan.episodes} greedy games on the evaluation seeds per checkpoint, after training",
        "final_evaluation": f"the last checkpoint again, {plan.final_episodes} greedy games (the run's 'final')"
        if plan.final_episodes
        else "none",
        "parallel": f"{plan.parallel} run(s) at once, each in a process of its own, {threads}",
        "compile_cache": "fresh empty TORCHINDUCTOR_CACHE_DIR and SB3_SNAKE_CACHE_DIR per run (cold)"
        if plan.cold_cache
        else "the user's caches; each run records whether the compile cache held anything",
        "plain_sb3": "DQN('MlpPolicy', SnakeEnv()) with SB3's defaults, torch's default threads (unless the "
        "plan's), total_timesteps from a calibration run (not counted), or the budget of env steps",
        "sb3_ppo": "PPO('MlpPolicy', BatchedSnakeVecEnv(64)) with the attention extractor and "
        "sb3_snake.zoo.ppo's settings, torch's default threads (unless the plan's)",
        "pqn": "sb3-snake train --algo pqn: PQN with train's defaults (MlpPolicy, 128 games, safe exploration, "
        "fatal moves' targets, a stall as a death) on train's game, settings, threads and device, as "
        "sb3_snake with hyperparameters {'algo': 'pqn'}",
    }
    if plan.compare is not None:
        method["comparison"] = (
            "sb3_snake with plan.hyperparameters (arm A) against plan.compare (arm B) on the same seeds, "
            "run in turn (A, then B, seed by seed); the differences B - A per seed at each checkpoint"
        )
    return method
