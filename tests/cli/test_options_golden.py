"""Every command's options as Typer builds them (flags, type, default, help, panel), against a
stored copy: a change to how options are declared or generated shows here as a diff, not as a
help page that quietly lost a flag. Regenerate on purpose with
``python tests/cli/test_options_golden.py`` and review the diff."""

import json
import sys
from pathlib import Path

import typer

from sb3_snake.cli import app

GOLDEN = Path(__file__).parent / "golden" / "options.json"


def _plain(value: object) -> object:
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


def described() -> dict[str, list[dict[str, object]]]:
    """Each command's parameters, in order, as plain JSON."""
    group = typer.main.get_command(app)
    commands = {}
    for name, command in sorted(group.commands.items()):
        context = typer.Context(command)
        commands[name] = [
            {
                "name": parameter.name,
                "flags": [*parameter.opts, *parameter.secondary_opts],
                "type": _plain(parameter.display_type(context)),
                "default": _plain(parameter.default),
                "required": parameter.required,
                "help": getattr(parameter, "help", None),
                "panel": getattr(parameter, "rich_help_panel", None),
                "shown_default": str(getattr(parameter, "show_default", None)),
            }
            for parameter in command.params
        ]
    return commands


def test_every_commands_options_are_as_stored():
    stored = json.loads(GOLDEN.read_text())
    now = described()
    assert sorted(now) == sorted(stored)
    for command in stored:
        assert now[command] == stored[command], f"sb3-snake {command}'s options changed; see the module docstring"


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(described(), indent=1) + "\n")
    sys.exit(0)
