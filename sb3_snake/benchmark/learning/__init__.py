"""``sb3-snake benchmark-learning``: greedy score against wall-clock minutes.

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
"""

from sb3_snake.benchmark.learning.clock import Stopwatch, WallClockCheckpoints
from sb3_snake.benchmark.learning.plan import (
    SYSTEMS,
    LearningPlan,
    compile_cache_state,
    evaluate_checkpoints,
    run_learning_benchmark,
    seed_range,
)
from sb3_snake.benchmark.learning.runs import (
    CALIBRATION_SECONDS,
    RunFailed,
    RunSpec,
    calibrate_plain_sb3,
    run_in_process,
    run_system,
)
from sb3_snake.benchmark.learning.summary import (
    LATE_CHECKPOINT_SECONDS,
    SCORE_AT_SECONDS,
    SCORE_THRESHOLDS,
    format_summary,
    plot_learning_benchmark,
    score_at,
    spread,
    summarize,
    time_to_score,
)

__all__ = [
    "CALIBRATION_SECONDS",
    "LATE_CHECKPOINT_SECONDS",
    "SCORE_AT_SECONDS",
    "SCORE_THRESHOLDS",
    "SYSTEMS",
    "LearningPlan",
    "RunFailed",
    "RunSpec",
    "Stopwatch",
    "WallClockCheckpoints",
    "calibrate_plain_sb3",
    "compile_cache_state",
    "evaluate_checkpoints",
    "format_summary",
    "plot_learning_benchmark",
    "run_in_process",
    "run_learning_benchmark",
    "run_system",
    "score_at",
    "seed_range",
    "spread",
    "summarize",
    "time_to_score",
]
