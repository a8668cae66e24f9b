"""Imports point down: each module imports only modules of lower layers (and its own package)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sb3_snake"

#: Layer of each module, lowest first; a module may import from its own layer or below.
LAYERS = [
    {"envs", "paths", "system", "settings"},
    {"optimizations", "extractor", "symmetry", "shaping", "replay", "cuda_graph", "compiled_update", "threads"},
    {"algorithm"},
    {"autotune", "persistence", "evaluation", "tracking", "run_directory", "report", "plotting"},
    {"callbacks"},
    {"training"},
    {"benchmark"},
    {"tuning"},
    {"cli", "__init__"},
]
LAYER = {name: index for index, names in enumerate(LAYERS) for name in names}


def top_module(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sb3_snake"):
            parts = node.module.split(".")
            names.add(parts[1] if len(parts) > 1 else node.names[0].name)
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("sb3_snake.")}
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    module = top_module(path)
    assert module in LAYER, f"{module} has no layer in this test; add it"
    upward = {name for name in imported_modules(path) if LAYER.get(name, -1) > LAYER[module]}
    assert not upward, f"{path.relative_to(PACKAGE)} imports {sorted(upward)} from a higher layer"
