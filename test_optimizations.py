"""Capability report: what this machine supports and what training will use.

    python test_optimizations.py [--json] [--probe-compile] [--measure-auto] [--env-file PATH]
                                 [--device auto|cpu|cuda]

For each learner (PQN, the default, and SnakeDQN), what a run of it would have active; settings
that are ``auto`` show what was measured on this machine for its network (from the cache in
~/.cache/sb3-snake), or, with ``--measure-auto``, are measured now (seconds; a minute more when
USE_TORCH_COMPILE=auto compiles).

This is a report script, not a test module (pytest collects ``tests/`` only). Exit 0 when it
ran; exit 2 with one line naming the key when the settings are malformed.
"""

from __future__ import annotations

import argparse
import json
import sys

from sb3_snake.acceleration.optimizations import threads_for, torch_threads
from sb3_snake.acceleration.settings import OptimizationSettings, SettingsError
from sb3_snake.capabilities import capability_report, format_capability_report
from sb3_snake.common.system import check_device
from sb3_snake.training.options import load_config
from sb3_snake.training.roles import ALGORITHMS, DEFAULT_LEARNER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--probe-compile", action="store_true", help="also compile and run a tiny function")
    parser.add_argument("--measure-auto", action="store_true", help="measure auto settings now if not cached")
    parser.add_argument("--env-file", help="the .env to read (default: ./.env when present)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args(argv)
    try:
        settings = OptimizationSettings.load(args.env_file)
        # each learner's run, its batch size from the environment, .env or the default
        configs = {algo: load_config(args.env_file, algo=algo) for algo in (DEFAULT_LEARNER, *ALGORITHMS)}
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        check_device(args.device)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    threads = threads_for(settings, args.device)  # the count training will use, so a measurement here is valid there
    with torch_threads(threads):
        report = capability_report(
            settings, args.device, probe_compile_now=args.probe_compile, configs=configs, measure_auto=args.measure_auto
        )
    print(json.dumps(report, indent=2) if args.json else format_capability_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
