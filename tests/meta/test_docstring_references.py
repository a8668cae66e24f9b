"""Every cross-reference in the package's docstrings resolves to something that exists.

Scanned: module, class, function and method docstrings, and ``#:`` attribute comments. Checked:
the roles :data:`ROLES` (``:func:`X```, with or without ``~``, or ``:meth:`title <X>```), every
````sb3_snake.a.b```` in double backquotes, and every ````sibling.name```` whose first part is a
module of the same package (``steps.StepChoice`` in ``sb3_snake/update/__init__.py``) unless
it ends like a file's name, and every ````module.Class````; none whose first part is a parameter
or local of the function around.

A name resolves as mkdocstrings or Sphinx would look it up: ``sb3_snake.…`` by importing its
longest module prefix and getting the rest as attributes; ``.name`` relative to the module's
package; otherwise first among the enclosing class's attributes (instance attributes ``self.NAME``
and dataclass fields included), then in the module's globals (imported names included), then
among the builtins, then by import (``torch.…``, ``stable_baselines3.…``). A function's
parameters are no targets: write them as ````name````.
"""

import ast
import builtins
import dataclasses
import importlib
import inspect
import io
import pkgutil
import re
import textwrap
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import sb3_snake

PACKAGE = Path(sb3_snake.__file__).resolve().parent

#: The Sphinx roles whose targets must resolve.
ROLES = ("func", "class", "mod", "meth", "data", "attr", "exc")
ROLE = re.compile(r":(?:py:)?(" + "|".join(ROLES) + r"):`([^`]+)`")
LITERAL = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)``")
#: ````module.Class````: a lower-case name, then a capitalized one (``optuna.TrialPruned``).
MODULE_CLASS = re.compile(r"[a-z_]\w*\.[A-Z]\w*")
#: Endings that make ````summary.json```` a file's name, not a module's attribute.
FILE_SUFFIXES = {"json", "csv", "zip", "npz", "py", "md", "txt", "toml", "yml", "yaml", "env", "db", "png", "log"}
MISSING = object()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def instance_attributes(cls: type) -> frozenset[str]:
    """Names assigned as ``self.NAME = …`` anywhere in ``cls`` or its bases, plus declared fields."""
    names = set()
    for klass in inspect.getmro(cls):
        names.update(getattr(klass, "__annotations__", {}))
        names.update(getattr(klass, "__slots__", ()))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        names.update(_self_assignments(tree))
    if dataclasses.is_dataclass(cls):
        names.update(field.name for field in dataclasses.fields(cls))
    return frozenset(names)


