"""The lab tools of ``tools/`` run on today's package: each answers ``--help``, is named in
``tools/README.md`` and runs once, at tiny sizes, into a temporary folder. What the package's
commands do (learning curves, their pictures) lives in them, not here."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
PROGRAMS = sorted(TOOLS.glob("*.py"))


def run_tool(name: str, *arguments: str) -> subprocess.CompletedProcess:
    """``tools/name`` with ``arguments`` in a fresh process that imports this checkout's package."""
    command = [sys.executable, str(TOOLS / name), *arguments]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_the_tools_are_found():
    """The tests parametrized over the tools have tools to run on."""
    assert {"compile_child_runs.py", "eager_step_rate.py"} <= {path.name for path in PROGRAMS}


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda path: path.name)
def test_every_tool_answers_help_with_its_purpose(path):
    done = run_tool(path.name, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {path.name}") and "--output" in done.stdout
    purpose = " ".join(ast.get_docstring(ast.parse(path.read_text())).splitlines()[0].split())
    assert purpose and purpose in " ".join(done.stdout.split()), done.stdout  # its docstring's first line


def test_every_tool_is_named_in_the_readme_with_a_purpose():
    rows = re.findall(r"^\| \[`([^`]+)`\]\(([^)]+)\) \| (.*) \|$", (TOOLS / "README.md").read_text(), re.MULTILINE)
    named = {name: (link, purpose) for name, link, purpose in rows}
    files = sorted(path.name for path in TOOLS.iterdir() if path.name not in ("README.md", "__pycache__"))
    assert sorted(named) == files, f"tools/README.md must have a row for every file in tools/ and no other: {files}"
    for name, (link, purpose) in named.items():
        assert link == name and len(purpose.split()) >= 5, f"{name}'s row needs its link and a one-line purpose"


def test_eager_step_rate_appends_one_line_per_run(tmp_path):
    output = tmp_path / "ab.jsonl"
    tiny = ["--threads", "1", "--n-envs", "4", "--board-size", "5", "--buffer-size", "200", "--fill-steps", "64"]
    tiny += ["--batch-size", "8", "--warmup-steps", "1", "--steps", "2", "--rounds", "2", "--shaping", "0", "1"]
    for label in ("before", "after"):
        done = run_tool("eager_step_rate.py", "--label", label, "--output", str(output), *tiny)
        assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["version"] for line in lines] == ["before", "after"]
    for line in lines:
        assert set(line) == {"version", "shaping_0.0", "shaping_1.0"}
        assert len(line["shaping_1.0"]["rates"]) == 2 and line["shaping_1.0"]["median"] > 0


def test_every_tool_has_a_smoke_test_here():
    source = Path(__file__).read_text()
    tested = set(re.findall(r'run_tool\(\s*"([^"]+)"', source))
    untested = [path.name for path in PROGRAMS if path.name not in tested]
    assert not untested, f"tools without a smoke test in tests/meta/test_scripts.py: {untested}"


def test_programs_live_in_tools_only():
    programs = [p.relative_to(ROOT) for p in (ROOT / "benchmark_results").rglob("*") if p.suffix in (".py", ".diff")]
    assert not programs, f"programs belong in tools/, with a smoke test here: {programs}"
    assert not (ROOT / "scripts").exists(), "scripts/ is gone: lab programs go in tools/, the rest in sb3-snake"


@pytest.mark.slow
def test_compile_child_runs_records_each_run(tmp_path):
    if shutil.which("sb3-snake") is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    output = tmp_path / "runs.json"
    train = [
        "--algo",
        "dqn",
        "--episodes",
        "1",
        "--device",
        "cpu",
        "--board-size",
        "5",
        "--n-envs",
        "2",
        "--learning-starts",
        "16",
    ]
    train += ["--batch-size", "8", "--no-compile", "--no-bf16", "--no-flash-attention", "--threads", "1"]
    train += ["--buffer-size", "500"]
    done = run_tool("compile_child_runs.py", "--runs", "1", "--output", str(output), "--", *train)
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert [run["exit_code"] for run in report["runs"]] == [0], report["runs"]
    assert report["runs"][0]["compile_active"] is False and report["runs"][0]["left_running"] == []
    assert report["runs"][0]["stages"] == [] and report["runs"][0]["compile_lines"] == []
