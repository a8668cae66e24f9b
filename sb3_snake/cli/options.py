"""The commands' options, generated from the declarations (:func:`sb3_snake.common.options.option`):
``train``'s from :class:`~sb3_snake.training.config.TrainConfig`'s, the optimization flags from
:class:`~sb3_snake.acceleration.settings.OptimizationSettings`'. An option left out is ``None`` and
falls through to the config's default, to ``.env``, or, on ``--resume``, to what the model trained with.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import SettingsError
from sb3_snake.common.options import defaults_of, field_types, flag_of, options_of, parse, short_flag
from sb3_snake.training.tracking import WANDB_MODES


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


WandbMode = Enum("WandbMode", {mode: mode for mode in WANDB_MODES}, type=str)
ONLINE = WandbMode("online")

OPTIMIZATIONS = "Optimizations (override .env)"


# ---------------------------------------------------------------------- options, declared once


@functools.cache
def _choices(name: str, choices: tuple[str, ...]) -> type[Enum]:
    """The Enum Typer lists an option's choices from (one class per option, so Typer sees it once)."""
    return Enum(name.title().replace("_", ""), {choice: choice for choice in choices}, type=str)


def _cli_type(cls: type, name: str) -> Any:
    """The type Typer reads option ``name`` as: a switch, a choice, text for a value that is a
    number or ``auto`` (parsed as declared: :func:`from_flags`), else the field's own type."""
    values, kinds = options_of(cls)[name].values, field_types(cls, name)
    if values is not None and values.switch:
        return bool
    if values is not None and values.choices:
        return _choices(name, values.choices)
    return str if len(kinds) > 1 else kinds[0]


def parameters(
    cls: type,
    names: Collection[str] | None = None,
    *,
    panel: str | None = None,
    help: str | None = None,
    show_defaults: bool = True,
) -> list[inspect.Parameter]:
    """One optional Typer option per option ``cls`` declares (or those ``names``): its flag, help,
    ``--help`` panel (``panel``, else its role's group) and, with ``show_defaults``, its default."""
    defaults = defaults_of(cls)
    result = []
    for name, declared in options_of(cls).items():
        if names is not None and name not in names:
            continue
        base, default = _cli_type(cls, name), defaults[name]
        shown = str(default) if show_defaults and default is not None and base is not bool else False
        option = typer.Option(
            flag_of(cls, name),
            help=help or declared.help,
            rich_help_panel=panel or declared.role.group,
            show_default=shown,
        )
        annotation = Annotated[base | None, option]
        result.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return result


def settings_parameters() -> list[inspect.Parameter]:
    """The optimization flags, with no default shown (``.env`` decides it), and ``--env-file``."""
    env_file = Annotated[
        Path | None,
        typer.Option(help="The .env to read (default: ./.env when present).", rich_help_panel=OPTIMIZATIONS),
    ]
    env_parameter = inspect.Parameter("env_file", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=env_file)
    return [*parameters(OptimizationSettings, panel=OPTIMIZATIONS, show_defaults=False), env_parameter]


def with_parameters(*groups: list[inspect.Parameter]) -> Callable[[Callable], Callable]:
    """Give a ``def command(**options)`` the signature Typer reads its options from."""

    def decorate(command: Callable) -> Callable:
        # eval_str: the module's annotations are strings (PEP 563); Typer reads a __signature__ as
        # it is, so unevaluated, its Annotated options would lose their help, panel and flags
        own = list(inspect.signature(command, eval_str=True).parameters.values())[:-1]  # all but **options
        command.__signature__ = inspect.Signature([*own, *(p for group in groups for p in group)])
        return command

    return decorate


def from_flags(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """The values of ``cls``'s options given on the command line, popped from ``options``: a
    choice as its value, a path as text, text parsed as the option declares (one error naming
    the flag); options left out are not in the result."""
    given = {}
    for name in options_of(cls):
        value = options.pop(name, None)
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, str) and _cli_type(cls, name) is str and options_of(cls)[name].values is not None:
            value = parse(cls, name, value)
        if value is not None:
            given[name] = str(value) if isinstance(value, Path) else value
    return given


def load_settings(env_file: Path | None, options: dict[str, Any]) -> OptimizationSettings:
    """Settings from the command's optimization options (popped from ``options``) over .env; a
    value a setting does not take is one SettingsError naming its flag."""
    given = from_flags(OptimizationSettings, options)
    for name, value in given.items():
        if problem := options_of(OptimizationSettings)[name].values.check(value):
            raise SettingsError(f"{short_flag(flag_of(OptimizationSettings, name))} {str(value)!r}: {problem}")
    return OptimizationSettings.load(env_file, **given)


# ---------------------------------------------------------------------- eval, play, plot

TrustModelOption = Annotated[
    bool, typer.Option("--trust-model", help="Use SB3's full loader, which runs pickled code: trusted files only.")
]
EnvFileOption = Annotated[Path | None, typer.Option(help="The .env to read (default: ./.env when present).")]
OutputOption = Annotated[Path, typer.Option(help="Folder for the JSON results.")]
