"""The ``sb3-snake`` command line: thin commands that parse options and call the library.

One module per command group (``train``: train, eval, play, plot; ``benchmark``: the speed
benchmarks; ``learning``: benchmark-learning; ``tune``); ``common`` holds the app, the one-line
errors, the options declared once, and signals. Importing a group registers its commands, in the
order ``--help`` lists them.
"""

import faulthandler
from importlib import import_module

from sb3_snake.cli.common import app

for _group in ("train", "benchmark", "learning", "tune"):
    import_module(f"sb3_snake.cli.{_group}")

__all__ = ["app", "main"]


def main() -> None:
    # A crash in native code (a segfault in a kernel or a compiler thread) then prints every
    # thread's Python stack on stderr, instead of ending the process with nothing said.
    faulthandler.enable()
    app()
