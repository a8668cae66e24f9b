"""Functions and modules stay short enough to read (issue 48): a function of at most
:data:`MAX_FUNCTION_LINES` lines reads top to bottom on one screen, a module of at most
:data:`MAX_MODULE_LINES` is one concept. Lines are counted from ``def`` to the last line,
decorators excluded. A module's docstring is its contract, at most :data:`MAX_MODULE_DOCSTRING_LINES`
lines (issue 60): the reasoning and the measurements live in the docs."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sb3_snake"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450
MAX_MODULE_DOCSTRING_LINES = 12


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_functions_are_short(path):
    long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{_name(path)}: functions over {MAX_FUNCTION_LINES} lines: {long}; split them into helpers"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_modules_are_short(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines (at most {MAX_MODULE_LINES}); split it"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_docstrings_are_contracts_not_essays(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    lines = docstring.count("\n") + 1
    assert lines <= MAX_MODULE_DOCSTRING_LINES, (
        f"{_name(path)}'s module docstring has {lines} lines (at most {MAX_MODULE_DOCSTRING_LINES}); "
        "move the reasoning to the docs"
    )
