"""The learning curve of a run, drawn from the ``episodes.json`` that training writes.

``episodes.json`` is read as input: whatever it holds (a truncated write, an edit, another
program's file), a file that is not what training writes is one UsageError naming it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import atomic_write, check_writable_file, read_json

#: The lists of ``episodes.json`` that the plot draws, one number per finished episode.
PLOTTED = ("scores", "env_steps", "wall_seconds")


def save_png(figure: Any, output: Path) -> None:
    """Lay ``figure`` out and write it to ``output`` as a PNG, atomically: a failed write leaves
    no partial image."""
    figure.tight_layout()
    with atomic_write(output) as temporary:
        figure.savefig(temporary, dpi=100, format="png")


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each point (fewer at the start)."""
    sums = np.cumsum(np.insert(values.astype(float), 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (sums[1:] - sums[np.arange(1, len(values) + 1) - counts]) / counts


def _is_finite_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def read_episodes(source: Path) -> dict[str, np.ndarray]:
    """The :data:`PLOTTED` lists of an ``episodes.json``, checked: one UsageError naming ``source``
    for a file that is not a JSON object of equally long lists of finite numbers."""
    fix = "plot a run folder written by sb3-snake train"
    record = read_json(source, fix, what="the JSON that training writes")
    if not isinstance(record, dict):
        raise UsageError(f"{source} holds a JSON {type(record).__name__}, not an object of episode lists; {fix}")
    columns = {}
    for name in PLOTTED:
        values = record.get(name)
        if name not in record:
            raise UsageError(f"{source} has no {name!r} list; {fix}")
        if not isinstance(values, list) or not all(_is_finite_number(value) for value in values):
            raise UsageError(f"{source}: {name!r} is not a list of finite numbers; {fix}")
        columns[name] = np.asarray(values, dtype=float)
    if len({len(values) for values in columns.values()}) > 1:
        counts = ", ".join(f"{len(values)} {name}" for name, values in columns.items())
        raise UsageError(f"{source} holds lists of different lengths ({counts}); {fix}")
    return columns


def plot_learning_curve(run_dir: Path, output: Path | None = None, window: int = 100) -> Path:
    """Score per episode with its moving average, against env steps and against wall time.

    The PNG is checked before drawing and written atomically, so a failed write leaves no
    partial image.

    :return: the PNG written (``run_dir/learning_curve.png`` unless ``output`` is given).
    :raises UsageError: when ``run_dir`` holds no valid ``episodes.json`` or no episode, or
        ``output`` cannot be written.
    :raises OutputError: when writing the PNG fails (a full disk).
    """
    if window < 1:
        raise UsageError(f"window must be at least 1, got {window}")
    if output is not None:  # an output the user named is checked before anything is read
        check_writable_file(Path(output), (".png",), what="plot output")
    output = Path(output) if output else Path(run_dir) / "learning_curve.png"
    record = read_episodes(Path(run_dir) / "episodes.json")
    scores = record["scores"]
    if len(scores) == 0:
        raise UsageError(f"{Path(run_dir) / 'episodes.json'} holds no finished episode")
    check_writable_file(output, (".png",), what="plot output")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    average = moving_average(scores, window)
    axes_x = {"env steps": record["env_steps"], "wall time (minutes)": record["wall_seconds"] / 60}
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    try:
        for axis, (label, x) in zip(axes, axes_x.items(), strict=True):
            axis.scatter(x, scores, s=3, alpha=0.25, color="tab:blue", label="score per episode")
            axis.plot(x, average, color="tab:orange", linewidth=2, label=f"mean of last {window}")
            axis.set_xlabel(label)
            axis.grid(alpha=0.3)
        axes[0].set_ylabel("food eaten")
        axes[0].legend(loc="upper left")
        figure.suptitle(f"{Path(run_dir).name}: {len(scores)} episodes, final mean {average[-1]:.2f}")
        save_png(figure, output)
    finally:
        plt.close(figure)
    return output