def _self_assignments(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                yield node.attr


def member(owner: Any, name: str) -> Any:
    """``owner.name``, a submodule of a package, or an instance attribute of a class; else MISSING."""
    try:
        return getattr(owner, name)
    except AttributeError:
        pass
    if isinstance(owner, ModuleType) and hasattr(owner, "__path__"):
        try:
            return importlib.import_module(f"{owner.__name__}.{name}")
        except ImportError:
            return MISSING
    if isinstance(owner, type) and name in instance_attributes(owner):
        return None  # exists on instances; nothing below it is checked
    return MISSING


def walk(owner: Any, parts: list[str]) -> bool:
    for part in parts:
        if owner is None:  # an instance attribute: its own attributes are not known here
            return False
        owner = member(owner, part)
        if owner is MISSING:
            return False
    return True


def by_import(dotted: str) -> bool:
    """Import the longest importable prefix of ``dotted``, then get the rest as attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        return walk(module, parts[end:])
    return False


def resolves(target: str, namespace: dict[str, Any], cls: type | None = None, members: frozenset = frozenset()) -> bool:
    """Whether ``target`` names something, looked up from ``cls`` (live or by its AST ``members``)
    and a module's ``namespace``; ``.name`` is relative to the namespace's package."""
    target = target.strip().removeprefix("~").removesuffix("()")
    if target.startswith("."):
        relative = target.lstrip(".")
        package = namespace.get("__package__", "").rsplit(".", len(target) - len(relative) - 1)[0]
        return bool(package) and by_import(f"{package}.{relative}")
    if target.startswith("sb3_snake.") or target == "sb3_snake":
        return by_import(target)
    first, *rest = target.split(".")
    if cls is not None and (found := member(cls, first)) is not MISSING:
        return walk(found, rest) if rest else True
    if first in members and not rest:
        return True
    if first in namespace:
        return walk(namespace[first], rest)
    if hasattr(builtins, first):
        return walk(getattr(builtins, first), rest)
    return by_import(target)


def references(
    text: str, siblings: frozenset[str] = frozenset(), local: frozenset[str] = frozenset()
) -> Iterator[tuple[str, bool]]:
    """Every checked reference in ``text`` and whether it names a sibling module: role targets,
    ````sb3_snake.…````, ````sibling.…```` and ````module.Class```` names (not ````local.…````)."""
    for match in ROLE.finditer(text):
        target = " ".join(match.group(2).split())
        explicit = re.fullmatch(r".*<([^<>]+)>", target)
        yield (explicit.group(1) if explicit else target), False
    for match in LITERAL.finditer(text):
        dotted = match.group(1)
        first, last = dotted.split(".")[0], dotted.rsplit(".", 1)[1]
        if first == "sb3_snake":
            yield dotted, False
        elif first in local:
            continue
        elif first in siblings and last not in FILE_SUFFIXES:
            yield dotted, True
        elif MODULE_CLASS.fullmatch(dotted):
            yield dotted, False


def sibling_modules(name: str, module: ModuleType) -> frozenset[str]:
    """The modules beside ``module`` in its package (for a package: the modules inside it)."""
    package = module if hasattr(module, "__path__") else importlib.import_module(name.rpartition(".")[0])
    return frozenset(info.name for info in pkgutil.iter_modules(package.__path__))


def _docstring_nodes(tree: ast.Module) -> Iterator[tuple[list[ast.AST], str]]:
    """``(enclosing nodes, docstring)`` for the module and every class and function in it."""

    def visit(node: ast.AST, chain: list[ast.AST]) -> Iterator[tuple[list[ast.AST], str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                if doc := ast.get_docstring(child):
                    yield [*chain, child], doc
                yield from visit(child, [*chain, child])
            else:
                yield from visit(child, chain)

    if doc := ast.get_docstring(tree):
        yield [], doc
    yield from visit(tree, [])


def _comment_blocks(source: str, tree: ast.Module) -> Iterator[tuple[list[ast.AST], str]]:
    """Consecutive ``#:`` comments, each block with the classes and functions around it."""
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    block: list[str] = []
    last = start = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT or not token.string.startswith("#:"):
            continue
        line = token.start[0]
        if block and line != last + 1:
            yield _around(scopes, start), " ".join(block)
            block = []
        if not block:
            start = line
        block.append(token.string[2:].strip())
        last = line
    if block:
        yield _around(scopes, start), " ".join(block)


def _around(scopes: list[ast.AST], line: int) -> list[ast.AST]:
    return sorted((s for s in scopes if s.lineno <= line <= s.end_lineno), key=lambda s: s.lineno)


def _context(module: ModuleType, chain: list[ast.AST]) -> tuple[str, type | None, frozenset[str], set[str]]:
    """The dotted name of the innermost object, its innermost class (live if reachable), that
    class's member names from its AST, and the parameters and locals of the functions around."""
    owner: Any = module
    cls, members, names, local = None, frozenset(), [], set()
    for node in chain:
        names.append(node.name)
        owner = getattr(owner, node.name, None) if owner is not None else None
        if isinstance(node, ast.ClassDef):
            cls = owner if isinstance(owner, type) else None
            members = frozenset(_class_members(node))
        else:
            local.update(arg.arg for arg in ast.walk(node.args) if isinstance(arg, ast.arg))
            local.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return ".".join(names) or "<module>", cls, members, local


def _class_members(node: ast.ClassDef) -> Iterator[str]:
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            yield statement.target.id
        elif isinstance(statement, ast.Assign):
            yield from (t.id for t in statement.targets if isinstance(t, ast.Name))
    yield from _self_assignments(node)


def scan() -> tuple[int, list[str]]:
    """How many references the package's docstrings hold, and each one that does not resolve."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {path: importlib.import_module(module_name(path)) for path in paths}  # all first: same namespaces
    checked, broken = 0, []
    for path, module in modules.items():
        name = module.__name__
        source = path.read_text()
        tree = ast.parse(source)
        siblings = sibling_modules(name, module)
        for chain, text in [*_docstring_nodes(tree), *_comment_blocks(source, tree)]:
            where, cls, members, local = _context(module, chain)
            for target, sibling in references(text, siblings, frozenset(local)):
                checked += 1
                if sibling:
                    ok = by_import(f"{module.__package__}.{target}")
                else:
                    ok = resolves(target, vars(module), cls, members)
                if not ok:
                    broken.append(f"{name}:{where}: {target}")
    return checked, broken


def test_resolver_tells_good_references_from_bad():
    text = ":func:`~json.dumps` or :class:`ValueError`, not :meth:`gone`; ``sb3_snake.nothing_here`` or ``x.y``"
    found = [target for target, _ in references(text)]
    assert found == ["~json.dumps", "ValueError", "gone", "sb3_snake.nothing_here"]
    namespace = {"json": importlib.import_module("json")}
    assert [resolves(target, namespace) for target in found] == [True, True, False, False]
    siblings, local = frozenset({"steps", "summary", "plan"}), frozenset({"plan"})
    text = "``steps.StepChoice``, ``summary.json``, ``plan.parallel``, ``step.EagerSteps``"
    assert list(references(text, siblings, local)) == [("steps.StepChoice", True), ("step.EagerSteps", False)]
    assert not resolves("step.EagerSteps", {})
    package = {"__package__": "sb3_snake.update"}
    assert [resolves(target, package) for target in ("~.steps.StepChoice", ".step.EagerSteps")] == [True, False]


def test_resolver_looks_in_the_class_but_not_at_parameters():
    class Owner:
        def __init__(self):
            self.state = 1

        def method(self, value):
            """Uses :attr:`state`, :meth:`method`, not :data:`value`."""

    found = [target for target, _ in references(Owner.method.__doc__)]
    assert [resolves(target, {}, Owner) for target in found] == [True, True, False]
    assert list(references(":meth:`save <sb3_snake.dqn.snake_dqn.SnakeDQN.save>`")) == [
        ("sb3_snake.dqn.snake_dqn.SnakeDQN.save", False)
    ]


def test_every_docstring_reference_resolves():
    checked, broken = scan()
    assert checked > 500, f"only {checked} references found; the scan misses docstrings"
    assert not broken, f"{len(broken)} of {checked} docstring references do not resolve:\n" + "\n".join(broken)
