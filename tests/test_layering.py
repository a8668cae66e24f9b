"""Imports point down: each module imports only modules of its own layer or lower ones.

The layers read bottom to top as the package is built: what every layer shares and the rules
of the game; the speed switches; the DQN's parts (its policies and save format over them), the
gradient step and the ways to run it, and ``SnakeDQN``; what
measures and reports on a model (``auto``, the capability report) and the save format; the
training run; RL Zoo's hyperparameter modules (the benchmarks' PPO peer trains with them); the
benchmarks; the search; the command line.
A module's layer is that of the longest dotted prefix of its name listed here
(``dqn.update.compiled`` is ``dqn.update``).
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sb3_snake"

#: Layer of each module or package, lowest first; a module may import from its own layer or below.
LAYERS = [
    {"common", "envs"},
    {"acceleration.setting_values", "acceleration.env_file", "acceleration.settings"},
    {"dqn.replay", "dqn.extractor", "dqn.symmetry", "dqn.targets", "dqn.rollout"},
    {"dqn.policies", "dqn.save_format"},
    {"acceleration.optimizations", "acceleration.threads"},
    {"acceleration.autotune.search", "acceleration.autotune.cache"},
    {"dqn.update"},
    {"dqn"},
    {"persistence", "acceleration.autotune", "training.evaluation", "training.tracking"},
    {"acceleration", "acceleration.report", "training.run_directory", "training.plotting"},
    {"training.callbacks"},
    {"training"},
    {"zoo"},
    {"benchmark.learning.clock", "benchmark.learning.summary"},
    {"benchmark.learning.runs"},
    {"benchmark.learning.plan"},
    {"benchmark"},
    {"training.tuning.space"},
    {"training.tuning.storage", "training.tuning.report"},
    {"training.tuning"},
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


def test_every_listed_layer_names_a_module():
    """A stale entry (a module moved or removed) would hide nothing, but it misleads the reader."""
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    stale = {
        name for name in LAYER if name != "__init__" and not any(m == name or m.startswith(name + ".") for m in modules)
    }
    assert not stale, f"layers name modules that do not exist: {sorted(stale)}"
