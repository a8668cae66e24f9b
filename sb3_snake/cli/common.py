"""What every command shares: the Typer app, one-line user errors, and signals.

The options themselves are declared once, in :mod:`sb3_snake.cli.options`. Every user error, from Click's parser
or a :class:`~sb3_snake.common.errors.UsageError` from the library, is one line on stderr (``error: ...``) and
exit code 2 (:func:`fail`). A file that could not be written (:class:`~sb3_snake.common.errors.OutputError`: a
full disk) is one line naming it, exit code 1; any other exception is a bug or a failure of the machine and keeps
its traceback (exit 1). The process state belongs here: the CLI sets torch's thread count for the command
(``torch_threads``), turns SIGINT/SIGTERM into a :class:`~sb3_snake.training.callbacks.StopRequest`, and imports
torch's compiler past an unusable compile cache folder
(:func:`~sb3_snake.common.system.import_compiler_despite_cache`), so that every command runs, compile off.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from sb3_snake.common.errors import DIRECTIONS, FixableError, OutputError, UsageError, fix_words
from sb3_snake.common.interrupts import defer_interrupt
from sb3_snake.common.system import import_compiler_despite_cache

#: Click's exception classes: recent Typer vendors its own Click (``typer._click``), older
#: Typer uses the ``click`` package; both raise usage errors as ``ClickException``.
_CLICK_ERRORS = tuple({click.ClickException, *(getattr(typer, "TyperException", click.ClickException),)})
_ABORTS = tuple({click.exceptions.Abort, typer.Abort})


class OneLineErrors(TyperGroup):
    """Click's usage errors (bad choice, bad number, unknown option) as one line, exit 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        import_compiler_despite_cache()  # before any command: torch imports its compiler, compile or not
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


def _print_version(asked: bool) -> None:
    if asked:
        from sb3_snake import __version__

        typer.echo(f"sb3-snake {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the installed version and exit."),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also log what the package notes on the way (INFO) on stderr.")
    ] = False,
) -> None:
    """Train, evaluate and benchmark Stable-Baselines3 agents on Snake."""
    if verbose:
        package = logging.getLogger("sb3_snake")
        for previous in [handler for handler in package.handlers if handler.get_name() == "--verbose"]:
            package.removeHandler(previous)  # a second command in one process (tests) logs once
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name("--verbose")
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        package.addHandler(handler)
        package.setLevel(logging.INFO)


def fail(message: str, code: int = 2) -> typer.Exit:
    """The one way a command reports an error without a traceback: one line on stderr; raise the
    returned exit (2, a user error, unless ``code`` says otherwise)."""
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code=code)


#: Flags whose names are not the library's argument names with dashes.
FLAG_NAMES = {"trusted": "trust-model", "run_dir": "output"}


def flag(argument: str, value: Any) -> str:
    """A library argument (and the value a fix gives it) as this command line's flag."""
    name = FLAG_NAMES.get(argument, argument.replace("_", "-"))
    if value is True or value is False:
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name}" if value in DIRECTIONS else f"--{name} {value}"


def in_flags(error: BaseException) -> str:
    """``error`` as the command line says it: the arguments of a fix as flags (:class:`FixableError`)."""
    if isinstance(error, FixableError) and error.fix:
        return f"{error.message}; {fix_words(error.fix, flag)}"
    return str(error)


@contextmanager
def user_errors() -> Iterator[None]:
    """A :class:`UsageError` becomes :func:`fail` (one line, exit 2), an :class:`OutputError` one
    line with exit 1; every other exception goes on with its traceback (exit 1), so a bug never
    looks like a user's mistake."""
    try:
        yield
    except UsageError as error:
        raise fail(in_flags(error)) from None
    except OutputError as error:
        raise fail(str(error), code=1) from None


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

    with _handling(handle):
        yield received


@contextmanager
def interrupt_on_signals() -> Iterator[list[int]]:
    """SIGTERM as SIGINT: both raise KeyboardInterrupt, so a command that cleans up on Ctrl-C
    (``tune`` marks its running trial failed) does the same when a scheduler or ``kill`` stops it.
    Yields the signals seen, for :func:`signal_exit_code`."""
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        if not defer_interrupt():  # a store being written is left whole (common.interrupts)
            raise KeyboardInterrupt

    with _handling(handle):
        yield received


@contextmanager
def _handling(handle: Any) -> Iterator[None]:
    """``handle`` for SIGINT and SIGTERM inside, the previous handlers restored on leaving."""
    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def signal_exit_code(received: list[int]) -> int:
    """128 + the signal's number, as shells report it: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + (received[-1] if received else signal.SIGINT)
