"""The learning curve of a run, drawn from the ``episodes.json`` that training writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sb3_snake.common.errors import UsageError


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each point (fewer at the start)."""
    sums = np.cumsum(np.insert(values.astype(float), 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (sums[1:] - sums[np.arange(1, len(values) + 1) - counts]) / counts


def plot_learning_curve(run_dir: Path, output: Path | None = None, window: int = 100) -> Path:
    """Score per episode with its moving average, against env steps and against wall time.

    :return: the PNG written (``run_dir/learning_curve.png`` unless ``output`` is given).
    :raises UsageError: when ``run_dir`` holds no ``episodes.json`` or no episode.
    """
    source = Path(run_dir) / "episodes.json"
    if not source.is_file():
        raise UsageError(f"{source} does not exist; pass a run directory written by sb3-snake train")
    record = json.loads(source.read_text())
    scores = np.asarray(record["scores"])
    if len(scores) == 0:
        raise UsageError(f"{source} holds no finished episode")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    average = moving_average(scores, window)
    axes_x = {
        "env steps": np.asarray(record["env_steps"]),
        "wall time (minutes)": np.asarray(record["wall_seconds"]) / 60,
    }
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for axis, (label, x) in zip(axes, axes_x.items(), strict=True):
        axis.scatter(x, scores, s=3, alpha=0.25, color="tab:blue", label="score per episode")
        axis.plot(x, average, color="tab:orange", linewidth=2, label=f"mean of last {window}")
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("food eaten")
    axes[0].legend(loc="upper left")
    figure.suptitle(f"{Path(run_dir).name}: {len(scores)} episodes, final mean {average[-1]:.2f}")
    figure.tight_layout()
    output = Path(output) if output else Path(run_dir) / "learning_curve.png"
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output
