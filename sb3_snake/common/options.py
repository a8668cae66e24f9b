"""One declaration per option: :func:`option` makes a dataclass field that says all there is to
say about it (default, help, role, ``.env`` key, flag, the :class:`Values` it takes), and every
reader takes it from there: the command line (:mod:`sb3_snake.cli.options`), the environment and
``.env``, hyperparameter files, the configuration table. :func:`resolve` applies a precedence and
says where each value came from. A class whose options have ``.env`` keys registers them
(:func:`declared`), so every reader of a ``.env`` knows every key of ours.
Design notes: docs/design-notes.md, "sb3_snake/common/options.py".
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, get_type_hints

from sb3_snake.common.errors import SettingsError

#: The value of an option that is measured on the machine that runs it (:mod:`sb3_snake.autotune`).
AUTO = "auto"
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``SDPA_BACKEND`` values: ``auto`` or one ``torch.nn.attention.SDPBackend`` kernel.
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
#: Threads per core beyond which ``TORCH_NUM_THREADS`` is refused (huge counts crash OpenMP).
MAX_THREADS_PER_CORE = 4
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


# ---------------------------------------------------------------------- the values an option takes


@dataclass(frozen=True)
class Values:
    """What an option takes: in words (for the table), parsed from text (``.env``, the
    environment, a flag: a ValueError says what was expected) and checked as a Python value
    (``""``: it can be used, else what was expected). A range of numbers also keeps its bounds;
    a choice, its choices; a switch is an on/off flag on the command line."""

    words: str
    parse: Callable[[str], Any]
    check: Callable[[Any], str]
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    switch: bool = False
    kind: str = ""  #: for a range, what it takes after "must be": ``an integer from 1 to 10``

    @property
    def takes_auto(self) -> bool:
        """Whether :data:`AUTO` is one of the values (a size or ``auto``, a switch or ``auto``)."""
        return not self.check(AUTO)

    @property
    def within(self) -> str:
        """A range in words: ``at least 1``, ``from 4 to 256``."""
        if self.high == math.inf:
            return f"at least {format_bound(self.low)}"
        return f"from {format_bound(self.low)} to {format_bound(self.high)}"


def format_bound(value: float) -> str:
    """A bound as a message shows it: an integer in full, any other number in at most 10 digits."""
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 2**53):
        return str(int(value))
    return f"{value:.10g}"


def _parse_bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def number(
    low: float, high: float = math.inf, *, integer: bool = False, optional: bool = False, auto: bool = False
) -> Values:
    """Numbers from ``low`` to ``high`` inclusive (``math.inf``: no highest); ``integer``: whole
    numbers only; ``optional``: ``None`` too; ``auto``: :data:`AUTO` too (any case, as text)."""
    kind = "an integer" if integer else "a number"
    span = (
        f"of {format_bound(low)} or more" if high == math.inf else f"from {format_bound(low)} to {format_bound(high)}"
    )
    expected = f"expected {kind} {span}" + (" or auto" if auto else "")

    def check(value: Any) -> str:
        if (value is None and optional) or (value == AUTO and auto):
            return ""
        kinds = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            return expected
        return ""

    def parse(text: str) -> Any:
        text = str(text).strip()
        if auto and text.lower() == AUTO:
            return AUTO
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(expected) from None
        if check(value):
            raise ValueError(expected)
        return value

    words = f"{'integer' if integer else 'number'} {span.removeprefix('of ')}" + (", or auto" if auto else "")
    return Values(words, parse, check, low=low, high=high, kind=f"{kind} {span}")


def choice(options: tuple[Any, ...]) -> Values:
    """One of ``options`` (spelled in any case, as text)."""
    expected = f"expected one of {', '.join(map(str, options))}"

    def parse(text: str) -> Any:
        value = str(text).strip().lower()
        if value not in options:
            raise ValueError(expected)
        return value

    check = lambda value: "" if type(value) is type(options[0]) and value in options else expected  # noqa: E731
    return Values(", ".join(map(str, options)), parse, check, choices=tuple(options))


def _parse_switch(text: str) -> bool | str:
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        return _parse_bool(text)
    except ValueError:
        raise ValueError("expected true/false, 1/0, yes/no, on/off or auto") from None


def max_threads() -> int:
    """The most ``TORCH_NUM_THREADS`` may be on this machine."""
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def _threads_problem(value: Any) -> str:
    if value == AUTO:
        return ""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_threads():
        return f"expected auto or an integer from 1 to {max_threads()} ({MAX_THREADS_PER_CORE}x this machine's cores)"
    return ""


def _parse_threads(text: str) -> int | str:
    text = str(text).strip().lower()
    try:
        value: int | str = AUTO if text == AUTO else int(text)
    except ValueError:
        value = text
    if problem := _threads_problem(value):
        raise ValueError(problem)
    return value


_BOOL_WORDS = "true/false (or 1/0, yes/no, on/off)"
SWITCH = Values(
    _BOOL_WORDS, _parse_bool, lambda value: "" if isinstance(value, bool) else "expected True or False", switch=True
)
SWITCH_OR_AUTO = Values(
    f"{_BOOL_WORDS}, or auto",
    _parse_switch,
    lambda value: "" if isinstance(value, bool) or value == AUTO else "expected True, False or 'auto'",
    switch=True,
)
THREADS = Values(f"auto, or 1 to {MAX_THREADS_PER_CORE}x the CPU cores", _parse_threads, _threads_problem)
COUNT = number(0, integer=True)


# ---------------------------------------------------------------------- one declaration per option


@dataclass(frozen=True)
class Option:
    """Everything about one option but its default and its name (the dataclass field's)."""

    help: str  #: one line, for ``--help`` and the table
    role: Any = None  #: what the option is to its class (a :class:`~sb3_snake.training.config.Role`)
    key: str | None = None  #: the environment / ``.env`` key that may set it
    flag: str | None = None  #: the command-line option, when not ``--`` and the name in kebab case
    values: Values | None = None  #: what it takes, when its type alone does not say
    unmeasured: Any = None  #: what ``auto`` stands for when nothing measured it (None: not measured)


def option(default: Any, help: str, role: Any = None, **declared: Any) -> Any:
    """A dataclass field: its default and its :class:`Option` (``key``, ``flag``, ``values``,
    ``unmeasured``)."""
    return field(default=default, metadata={"option": Option(help, role, **declared)})


@functools.cache
def options_of(cls: type) -> Mapping[str, Option]:
    """The options a dataclass declares, by field name, in field order (read once per class)."""
    return MappingProxyType({f.name: f.metadata["option"] for f in fields(cls) if "option" in f.metadata})


def defaults_of(cls: type) -> dict[str, Any]:
    """The default of each option of ``cls``."""
    return {f.name: f.default for f in fields(cls) if "option" in f.metadata}


def flag_of(cls: type, name: str) -> str:
    """The command-line spelling of option ``name`` of ``cls`` (``--x/--no-x`` for a switch's pair)."""
    declaration = options_of(cls)[name]
    flag = declaration.flag or "--" + name.replace("_", "-")
    switch = declaration.values.switch if declaration.values else field_types(cls, name) == (bool,)
    return f"{flag}/--no-{flag[2:]}" if switch and "/" not in flag else flag


def field_types(cls: type, name: str) -> tuple[Any, ...]:
    """The types field ``name`` of ``cls`` is annotated with, ``None`` left out (``int | str``:
    both; ``int | None``: ``int``)."""
    hint = _type_hints(cls)[name]
    return tuple(arg for arg in getattr(hint, "__args__", (hint,)) if arg is not type(None))


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s annotations evaluated, once per class (they are strings under PEP 563)."""
    return get_type_hints(cls)


def short_flag(flag: str) -> str:
    """A flag as a user names it in a message: ``--compile`` of ``--compile/--no-compile``."""
    return flag.split("/")[0]


#: Every option a ``.env`` may set, by field name, as the classes that declare them register it.
KEYED: dict[str, Option] = {}


def declared(cls: type) -> type:
    """Class decorator: register the options of ``cls`` that have a ``.env`` key in :data:`KEYED`."""
    for name, declaration in options_of(cls).items():
        if declaration.key is not None:
            if name in KEYED and KEYED[name] is not declaration:
                raise TypeError(f"option {name} is declared twice")
            KEYED[name] = declaration
    return cls


def env_keys() -> dict[str, Values]:
    """Every key a ``.env`` may hold, and the values it takes."""
    return {declaration.key: declaration.values or SWITCH for declaration in KEYED.values()}


def parse(cls: type, name: str, text: str) -> Any:
    """Option ``name``'s value from the text of its flag; one SettingsError naming the flag."""
    try:
        return options_of(cls)[name].values.parse(text)
    except ValueError as error:
        raise SettingsError(f"{short_flag(flag_of(cls, name))} {text!r}: {error}") from None


def resolve(layers: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Precedence, once: each value from the first layer (highest first) that gives it, a
    ``None`` value being no value; with the name of the layer each came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for name, value in layer.items():
            if value is not None and name not in values:
                values[name], sources[name] = value, source
    return values, sources


def as_text(value: Any) -> str:
    """A value as ``.env`` spells it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def table_rows(cls: type) -> list[str]:
    """The configuration table's rows (Markdown) of the options of ``cls`` with a ``.env`` key:
    key, flag, values, default and help."""
    defaults = defaults_of(cls)
    rows = []
    for name, declaration in options_of(cls).items():
        if declaration.key is not None:
            words = (declaration.values or SWITCH).words
            cells = (
                f"`{declaration.key}`",
                f"`{flag_of(cls, name)}`",
                words,
                as_text(defaults[name]),
                declaration.help,
            )
            rows.append("| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |")
    return rows
