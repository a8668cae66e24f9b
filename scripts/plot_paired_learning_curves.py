"""Greedy mean score against minutes of ``sb3-snake benchmark-learning`` runs, one colour per arm.

Each ``--arm LABEL=PATTERN`` names an arm and its runs' JSON files (a glob inside ``--folder``);
each file's first run is drawn from (0, 0) through its checkpoints. ``--env-steps`` adds a panel
against env steps, which no machine's speed changes. The picture of the endgame
options against the defaults before them, run in pairs (docs/benchmarks.md, "The endgame
options before they became the defaults"):

    python scripts/plot_paired_learning_curves.py --folder benchmark_results/amd_zen5_20261125 \\
        --arm "old defaults=learning_*-pair-old-defaults-seed*.json" \\
        --arm "endgame options (the new defaults)=learning_*-pair-endgame-seed*.json" \\
        --title "AMD EPYC (Zen 5 class), 2 cores, torch 2.13.0+cpu; two runs side by side" \\
        --output benchmark_results/amd_zen5_20261125/pair_old_defaults_and_endgame.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt


def arm(text: str) -> tuple[str, str]:
    """``LABEL=PATTERN`` as ``(label, pattern)``."""
    label, separator, pattern = text.rpartition("=")
    if not separator or not label or not pattern:
        raise argparse.ArgumentTypeError(f"an arm is LABEL=PATTERN, got {text!r}")
    return label, pattern


def curve(path: Path, x: str = "minutes") -> tuple[list[float], list[float]]:
    """``x`` (minutes or env steps) and greedy mean scores of the first run in ``path``, from (0, 0)."""
    points = json.loads(path.read_text())["runs"][0]["curve"]
    return [0.0] + [point[x] for point in points], [0.0] + [point["mean_score"] for point in points]


#: The panels: what each point's x is in a run's curve, and the axis's label.
PANELS = {
    "minutes": "wall-clock minutes (imports and compilation included)",
    "env_steps": "env steps (all games together)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("."), help="where the arms' patterns look")
    parser.add_argument("--arm", type=arm, action="append", required=True, help="LABEL=PATTERN, once per arm")
    parser.add_argument("--title", default="", help="the machine and what ran beside what")
    parser.add_argument("--output", type=Path, required=True, help="the picture (PNG)")
    parser.add_argument("--env-steps", action="store_true", help="also a panel against env steps")
    options = parser.parse_args(argv)
    runs = {label: sorted(options.folder.glob(pattern)) for label, pattern in options.arm}
    empty = [label for label, paths in runs.items() if not paths]
    if empty:
        parser.error(f"no files in {options.folder} for the arm(s) {', '.join(empty)}")
    panels = ["minutes", "env_steps"] if options.env_steps else ["minutes"]
    figure, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 4.5), squeeze=False)
    for axis, x in zip(axes[0], panels, strict=True):
        for index, (label, paths) in enumerate(runs.items()):
            for number, path in enumerate(paths):
                xs, scores = curve(path, x)
                axis.plot(xs, scores, color=f"C{index}", alpha=0.8, label=label if number == 0 else None)
        axis.set_xlabel(PANELS[x])
        axis.set_ylabel("greedy mean score (100 games)")
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right")
    figure.suptitle(options.title, fontsize=9)
    figure.tight_layout()
    options.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(options.output, dpi=100)
    print(f"wrote {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
