"""From curves to the report: time to each score, the score at a time, median and spread over
seeds per system, the table printed at the end, and the picture."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sb3_snake.common.system import cpu_description

#: Greedy mean scores whose time to reach the report gives.
SCORE_THRESHOLDS = (10, 20, 25, 30)
#: Counted seconds at which the report gives the greedy mean (the first target: 20 within a minute).
SCORE_AT_SECONDS = (60,)
#: A checkpoint taken this many seconds or more after the time it was due is marked late in the summary.
LATE_CHECKPOINT_SECONDS = 5.0


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
            # Reports from before the win rate was recorded have neither: 0.
            "final_win_rate": _median_min_max(
                [run["curve"][-1].get("win_rate", 0.0) if run["curve"] else 0.0 for run in own]
            ),
            "longest_snake": max((point.get("max_length", 0) for run in own for point in run["curve"]), default=0),
            "env_steps": {"median": statistics.median(run["env_steps"] for run in own)},
        }
    return summary


def _median_min_max(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def plot_learning_benchmark(report: dict[str, Any], output: Path) -> Path:
    """Greedy mean score against minutes, one line per seed, a colour per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"sb3_snake": "tab:orange", "plain_sb3": "tab:blue", "sb3_ppo": "tab:green"}
    labels = {
        "sb3_snake": "sb3-snake train",
        "plain_sb3": 'plain SB3 DQN("MlpPolicy")',
        "sb3_ppo": "SB3 PPO, attention extractor, batched env",
    }
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
    cpu = cpu_description(system["cpu"], system.get("cpu_id"))
    axis.set_title(f"{cpu}, {system['cpu_cores']} cores, torch {system['torch']}", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def format_summary(report: dict[str, Any]) -> str:
    """The time to each score and the score at :data:`SCORE_AT_SECONDS` and at the end, per
    system: median over seeds and spread."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}s"

    def scores(cell: dict[str, float] | None) -> str:
        return "-" if cell is None else f"{cell['median']:.2f} ({cell['min']:.2f}-{cell['max']:.2f})"

    def win_rate(cell: dict[str, float] | None) -> str:
        return "-" if cell is None else f"{cell['median']:.0%}"

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
        + f"   {'final score':<21} {'win rate':>9}   {'longest':>7}"
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
            + f"   {scores(entry['final_mean_score']):<21}"
            + f" {win_rate(entry.get('final_win_rate')):>9}   {entry.get('longest_snake', '-'):>7}"
        )
    lines.append(
        "to N: median seconds to a greedy mean of N (fastest-slowest seed, '-' where one never got there), "
        "seeds that got there;\n"
        "at T s: median greedy mean (lowest-highest seed) of each seed's last checkpoint due by T s;\n"
        "win rate: median share of the last checkpoint's games that filled the board; "
        "longest: the longest snake of any game played"
    )
    if late:
        lines.append(
            "* checkpoints due by then but taken later, after a long step (such as a compile): " + "; ".join(late)
        )
    lines.extend(f"failed, not in the figures above: {failure['error']}" for failure in report.get("failed_runs", []))
    return "\n".join(lines)
