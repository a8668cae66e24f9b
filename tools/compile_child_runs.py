"""Runs of ``sb3-snake train`` while the compile child compiles: how each ended, and how long the compile took.

Each run is a fresh ``sb3-snake train`` process (the committed defaults, plus what follows ``--``)
with cold caches (its own compile and ``auto`` cache folders; ``--warm`` shares one set across the
runs after the first, which fills them). ``--terminate N`` sends SIGTERM to the first N runs
while their compile child runs, ``--after`` seconds after it started (spread evenly up to
``--after-last`` over those runs, so that the signal meets the child in each phase of its work).
``--neighbour`` keeps a busy process (one core spinning) beside every run. Per run the JSON
records the exit code, whether the process died of a signal or printed a native crash, whether
any process of it was left, the summary's compile decision, and from it how long the child took
and how long training paused.

    python tools/compile_child_runs.py --runs 20 --terminate 10 --neighbour --output runs.json
    python tools/compile_child_runs.py --runs 3 --warm --output warm.json -- --time-limit 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sb3_snake.common import system

#: What a process prints when it dies in native code (an abort, a segmentation fault).
NATIVE_CRASH = ("Fatal Python error", "terminate called", "Segmentation fault", "core dumped")
COMPILE_STARTED = re.compile(r"^compile: compiling in a child process \(pid (\d+)\)")
#: Any compile child a "compile: ..." line names.
CHILD_PID = re.compile(r"in a child process \(pid (\d+)\)")
#: The compiled graph's adoption (older runs compiled two in the background: 1 step per call, then more).
STAGE = re.compile(
    r"in a child process in ([\d,.]+) s for calls of (\d+) gradient steps?, adopted at gradient step ([\d,]+) "
    r"\(training paused ([\d.]+) s to start it, ([\d.]+) s to adopt it\)"
)


def busy_neighbour() -> subprocess.Popen:
    """A process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def still_running(pids: set[int]) -> list[int]:
    """Those of ``pids`` that still exist (not zombies)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
        except (FileNotFoundError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def one_run(index: int, arguments: list[str], caches: Path, terminate_after: float | None) -> dict[str, Any]:
    """One ``sb3-snake train`` run; what it did and how it ended."""
    run_dir = caches / f"run-{index}"
    environment = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "SB3_SNAKE_CACHE_DIR": str(caches / "sb3-snake"),
        "PYTHONUNBUFFERED": "1",
    }
    command = [shutil.which("sb3-snake") or "sb3-snake", "train", *arguments, "--output", str(run_dir)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    lines: list[str] = []
    child_pid, compile_started_at, signal_sent_at = None, None, None
    seen: set[int] = {process.pid}
    timer = None
    compile_lines = []  # each "compile: ..." line the run printed, with the seconds since the command started
    for line in process.stdout:
        lines.append(line)
        if line.startswith("compile: "):
            compile_lines.append({"at_s": round(time.perf_counter() - started, 1), "line": line.strip()})
            seen.update(int(pid) for pid in CHILD_PID.findall(line))
        match = COMPILE_STARTED.match(line)
        if match and child_pid is None:
            child_pid, compile_started_at = int(match.group(1)), time.perf_counter() - started
            if terminate_after is not None:
                timer = threading.Timer(terminate_after, process.send_signal, (signal.SIGTERM,))
                timer.start()
                signal_sent_at = compile_started_at + terminate_after
    process.wait()
    if timer is not None:
        timer.cancel()
    output = "".join(lines)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    reason = summary.get("active", {}).get("torch_compile_reason", "")
    stages = [
        {
            "child_seconds": float(seconds.replace(",", "")),
            "steps_per_call": int(steps),
            "adopted_at_gradient_step": int(at.replace(",", "")),
            "start_pause_s": float(start),
            "adopt_pause_s": float(adopt),
        }
        for seconds, steps, at, start, adopt in STAGE.findall(reason)
    ]
    first = stages[0] if stages else {}
    return {
        "run": index,
        "exit_code": process.returncode,
        "sigterm_after_compile_start_s": terminate_after,
        "sigterm_sent_at_s": signal_sent_at,
        "native_crash_printed": any(mark in output for mark in NATIVE_CRASH),
        "left_running": still_running(seen),
        "wall_seconds": time.perf_counter() - started,
        "compile_started_at_s": compile_started_at,
        "compile_active": summary.get("active", {}).get("torch_compile_active"),
        "compile_reason": reason,
        # The first graph adopted, then each graph adopted, in order:
        **{
            key: first.get(key)
            for key in ("child_seconds", "start_pause_s", "adopt_pause_s", "adopted_at_gradient_step")
        },
        "stages": stages,
        "compile_lines": compile_lines,
        "env_steps": summary.get("total_env_steps"),
        "half_written_files": [path.name for path in run_dir.glob("*.tmp.*")] if run_dir.is_dir() else [],
        "last_lines": lines[-3:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--terminate", type=int, default=0, help="SIGTERM the first N runs while they compile")
    parser.add_argument("--after", type=float, default=10.0, help="seconds after the compile starts")
    parser.add_argument("--after-last", type=float, default=None, help="the last terminated run's (default: --after)")
    parser.add_argument("--neighbour", action="store_true", help="a busy process beside every run")
    parser.add_argument("--warm", action="store_true", help="share the caches: runs after the first find them warm")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("train", nargs="*", help="sb3-snake train's arguments (after --)")
    options = parser.parse_args(argv)
    arguments = options.train or ["--time-limit", "2", "--compile-after", "500"]
    neighbour = busy_neighbour() if options.neighbour else None
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="compile-child-runs-") as folder:
            for index in range(options.runs):
                caches = Path(folder) / ("shared" if options.warm else f"caches-{index}")
                terminate = _spread(options.after, options.after_last, index, options.terminate)
                results.append(one_run(index, arguments, caches, terminate))
                print(json.dumps({key: results[-1][key] for key in ("run", "exit_code", "compile_reason")}))
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    report = {
        "command": ["sb3-snake", "train", *arguments],
        "options": {key: value for key, value in vars(options).items() if key not in ("output", "train")},
        "system": system.system_info(),
        "cpu_flags_family_model": _cpu_identity(),
        "runs": results,
    }
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _spread(first: float, last: float | None, index: int, count: int) -> float | None:
    """Run ``index``'s seconds from its compile's start to SIGTERM (None: not terminated)."""
    if index >= count:
        return None
    if last is None or count == 1:
        return first
    return first + (last - first) * index / (count - 1)


def _cpu_identity() -> dict[str, str]:
    """The CPU's family, model and vector extensions, from ``/proc/cpuinfo`` (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = [flag for flag in fields.get("flags", "").split() if flag.startswith(("avx", "amx"))]
    return {"family": fields.get("cpu family", ""), "model": fields.get("model", ""), "vector": " ".join(flags)}


if __name__ == "__main__":
    sys.exit(main())
