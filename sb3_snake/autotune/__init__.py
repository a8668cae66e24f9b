"""Settings measured on the machine that runs them: resolving ``auto``.

``OPTIMAL_BATCH_SIZE`` (a learning value, given beside the settings), ``USE_BF16``, ``USE_FLASH_ATTENTION``
(with ``SDPA_BACKEND``) and ``USE_TORCH_COMPILE`` accept ``auto``: :func:`resolve_auto` replaces each by the
value chosen from a short measurement of the gradient step of the very policy the run trains, at the thread
count it trains with. In the order a resolution runs: :mod:`~sb3_snake.autotune.resolve` (the entry: a cached
choice, or a search whose choice is cached), :mod:`~sb3_snake.autotune.search` (stages, candidates and margins,
pure given a measurement; :class:`Machine`), :mod:`~sb3_snake.autotune.measure` (samples/s of
``SnakeDQN.train``, timed by :mod:`sb3_snake.common.timing`), :mod:`~sb3_snake.autotune.cache` (where a choice
is kept, under which key). Design notes: docs/design-notes.md, "sb3_snake/autotune/__init__.py".
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
