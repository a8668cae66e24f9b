"""The pictures of learning benchmarks: one report's curves, drawn beside its JSON, and the runs of
several reports drawn together (``sb3-snake plot FILE...``), one colour per arm, against wall-clock
minutes and against env steps, so that the seeds of one setting split over sessions or machines,
or the arms of runs made in pairs, read as one picture."""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sb3_snake.benchmark.learning.summary import SCORE_THRESHOLDS, group
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_file, read_json
from sb3_snake.common.system import cpu_description
from sb3_snake.training.plotting import save_png

#: Each system's and comparison arm's colour and legend, the same in every picture.
COLOURS = {
    "sb3_snake": "tab:orange",
    "plain_sb3": "tab:blue",
    "sb3_ppo": "tab:green",
    "pqn": "tab:red",
    "A": "tab:blue",
    "B": "tab:orange",
}
LABELS = {
    "sb3_snake": "sb3-snake train",
    "plain_sb3": 'plain SB3 DQN("MlpPolicy")',
    "sb3_ppo": "SB3 PPO, attention extractor, batched env",
    "pqn": "sb3-snake PQN, LayerNorm MLP, 128 games",
    "A": "A: sb3-snake train (its hyperparameters)",
    "B": "B: the compared hyperparameters",
}
#: The colours of the other arms (a label the user gave), in the order they are handed out.
PALETTE = tuple(
    f"tab:{name}" for name in ("blue", "orange", "green", "red", "purple", "brown", "pink", "gray", "olive", "cyan")
)
#: The x of each panel: a curve point's key, and the axis's words.
AXES = {
    "minutes": "wall-clock minutes (imports and compilation included)",
    "env_steps": "env steps (all games together)",
}
#: What to give instead, said after every problem with a file.
FIX = "give JSON files written by sb3-snake benchmark-learning"

#: One line of a picture: its arm (one colour and one legend entry per arm) and its curve.
Line = tuple[str, Sequence[dict[str, Any]]]


def plot_learning_benchmark(report: dict[str, Any], output: Path) -> Path:
    """Greedy mean score against minutes (env steps, on a budget of env steps), one line per
    seed, a colour per system (per arm in a comparison): the picture beside a report."""
    x = "env_steps" if report.get("budget", {}).get("unit") == "env_steps" else "minutes"
    lines = [(group(run), run["curve"]) for run in report["runs"]]
    legend = {arm: LABELS.get(arm, arm) for arm, _ in lines}
    return _draw([x], lines, legend, _episodes([report]), _machine(report.get("system")), output)


def report_files(items: Sequence[str]) -> list[tuple[str | None, Path]]:
    """The files ``items`` name, in order, each with the label of its arm.

    An item is a ``FILE`` (label None: its runs' arms are their own systems, or A and B) or
    ``LABEL=PATTERN``: a glob (``*``, ``?``, ``[...]``, ``**``) whose files all draw as the arm
    ``LABEL``, so that a setting run seed by seed, a file each, is one colour. An existing file
    whose name holds ``=`` is a file; a ``FILE`` the shell left unexpanded is globbed here.

    :raises UsageError: for an empty label or pattern, or a pattern that matches no file.
    """
    files: list[tuple[str | None, Path]] = []
    for item in items:
        label, separator, pattern = item.partition("=")
        if not separator or os.path.exists(item):  # False, not an error, for a name too long
            label, pattern = "", item
        elif not label.strip() or not pattern:
            raise UsageError(f"{item!r}: an arm is LABEL=PATTERN, both non-empty, such as 'new=learning_*-new-*.json'")
        matched = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise UsageError(f"no file matches {pattern}" + (f" (the arm {label!r})" if label else "") + f"; {FIX}")
        files.extend((label or None, Path(path)) for path in matched)
    return files


def plot_reports(files: Sequence[tuple[str | None, Path]], output: Path) -> Path:
    """Every run of every file drawn together, each from (0, 0), against minutes and against env
    steps; a picture's title names each machine the files ran on.

    A run's arm is its file's label (with the run's system or arm after it where the file holds
    several), else its own system or arm, so that runs of one system split over files by
    ``--first-seed`` share a colour without a label.

    :param files: ``(label, path)``, as :func:`report_files` gives them.
    :raises UsageError: when ``output`` cannot be written, a file is not a benchmark-learning
        report (:func:`read_report`), or the files hold no run (every one failed).
    """
    check_writable_file(output, (".png",), what="plot output")
    reports = [(label, read_report(path)) for label, path in files]
    lines: list[Line] = []
    legend: dict[str, str] = {}
    for label, report in reports:
        several = len({group(run) for run in report["runs"]}) > 1
        for run in report["runs"]:
            arm = group(run) if label is None else f"{label}: {group(run)}" if several else label
            legend.setdefault(arm, LABELS.get(arm, arm) if label is None else arm)
            lines.append((arm, run["curve"]))
    if not lines:
        raise UsageError(f"the {len(files)} file(s) hold no run to draw (every run failed); {FIX}")
    machines = "; ".join(dict.fromkeys(_machine(report.get("system")) for _, report in reports))
    return _draw(list(AXES), lines, legend, _episodes([report for _, report in reports]), machines, output)


