"""From curves to the report: time (or env steps) to each score, the score at a time, median and
spread over seeds per system or arm, the paired differences of a comparison's arms, and the tables
printed at the end (the pictures: :mod:`.pictures`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: Greedy mean scores whose time to reach the report gives.
SCORE_THRESHOLDS = (10, 20, 25, 30)
#: Counted seconds at which the report gives the greedy mean (the first target: 20 within a minute).
SCORE_AT_SECONDS = (60,)
#: A checkpoint taken this many seconds or more after the time it was due is marked late in the summary.
LATE_CHECKPOINT_SECONDS = 5.0


def time_to_score(curve: Sequence[dict[str, Any]], threshold: float, by: str = "seconds") -> float | None:
    """Counted seconds (``by="env_steps"``: env steps) of the first checkpoint whose greedy mean
    reaches ``threshold``."""
    return next((point[by] for point in curve if point["mean_score"] >= threshold), None)


def group(run: dict[str, Any]) -> str:
    """What the summary groups ``run`` under: its arm in a comparison (``A``, ``B``), else its system."""
    return run.get("arm") or run["system"]


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


def training_speed(curve: Sequence[dict[str, Any]]) -> float | None:
    """Env steps per counted second from a run's first checkpoint to its last: its speed once
    going, the process's start, imports and model build left out (a compile still under way at
    the first checkpoint is in it), so that a setting's speed is read beside its learning. None
    where fewer than two checkpoints, or no counted time, lie between."""
    timed = [point for point in curve if "env_steps" in point and "seconds" in point]
    if len(timed) < 2 or timed[-1]["seconds"] <= timed[0]["seconds"]:
        return None
    return (timed[-1]["env_steps"] - timed[0]["env_steps"]) / (timed[-1]["seconds"] - timed[0]["seconds"])


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


def summarize(
    runs: Sequence[dict[str, Any]], thresholds: Sequence[float] = SCORE_THRESHOLDS, by: str = "seconds"
) -> dict[str, Any]:
    """Per system (per arm in a comparison): time to each threshold (median and spread over
    seeds), the score at :data:`SCORE_AT_SECONDS`, the last checkpoint's score and the final
    evaluation's, and the speed between the first checkpoint and the last (:func:`training_speed`).

    :param by: the budget's unit: ``seconds`` gives ``seconds_to_score`` and ``mean_score_at``;
        ``env_steps`` gives ``env_steps_to_score`` and no score at a time.
    """
    summary: dict[str, Any] = {}
    for name in dict.fromkeys(group(run) for run in runs):
        own = [run for run in runs if group(run) == name]
        finals = [run["curve"][-1]["mean_score"] if run["curve"] else 0.0 for run in own]
        at = {seconds: [score_at(run["curve"], seconds) for run in own] for seconds in SCORE_AT_SECONDS}
        entry = summary[name] = {
            "seeds": [run["seed"] for run in own],
            f"{by}_to_score": {
                str(threshold): spread([time_to_score(run["curve"], threshold, by) for run in own])
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
        if by != "seconds":
            del entry["mean_score_at"]
        speeds = [speed for speed in map(training_speed, (run["curve"] for run in own)) if speed is not None]
        if speeds:
            entry["env_steps_per_second"] = _median_min_max(speeds)
        final_evaluations = [run["final"] for run in own if "final" in run]
        if final_evaluations:
            entry["final_evaluation"] = {
                "episodes": final_evaluations[0]["episodes"],
                "seeds": len(final_evaluations),
                "mean_score": _median_min_max([point["mean_score"] for point in final_evaluations]),
                "win_rate": _median_min_max([point.get("win_rate", 0.0) for point in final_evaluations]),
            }
    return summary


def paired_differences(
    pairs: Mapping[int, tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]], by: str = "env_steps"
) -> list[dict[str, Any]]:
    """Arm B against arm A, seed by seed: at each checkpoint, the difference B - A of each seed's
    greedy mean score and win rate, and their mean, min and max over the seeds.

    :param pairs: per seed, the curves of arm A and of arm B (points with ``mean_score``,
        ``win_rate`` and ``by``).
    :param by: what matches a checkpoint of A with one of B: its due point ``due_<by>`` (else
        ``<by>``), ``env_steps`` or ``seconds``.
    :return: one entry per point that both arms of at least one seed reached, in order:
        ``{by: point, "seeds": [...], "mean_score": {"per_seed", "mean", "min", "max"},
        "win_rate": {...}}``.
    """

    def point_of(point: dict[str, Any]) -> float:
        return point.get(f"due_{by}", point[by])

    matched: dict[float, list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
    for seed, (curve_a, curve_b) in pairs.items():
        of_b = {point_of(point): point for point in curve_b}
        for point in curve_a:
            if point_of(point) in of_b:
                matched.setdefault(point_of(point), []).append((seed, point, of_b[point_of(point)]))
    return [
        {
            by: at,
            "seeds": [seed for seed, _, _ in seeds],
            **{
                metric: _differences([b.get(metric, 0.0) - a.get(metric, 0.0) for _, a, b in seeds])
                for metric in ("mean_score", "win_rate")
            },
        }
        for at, seeds in sorted(matched.items())
    ]


def _differences(values: Sequence[float]) -> dict[str, Any]:
    return {"per_seed": list(values), "mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def compare_arms(runs: Sequence[dict[str, Any]], by: str = "env_steps") -> dict[str, Any]:
    """The paired report of a comparison's evaluated ``runs`` (each with its ``arm``): the
    :func:`paired_differences` of their curves and of their final evaluations, over the seeds
    whose two arms were both evaluated."""
    arms = {(run["arm"], run["seed"]): run for run in runs}
    seeds = [seed for arm, seed in arms if arm == "A" and ("B", seed) in arms]
    finals = {
        seed: ([arms["A", seed]["final"]], [arms["B", seed]["final"]])
        for seed in seeds
        if "final" in arms["A", seed] and "final" in arms["B", seed]
    }
    final = paired_differences(finals, by)
    return {
        "by": by,
        "seeds": seeds,
        "checkpoints": paired_differences(
            {seed: (arms["A", seed]["curve"], arms["B", seed]["curve"]) for seed in seeds}, by
        ),
        "final": {"episodes": next(iter(finals.values()))[0][0]["episodes"], **final[0]} if final else None,
    }


def _median_min_max(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def format_summary(report: dict[str, Any]) -> str:
    """The budget, then per system (per arm): the time (env steps, on a budget of env steps) to
    each score, the score at :data:`SCORE_AT_SECONDS` (on a budget of minutes) and at the end,
    median over seeds and spread, the speed and the final evaluation; then a comparison's paired table
    (:func:`format_comparison`) and the runs that failed."""
    by = report.get("budget", {}).get("unit", "seconds")
    at_times = SCORE_AT_SECONDS if by == "seconds" else ()
    width = 18 if by == "seconds" else 26

    def reach(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}s" if by == "seconds" else f"{value:,.0f}"

    late: list[str] = []  # "at T s" cells holding a checkpoint taken well after T

    def scores_at(name: str, seconds_at: int, cell: dict[str, float] | None) -> str:
        if cell is None or cell["latest_taken_seconds"] <= seconds_at + LATE_CHECKPOINT_SECONDS:
            return _scores(cell)
        late.append(f"{name} at {seconds_at} s: the last of them taken at {cell['latest_taken_seconds']:.0f} s")
        return _scores(cell) + "*"

    lines = [f"budget: {report['budget']['text']} per run"] if "budget" in report else []
    lines.append(
        f"{'system':<10} "
        + " ".join(f"{'to ' + str(t):>{width}}" for t in SCORE_THRESHOLDS)
        + "".join(f"   {'at ' + str(t) + ' s':>19}" for t in at_times)
        + f"   {'final score':<21} {'win rate':>9}   {'longest':>7}"
    )
    for name, entry in report["summary"].items():
        cells = []
        for threshold in SCORE_THRESHOLDS:
            cell = entry[f"{by}_to_score"][str(threshold)]
            if cell["min"] is None:
                cells.append(f"never {cell['reached']}")
            else:
                cells.append(f"{reach(cell['median'])} ({reach(cell['min'])}-{reach(cell['max'])}) {cell['reached']}")
        at = entry.get("mean_score_at", {})
        lines.append(
            f"{name:<10} "
            + " ".join(f"{cell:>{width}}" for cell in cells)
            + "".join(f"   {scores_at(name, t, at.get(str(t))):>19}" for t in at_times)
            + f"   {_scores(entry['final_mean_score']):<21}"
            + f" {_win_rate(entry.get('final_win_rate')):>9}   {entry.get('longest_snake', '-'):>7}"
        )
    lines.append(_legend(by))
    if late:
        lines.append(
            "* checkpoints due by then but taken later, after a long step (such as a compile): " + "; ".join(late)
        )
    for name, entry in report["summary"].items():
        if "env_steps_per_second" in entry:
            speed = entry["env_steps_per_second"]
            lines.append(
                f"speed of {name} from its first checkpoint to its last: {speed['median']:,.0f} env steps/s "
                f"({speed['min']:,.0f}-{speed['max']:,.0f})"
            )
        if "final_evaluation" in entry:
            final = entry["final_evaluation"]
            lines.append(
                f"final evaluation of {name} ({final['episodes']} greedy games of the last checkpoint; "
                f"seeds: {final['seeds']}): mean score {_scores(final['mean_score'])}, "
                f"win rate {_win_rate(final['win_rate'])}"
            )
    if report.get("comparison"):
        lines.append(format_comparison(report["comparison"]))
    lines.extend(f"failed, not in the figures above: {failure['error']}" for failure in report.get("failed_runs", []))
    return "\n".join(lines)


def _scores(cell: dict[str, float] | None) -> str:
    return "-" if cell is None else f"{cell['median']:.2f} ({cell['min']:.2f}-{cell['max']:.2f})"


def _win_rate(cell: dict[str, float] | None) -> str:
    return "-" if cell is None else f"{cell['median']:.0%}"


def _legend(by: str) -> str:
    if by == "seconds":
        reach = "median seconds to a greedy mean of N (fastest-slowest seed, '-' where one never got there)"
        at = "at T s: median greedy mean (lowest-highest seed) of each seed's last checkpoint due by T s;\n"
    else:
        reach = "median env steps to a greedy mean of N (fewest-most of a seed, '-' where one never got there)"
        at = ""
    return (
        f"to N: {reach}, seeds that got there;\n{at}"
        "win rate: median share of the last checkpoint's games that filled the board; "
        "longest: the longest snake of any game played"
    )


def format_comparison(comparison: dict[str, Any]) -> str:
    """The paired table of a comparison (:func:`compare_arms`): at each checkpoint and for the
    final evaluation, the mean over seeds of B - A and the lowest and highest seed's."""
    by = comparison["by"]
    seeds = ", ".join(str(seed) for seed in comparison["seeds"]) or "none"
    lines = [
        f"B - A, seed by seed (seeds {seeds}; A: the plan's hyperparameters, B: the compared ones):",
        f"{by.replace('_', ' '):>16}   {'mean score: mean (min to max)':<34} win rate: mean (min to max)",
    ]
    rows = [(f"{point[by]:,.0f}", point) for point in comparison["checkpoints"]]
    if comparison.get("final"):
        rows.append((f"final, {comparison['final']['episodes']} games", comparison["final"]))
    for label, point in rows:
        score, wins = point["mean_score"], point["win_rate"]
        scores = f"{score['mean']:+.2f} ({score['min']:+.2f} to {score['max']:+.2f})"
        lines.append(f"{label:>16}   {scores:<34} {wins['mean']:+.1%} ({wins['min']:+.1%} to {wins['max']:+.1%})")
    return "\n".join(lines)
