"""The commands' options, declared once: ``train``'s from :class:`~sb3_snake.training.config.TrainConfig`'s
fields (name, help, group, default), the optimization flags from the settings' declarations. An
option left out is ``None`` and falls through to the config's default, to ``.env``, or, on
``--resume``, to what the model trained with.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from sb3_snake.acceleration.settings import COMPILE_MODES, SDPA_BACKENDS, SETTINGS, OptimizationSettings
from sb3_snake.training.tracking import WANDB_MODES


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


WandbMode = Enum("WandbMode", {mode: mode for mode in WANDB_MODES}, type=str)
ONLINE = WandbMode("online")
CompileMode = Enum("CompileMode", {mode: mode for mode in COMPILE_MODES}, type=str)
SdpaBackend = Enum("SdpaBackend", {backend: backend for backend in SDPA_BACKENDS}, type=str)

OPTIMIZATIONS = "Optimizations (override .env)"


# ---------------------------------------------------------------------- options, declared once


def _keyword(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _optional(base: Any, decls: list[str], help: str, panel: str, default_text: str | None) -> Any:
    shown = default_text if default_text is not None else False
    return Annotated[base | None, typer.Option(*decls, help=help, rich_help_panel=panel, show_default=shown)]


def _switch(flag: str) -> list[str]:
    return [flag] if "/" in flag else [f"{flag}/--no-{flag[2:]}"]


def config_parameters() -> list[inspect.Parameter]:
    """One option per TrainConfig field: its flag, help, group and shown default."""
    from sb3_snake.training.config import TrainConfig, option_fields, option_flag

    hints = get_type_hints(TrainConfig)
    parameters = []
    for config_field in option_fields():
        hint = hints[config_field.name]
        base = next((arg for arg in getattr(hint, "__args__", (hint,)) if arg is not type(None)), hint)
        flag = option_flag(config_field.name)
        base = {"device": Device, "tensorboard_log": Path}.get(config_field.name, base)
        if config_field.metadata["values"] is not None:
            base = str  # parsed as its field declares (training.options.parse_option)
        decls = _switch(flag) if base is bool else [flag]
        default = config_field.default
        shown = None if default is None or base is bool else str(default)
        meta = config_field.metadata
        panel = meta["role"].group
        parameters.append(_keyword(config_field.name, _optional(base, decls, meta["help"], panel, shown)))
    return parameters


def settings_parameters() -> list[inspect.Parameter]:
    """One option per optimization setting, with the flag the settings declare, and ``--env-file``."""
    types = {"compile_mode": CompileMode, "sdpa_backend": SdpaBackend, "num_threads": str, "compile_after": str}
    parameters = []
    for name in SETTINGS:  # the declared settings, not the record fields (sources, auto_record)
        flag, help = OptimizationSettings.flag(name), OptimizationSettings.help(name)
        base = types.get(name, bool)
        decls = _switch(flag) if base is bool else [flag]
        parameters.append(_keyword(name, _optional(base, decls, help, OPTIMIZATIONS, None)))
    env_file = Annotated[
        Path | None,
        typer.Option(help="The .env to read (default: ./.env when present).", rich_help_panel=OPTIMIZATIONS),
    ]
    return [*parameters, _keyword("env_file", env_file)]


def batch_size_parameter(help: str) -> inspect.Parameter:
    """``--batch-size`` for a command that takes it without the rest of TrainConfig's options,
    with the flag's spelling and panel of ``train``'s."""
    return _keyword("batch_size", _optional(str, ["--batch-size"], help, OPTIMIZATIONS, None))


def with_parameters(*groups: list[inspect.Parameter]) -> Callable[[Callable], Callable]:
    """Give a ``def command(**options)`` the signature Typer reads its options from."""

    def decorate(command: Callable) -> Callable:
        # eval_str: the module's annotations are strings (PEP 563); Typer reads a __signature__ as
        # it is, so unevaluated, its Annotated options would lose their help, panel and flags
        own = list(inspect.signature(command, eval_str=True).parameters.values())[:-1]  # all but **options
        command.__signature__ = inspect.Signature([*own, *(p for group in groups for p in group)])
        return command

    return decorate


def load_settings(env_file: Path | None, options: dict[str, Any]) -> OptimizationSettings:
    """Settings from the command's optimization options (popped from ``options``) over .env."""
    overrides = {name: options.pop(name, None) for name in SETTINGS}
    for name in ("compile_mode", "sdpa_backend"):
        if isinstance(overrides.get(name), Enum):
            overrides[name] = overrides[name].value
    for name in ("num_threads", "compile_after"):  # text, parsed as the setting declares
        if overrides.get(name) is not None:
            overrides[name] = OptimizationSettings.parse(name, overrides[name])
    return OptimizationSettings.load(env_file, **overrides)


# ---------------------------------------------------------------------- eval, play, plot

TrustModelOption = Annotated[
    bool, typer.Option("--trust-model", help="Use SB3's full loader, which runs pickled code: trusted files only.")
]
EnvFileOption = Annotated[Path | None, typer.Option(help="The .env to read (default: ./.env when present).")]