def read_report(path: Path) -> dict[str, Any]:
    """The benchmark-learning report in ``path``, checked as far as drawing it needs; one
    UsageError naming ``path`` for anything else (a missing file, a folder, not JSON, another
    benchmark's JSON, a curve without numbers)."""
    report = read_json(path, FIX, kind="benchmark-learning file")
    problem = _report_problem(report)
    if problem:
        raise UsageError(f"{path} is not a benchmark-learning report: {problem}; {FIX}")
    return report


def _report_problem(report: Any) -> str:
    """What keeps ``report`` from being drawn, or '' when nothing does."""
    if not isinstance(report, dict) or report.get("benchmark") != "learning":
        return 'it has no "benchmark": "learning"'
    runs = report.get("runs")
    if not isinstance(runs, list) or not all(_is_run(run) for run in runs):
        return "its runs are not a list of runs, each with a system and a curve"
    for run in runs:
        for point in run["curve"]:
            if not isinstance(point, dict) or not all(_finite(point.get(key)) for key in ("mean_score", *AXES)):
                return f"a point of the {group(run)} run of seed {run.get('seed')} lacks a number for one of " + (
                    ", ".join(("mean_score", *AXES))
                )
    return ""


def _is_run(run: Any) -> bool:
    return (
        isinstance(run, dict)
        and isinstance(run.get("system"), str)
        and isinstance(run.get("arm", ""), str)
        and isinstance(run.get("curve"), list)
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _machine(system: Any) -> str:
    """``AMD EPYC, 2 cores, torch 2.13.0+cpu``: what a report's ``system`` says of its machine."""
    system = system if isinstance(system, dict) else {}
    cpu = cpu_description(str(system.get("cpu", "unknown CPU")), system.get("cpu_id"))
    return f"{cpu}, {system.get('cpu_cores', '?')} cores, torch {system.get('torch', '?')}"


def _episodes(reports: Sequence[dict[str, Any]]) -> str:
    """The greedy games per checkpoint of ``reports``: ``100``, or ``100/200`` where they differ."""
    plans = [report.get("plan") for report in reports]
    counts = dict.fromkeys(str(plan["episodes"]) for plan in plans if isinstance(plan, dict) and "episodes" in plan)
    return "/".join(counts) or "?"


def arm_colours(arms: Sequence[str]) -> dict[str, str]:
    """Each arm's colour: its system's or comparison arm's own (:data:`COLOURS`) while no other
    arm has taken it, else the first of :data:`PALETTE` still free."""
    colours: dict[str, str] = {}
    for arm in dict.fromkeys(arms):
        free = [colour for colour in PALETTE if colour not in colours.values()]
        own = COLOURS.get(arm)
        colours[arm] = own if own in free else free[0] if free else PALETTE[len(colours) % len(PALETTE)]
    return colours


def _draw(
    panels: Sequence[str], lines: Sequence[Line], legend: dict[str, str], episodes: str, title: str, output: Path
) -> Path:
    """Draw ``lines`` (each from (0, 0)) in one panel per x of ``panels`` and write the PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    colours = arm_colours([arm for arm, _ in lines])
    figure, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 4.5), squeeze=False)
    try:
        for axis, x in zip(axes[0], panels, strict=True):
            drawn: set[str] = set()
            for arm, curve in lines:
                xs = [0.0] + [point[x] for point in curve]
                scores = [0.0] + [point["mean_score"] for point in curve]
                axis.plot(xs, scores, color=colours[arm], alpha=0.8, label=None if arm in drawn else legend[arm])
                drawn.add(arm)
            for threshold in SCORE_THRESHOLDS:
                axis.axhline(threshold, color="gray", linewidth=0.5, linestyle=":")
            axis.set_xlabel(AXES[x])
            axis.set_ylabel(f"greedy mean score ({episodes} games)")
            axis.grid(alpha=0.3)
            axis.legend(loc="upper left")
        figure.suptitle(title, fontsize=9)
        save_png(figure, output)
    finally:
        plt.close(figure)
    return output
