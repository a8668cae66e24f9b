"""What every command shares: the Typer app, one-line user errors, options declared once, signals.

Each option is declared once: ``train``'s options are made from :class:`~sb3_snake.training.config.TrainConfig`'s
fields (name, help, role's panel, default; ``--batch-size`` among them, parsed as a size or
``auto``) and the optimization flags from the settings' declaration
(:meth:`OptimizationSettings.flag <sb3_snake.acceleration.settings.OptimizationSettings.flag>`). An option
left out is ``None`` and falls through to the config's default, to ``.env``, or, on
``--resume``, to what the model trained with.

Every user error, from Click's parser or a :class:`~sb3_snake.common.errors.UsageError` from the
library, is one line on stderr (``error: ...``) and exit code 2 (:func:`fail`); any other
exception is a bug or a failure of the machine and keeps its traceback (exit 1).

The process state belongs here: the CLI sets torch's thread count for the command
(``torch_threads``) and turns SIGINT/SIGTERM into a :class:`~sb3_snake.training.callbacks.StopRequest`.
"""

from __future__ import annotations

import inspect
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import click
import typer
from typer.core import TyperGroup

from sb3_snake.acceleration.settings import COMPILE_MODES, SDPA_BACKENDS, OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.training.tracking import WANDB_MODES

#: Click's exception classes: recent Typer vendors its own Click (``typer._click``), older
#: Typer uses the ``click`` package; both raise usage errors as ``ClickException``.
_CLICK_ERRORS = tuple({click.ClickException, *(getattr(typer, "TyperException", click.ClickException),)})
_ABORTS = tuple({click.exceptions.Abort, typer.Abort})


class OneLineErrors(TyperGroup):
    """Click's usage errors (bad choice, bad number, unknown option) as one line, exit 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except _ABORTS:
            if not standalone_mode:
                raise
            sys.exit(1)
        except _CLICK_ERRORS as error:
            if not standalone_mode:
                raise
            if type(error).__name__ == "NoArgsIsHelpError":  # help shown for a bare command
                error.show()
                sys.exit(0)
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            message = message.replace("Value error, ", "")
            typer.echo(f"error: {' '.join(message.split())}", err=True)
            sys.exit(2)
        if standalone_mode:
            sys.exit(result if isinstance(result, int) else 0)
        return result


app = typer.Typer(
    name="sb3-snake",
    help="Train, evaluate and benchmark Stable-Baselines3 agents on Snake.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineErrors,
)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


WandbMode = Enum("WandbMode", {mode: mode for mode in WANDB_MODES}, type=str)
ONLINE = WandbMode("online")
CompileMode = Enum("CompileMode", {mode: mode for mode in COMPILE_MODES}, type=str)
SdpaBackend = Enum("SdpaBackend", {backend: backend for backend in SDPA_BACKENDS}, type=str)

OPTIMIZATIONS = "Optimizations (override .env)"


def fail(message: str) -> typer.Exit:
    """The one way a command reports a user error: one line on stderr; raise the returned exit (2)."""
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code=2)


@contextmanager
def user_errors() -> Iterator[None]:
    """A :class:`UsageError` becomes :func:`fail` (one line, exit 2); every other exception goes
    on with its traceback (exit 1), so a bug never looks like a user's mistake."""
    try:
        yield
    except UsageError as error:
        raise fail(str(error)) from None


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
    types = {"compile_mode": CompileMode, "sdpa_backend": SdpaBackend, "num_threads": str}
    parameters = []
    for name in OptimizationSettings.__dataclass_fields__:
        if name == "sources":
            continue
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
    overrides = {name: options.pop(name, None) for name in list(OptimizationSettings.__dataclass_fields__)}
    overrides.pop("sources")
    for name in ("compile_mode", "sdpa_backend"):
        if isinstance(overrides.get(name), Enum):
            overrides[name] = overrides[name].value
    if overrides.get("num_threads") is not None:
        overrides["num_threads"] = OptimizationSettings.parse("num_threads", overrides["num_threads"])
    return OptimizationSettings.load(env_file, **overrides)


# ---------------------------------------------------------------------- signals


@contextmanager
def stop_on_signals(stop: Any) -> Iterator[list[int]]:
    """SIGINT/SIGTERM: the first asks the run to stop after this step and save; a second, or
    one before training started, aborts at once (KeyboardInterrupt). Yields the signals seen."""
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        first = not stop.requested
        stop.request(signal.Signals(signum).name)
        if stop.phase in ("preparing", "finished") or not first:
            raise KeyboardInterrupt
        doing = "stopping after this step, saving..." if stop.phase == "training" else "saving..."
        typer.echo(f"{doing} (Ctrl-C again to abort)", err=True)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def signal_exit_code(received: list[int]) -> int:
    """128 + the signal's number, as shells report it: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (received[-1] if received else signal.SIGINT)


# ---------------------------------------------------------------------- eval, play, plot

TrustModelOption = Annotated[
    bool, typer.Option("--trust-model", help="Use SB3's full loader, which runs pickled code: trusted files only.")
]
EnvFileOption = Annotated[Path | None, typer.Option(help="The .env to read (default: ./.env when present).")]
