"""Settings measured on the machine that runs them: resolving ``auto``.

``OPTIMAL_BATCH_SIZE`` (the batch size, a learning value given beside the settings),
``USE_BF16``, ``USE_FLASH_ATTENTION`` (with ``SDPA_BACKEND``) and ``USE_TORCH_COMPILE`` accept
``auto``. What is fastest differs between machines (bf16 pays only
where the hardware computes it natively, and not on every such machine; which attention kernel
wins changes with the CPU), so a value measured once and committed is wrong somewhere else.
:func:`resolve_auto` replaces each ``auto`` by a value chosen from a short measurement of the
gradient step of the very policy the run trains, at the thread count it trains with.

The package, in the order a resolution runs:

- :mod:`~sb3_snake.autotune.resolve`: :func:`resolve_auto`, the entry: a cached
  choice, or a search whose choice is cached; then each ``auto`` replaced, its source the evidence.
- :mod:`~sb3_snake.autotune.search`: the stages, their candidates and margins, pure
  given a measurement (tests inject one), and what the device offers (:class:`Machine`).
- :mod:`~sb3_snake.autotune.measure`: the real measurement of a candidate, samples/s
  of ``SnakeDQN.train`` timed by the one timing harness, :mod:`sb3_snake.common.timing`.
- :mod:`~sb3_snake.autotune.cache`: where a choice is kept, under which key.
"""

from sb3_snake.autotune.cache import cache_key, cache_path
from sb3_snake.autotune.measure import GradientStepMeter, fill_replay_buffer, filled_model
from sb3_snake.autotune.resolve import CONTENDED_CORES, Resolved, apply_choice, resolve_auto
from sb3_snake.autotune.search import (
    BATCH_CANDIDATES,
    BATCH_TOLERANCE,
    COMPILE_MARGIN,
    PLAIN_MARGIN,
    ROUNDS,
    Candidate,
    Machine,
    Measure,
    batch_candidates,
    search,
    smallest_fast_enough,
)
from sb3_snake.common.paths import CACHE_ENV, cache_dir

__all__ = [
    "BATCH_CANDIDATES",
    "BATCH_TOLERANCE",
    "CACHE_ENV",
    "COMPILE_MARGIN",
    "CONTENDED_CORES",
    "PLAIN_MARGIN",
    "ROUNDS",
    "Resolved",
    "Candidate",
    "GradientStepMeter",
    "Machine",
    "Measure",
    "apply_choice",
    "batch_candidates",
    "cache_dir",
    "cache_key",
    "cache_path",
    "fill_replay_buffer",
    "filled_model",
    "resolve_auto",
    "search",
    "smallest_fast_enough",
]
