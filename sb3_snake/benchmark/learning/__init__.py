"""``sb3-snake benchmark-learning``: greedy score against wall-clock minutes, or env steps.

Each run (a system and a seed) trains in a fresh process of its own (:mod:`.runs`), the clock started before
it, with empty caches while ``cold_cache`` is on; the model is saved every ``every_seconds`` of counted time,
saving taken off the clock (:class:`Stopwatch`, :mod:`.clock`); after all training every checkpoint plays
``episodes`` greedy games on the same evaluation seeds (:mod:`.plan`). Systems (:data:`SYSTEMS`): ``sb3_snake``
through :func:`sb3_snake.training.run.train`, SB3's DQN and PPO as their users run them, and the package's PQN.
The report (:mod:`.summary`): time to each of :data:`SCORE_THRESHOLDS`, the score at :data:`SCORE_AT_SECONDS`,
the final score, the speed; pictures (:mod:`.pictures`). The research loop (:class:`LearningPlan`): env-step
budgets (:class:`Checkpoints`), ``parallel`` runs (:mod:`.schedule`), arms seed by seed (:func:`paired_differences`),
a final evaluation (:mod:`.evaluation`). Design notes: docs/design-notes.md, "sb3_snake/benchmark/learning/__init__.py".
"""

from sb3_snake.benchmark.learning.clock import BUDGET_UNITS, Checkpoints, Stopwatch
from sb3_snake.benchmark.learning.evaluation import evaluate_checkpoints, judge_run
from sb3_snake.benchmark.learning.pictures import plot_learning_benchmark, plot_reports, read_report, report_files
from sb3_snake.benchmark.learning.plan import (
    ARMS,
    DEFAULT_SYSTEMS,
    FINAL_EPISODES,
    SYSTEMS,
    LearningPlan,
    run_learning_benchmark,
    seed_range,
)
from sb3_snake.benchmark.learning.runs import (
    CALIBRATION_SECONDS,
    RunFailed,
    RunSpec,
    calibrate_plain_sb3,
    compile_cache_state,
    run_in_process,
    run_system,
    stop_runs,
)
from sb3_snake.benchmark.learning.schedule import run_in_turn
from sb3_snake.benchmark.learning.summary import (
    LATE_CHECKPOINT_SECONDS,
    SCORE_AT_SECONDS,
    SCORE_THRESHOLDS,
    compare_arms,
    format_comparison,
    format_summary,
    paired_differences,
    score_at,
    spread,
    summarize,
    time_to_score,
    training_speed,
)

__all__ = [
    "ARMS",
    "BUDGET_UNITS",
    "CALIBRATION_SECONDS",
    "FINAL_EPISODES",
    "LATE_CHECKPOINT_SECONDS",
    "SCORE_AT_SECONDS",
    "SCORE_THRESHOLDS",
    "DEFAULT_SYSTEMS",
    "SYSTEMS",
    "Checkpoints",
    "LearningPlan",
    "RunFailed",
    "RunSpec",
    "Stopwatch",
    "calibrate_plain_sb3",
    "compare_arms",
    "compile_cache_state",
    "evaluate_checkpoints",
    "format_comparison",
    "format_summary",
    "judge_run",
    "paired_differences",
    "plot_learning_benchmark",
    "plot_reports",
    "read_report",
    "report_files",
    "run_in_process",
    "run_in_turn",
    "run_learning_benchmark",
    "run_system",
    "score_at",
    "seed_range",
    "spread",
    "stop_runs",
    "summarize",
    "time_to_score",
    "training_speed",
]
