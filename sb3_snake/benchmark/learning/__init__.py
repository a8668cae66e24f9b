"""``sb3-snake benchmark-learning``: greedy score against wall-clock minutes, or env steps.

The number a user feels is how soon the agent plays well, so this benchmark trains for a
wall-clock budget and judges the models saved along the way:

1. Each run (a system and a seed) trains in a process of its own (:mod:`.runs`), started
   fresh, so that every run pays what a user pays: importing torch and SB3, building the
   model, compiling it. The clock starts before the process does. With ``cold_cache`` (the
   default) each run gets empty caches: ``TORCHINDUCTOR_CACHE_DIR``, so compilation starts
   from nothing, and ``SB3_SNAKE_CACHE_DIR``, so ``auto`` settings are measured as on a
   machine's first run; otherwise the user's caches are used and the result records whether
   the compile cache held anything.
2. Every ``every_seconds`` of counted time the model is saved; the time spent saving is taken
   off the clock (:class:`Stopwatch`, in :mod:`.clock`), so checkpoints cost the run nothing.
   Training stops when the counted time reaches the budget, with a last checkpoint.
3. After all training, every checkpoint plays ``episodes`` greedy games on the evaluation seeds
   (the same games for each), and the run's curve is greedy mean score against minutes
   (:mod:`.plan` runs the whole).

Two systems run the same way: ``sb3_snake`` is ``sb3-snake train`` with the ``.env`` settings
and the default config (or a hyperparameter file, checked before any run, whose ``board_size`` is
every system's board), through :func:`sb3_snake.training.run.train`;
``plain_sb3`` is what a user would otherwise write, ``DQN("MlpPolicy", SnakeEnv())`` with SB3's
defaults. SB3's exploration schedule is a fraction of ``total_timesteps``, so plain SB3 is given
the env steps it reaches in the budget, at the rate measured by a short calibration run before
the benchmark (not counted): the total a user who sized the run to the budget would pass.

The report (:mod:`.summary`) gives, per system, the time each seed first reached a greedy mean
of 10, 20, 25 and 30 (:data:`SCORE_THRESHOLDS`), their median and spread, the greedy mean at
60 s (:data:`SCORE_AT_SECONDS`) and the final score. Each checkpoint records both the point it
fell due at (``due_seconds``: every ``every_seconds``, and the budget) and the counted time it
was taken (``seconds``, the first env step at or after its point, later where a step was long,
such as one that compiled); the score "at 60 s" is that of the last checkpoint due at or before
60 s, and the report gives the latest time such a checkpoint was really taken beside it.

The research loop (:class:`LearningPlan`): a budget of env steps instead of minutes
(``env_steps``, checkpoints every ``every_env_steps``, by :class:`Checkpoints` counting env steps
instead of seconds), which no machine's speed or load changes; up to ``parallel`` runs at once,
each in its own process with one torch thread (:mod:`.schedule`), whose results do not depend on
how many run at once; two arms compared seed by seed (``compare``: sb3_snake with the plan's
hyperparameters as arm A against the compared ones as arm B, in turn), with the paired
differences B - A of each checkpoint (:func:`paired_differences`); and a final evaluation of
each run's last checkpoint with more games (``final_episodes``, :mod:`.evaluation`).
"""

from sb3_snake.benchmark.learning.clock import BUDGET_UNITS, Checkpoints, Stopwatch
from sb3_snake.benchmark.learning.evaluation import evaluate_checkpoints, judge_run
from sb3_snake.benchmark.learning.plan import (
    ARMS,
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
    plot_learning_benchmark,
    score_at,
    spread,
    summarize,
    time_to_score,
)

__all__ = [
    "ARMS",
    "BUDGET_UNITS",
    "CALIBRATION_SECONDS",
    "FINAL_EPISODES",
    "LATE_CHECKPOINT_SECONDS",
    "SCORE_AT_SECONDS",
    "SCORE_THRESHOLDS",
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
]
