"""One picture of the side-by-side pairs of 2026-11-25 (the old defaults and the endgame
options, seeds 0-2, each pair started together): greedy mean against minutes, from their JSONs."""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = Path(__file__).parent
arms = {"old defaults": ("pair-old-defaults", "tab:blue"), "endgame options (the new defaults)": ("pair-endgame", "tab:orange")}
figure, axis = plt.subplots(figsize=(8, 4.5))
for label, (tag, colour) in arms.items():
    for index, path in enumerate(sorted(here.glob(f"learning_*-{tag}-seed*.json"))):
        run = json.loads(path.read_text())["runs"][0]
        minutes = [0.0] + [point["minutes"] for point in run["curve"]]
        scores = [0.0] + [point["mean_score"] for point in run["curve"]]
        axis.plot(minutes, scores, color=colour, alpha=0.8, label=label if index == 0 else None)
axis.set_xlabel("wall-clock minutes (imports and compilation included)")
axis.set_ylabel("greedy mean score (100 games)")
axis.set_title("AMD EPYC (Zen 5 class), 2 cores, torch 2.13.0+cpu; two runs side by side", fontsize=9)
axis.grid(alpha=0.3)
axis.legend(loc="lower right")
figure.tight_layout()
figure.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "pair_old_defaults_and_endgame.png", dpi=100)
