"""Imports point down, folder by folder, and no module imports itself back through others.

The layers are the package's folders (and its few top-level modules), bottom to top: what every
layer shares; the rules of the game; the speed switches and their decisions; the networks both
learners build on; what both learners do (the gradient step's machinery, and Q-learning's targets,
exploration, symmetries and save format); the learners (``SnakeDQN``, ``PQN``), which never import
each other (nor does any folder import another of its own layer); what saves, loads or measures a model
(``persistence``, ``auto``'s measurement); what reports on the machine (the capability report) and
the training run with all around it; RL Zoo's hyperparameter modules (the benchmarks' PPO peer
trains with them); the benchmarks; the command line. A module may import from its own folder or
lower ones; within a folder, :func:`test_no_import_cycles` keeps the imports a tree, type-only
imports included.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sb3_snake"

#: Layer of each module or package, lowest first; a module may import from its own layer or below.
LAYERS = [
    {"common"},
    {"envs"},
    {"acceleration"},
    {"networks"},
    {"update", "q_learning"},
    {"dqn", "pqn"},
    {"persistence", "autotune"},
    {"training"},
    {"capabilities"},
    {"zoo"},
    {"benchmark"},
    {"cli", "__init__"},
]
LAYER = {name: index for index, names in enumerate(LAYERS) for name in names}


def layer_of(dotted: str) -> int | None:
    """The layer of the longest listed prefix of ``dotted`` (a module name below ``sb3_snake``)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYER:
            return LAYER[prefix]
    return None


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" and len(relative.parts) > 1 else relative.parts
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """The ``sb3_snake`` modules ``path`` imports, as dotted names below the package."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sb3_snake"):
            module = node.module.removeprefix("sb3_snake").lstrip(".")
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                names.add(full if layer_of(full) is not None and not alias.name[0].isupper() else module or full)
        elif isinstance(node, ast.Import):
            names |= {
                alias.name.removeprefix("sb3_snake.") for alias in node.names if alias.name.startswith("sb3_snake.")
            }
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    module = module_name(path)
    own = layer_of(module)
    assert own is not None, f"{module} has no layer in this test; add it"
    upward = {name for name in imported_modules(path) if (layer_of(name) or -1) > own}
    assert not upward, f"{path.relative_to(PACKAGE)} imports {sorted(upward)} from a higher layer"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_folder_imports_another_of_its_own_layer(path):
    """Siblings stay apart: above all the two learners, ``dqn`` and ``pqn``, which share what they
    share through the layers below them."""
    module = module_name(path)
    own, folder = layer_of(module), module.split(".")[0]
    sideways = {name for name in imported_modules(path) if layer_of(name) == own and name.split(".")[0] != folder}
    assert not sideways, f"{path.relative_to(PACKAGE)} imports {sorted(sideways)} from its own layer's other folders"


def test_every_listed_layer_names_a_module():
    """A stale entry (a module moved or removed) would hide nothing, but it misleads the reader."""
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    stale = {
        name for name in LAYER if name != "__init__" and not any(m == name or m.startswith(name + ".") for m in modules)
    }
    assert not stale, f"layers name modules that do not exist: {sorted(stale)}"


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports (type-only imports included)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    return {
        module: {owner(name) for name in imported_modules(path) if owner(name) not in ("", module)}
        for module, path in modules.items()
    }


def test_no_import_cycles():
    graph, state, cycles = import_graph(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                cycles.append(path[path.index(imported) :] + [imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)
