"""Figures of one machine on one day live in ``benchmark_results/`` and the docs, never in the code's
comments and docstrings or in ``.env``: there they go stale the day the machine or the code changes."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "sb3_snake").rglob("*.py")) + [ROOT / "test_optimizations.py"]

#: A date, a throughput, or a machine named beside a figure.
DATED_FIGURE = re.compile(
    r"\b20\d\d-\d\d-\d\d\b"
    r"|\b\d[\d,.]*\s*(?:k|M)?\s*(?:samples|env steps|steps|updates|GFLOP)/s\b"
    r"|\b(?:EPYC|Xeon|Zen \d|H100|H200|RTX ?\d{4})\b[^.\n]{0,40}\b\d[\d,.]*\s*(?:x|%|s|ms)\b",
    re.IGNORECASE,
)


def prose(path: Path) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python file, with their line numbers."""
    text = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_the_pattern_catches_dated_figures_and_spares_plain_prose():
    assert DATED_FIGURE.search("measured 22,457 samples/s on 2026-11-22")
    assert DATED_FIGURE.search("the compiled step ran 1.5x on a 2-core AMD EPYC, 1.3x")
    assert DATED_FIGURE.search("about 26.6M env steps/s")
    assert not DATED_FIGURE.search("a cold compile stalls training; compile must be 1.05x faster to win")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dated_figures_in_comments_or_docstrings(path):
    hits = [(line, DATED_FIGURE.search(text).group(0)) for line, text in prose(path) if DATED_FIGURE.search(text)]
    assert not hits, f"{path.relative_to(ROOT)}: move these figures to benchmark_results and the docs: {hits}"


def test_no_dated_figures_in_the_env_file():
    comments = [line for line in (ROOT / ".env").read_text().splitlines() if line.lstrip().startswith("#")]
    assert not [line for line in comments if DATED_FIGURE.search(line)]
