"""The one way the package makes a Rich console: text printed as text.

Paths, run names, model files, ``.env`` values, cached evidence and error messages come from
outside, and Rich would read ``[red]`` or ``[/]`` in them as markup: a path would print changed,
or the print would raise ``MarkupError``. The package writes no markup of its own, so its consoles
read none (and highlight nothing: logs stay plain text).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console


def plain_console(**kwargs: Any) -> Console:
    """A Rich console that prints every string as it is (``markup=False``, ``highlight=False``)."""
    return Console(markup=False, highlight=False, **kwargs)
