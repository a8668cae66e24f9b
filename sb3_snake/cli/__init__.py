"""The ``sb3-snake`` command line: thin commands that parse options and call the library."""

from sb3_snake.cli.app import app, main

__all__ = ["app", "main"]
