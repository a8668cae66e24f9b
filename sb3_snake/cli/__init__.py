"""The ``sb3-snake`` command line: thin commands that parse options and call the library.

One module per command group (``train``: train, eval, play, plot; ``benchmark``; ``tune``);
``common`` holds the app, the one-line errors, the options declared once, and signals.
Importing a group registers its commands, in the order ``--help`` lists them.
"""

from importlib import import_module

from sb3_snake.cli.common import app

for _group in ("train", "benchmark", "tune"):
    import_module(f"sb3_snake.cli.{_group}")

__all__ = ["app", "main"]


def main() -> None:
    app()
