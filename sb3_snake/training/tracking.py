"""Weights & Biases logging that runs only when asked and never blocks or breaks training.

Only ``--wandb`` (``WandbOptions(enabled=True)``) turns W&B on: without it nothing is imported,
written or contacted, whatever ``WANDB_*`` variables say. With it, those variables configure
the run as in W&B itself (``WANDB_MODE`` wins over ``--wandb-mode``; its legacy value
``dryrun`` means offline). :class:`WandbRun` falls back to offline when online was asked
without credentials, gives W&B's start-up :data:`INIT_TIMEOUT_SECONDS` (``WANDB_INIT_TIMEOUT``
overrides), and goes on without logging, said once, when W&B cannot start. SB3's own training
metrics reach it through :class:`WandbOutput`, an SB3 logger output format.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import KVWriter

from sb3_snake.common.errors import UsageError

logger = logging.getLogger(__name__)

WANDB_MODES = ("online", "offline", "disabled")
#: W&B's own spellings that mean one of WANDB_MODES.
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}
#: Seconds W&B may take to start before training goes on without it.
INIT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class WandbOptions:
    """What ``--wandb``, ``--wandb-project`` and ``--wandb-mode`` ask of a run."""

    enabled: bool = False
    project: str = "sb3-snake"
    mode: str = "online"


def resolve_mode(requested: str) -> str:
    """The W&B mode of a run that asked for W&B: ``WANDB_MODE`` if set, else ``requested``."""
    raw = os.environ.get("WANDB_MODE", requested)
    mode = _MODE_ALIASES.get(raw.strip().lower(), raw.strip().lower())
    if mode not in WANDB_MODES:
        origin = "WANDB_MODE in the environment" if "WANDB_MODE" in os.environ else "--wandb-mode"
        raise UsageError(f"{origin} must be one of {', '.join(WANDB_MODES)} (or dryrun), got {raw!r}")
    return mode


def _has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


class WandbRun:
    """A W&B run, or a stand-in that logs nothing when W&B is off or failed to start.

    :param mode: ``online``, ``offline`` or ``disabled``, used as given; :func:`resolve_mode`
        applies ``WANDB_MODE`` first, and :meth:`off` makes a run that never touches W&B.
    :param notify: where to say what happened (the CLI passes its console printer).
    """

    def __init__(
        self,
        project: str,
        mode: str,
        config: dict[str, Any],
        run_dir: Path,
        name: str | None = None,
        notify: Callable[[str], None] = logger.info,
    ):
        if mode not in WANDB_MODES:
            raise UsageError(f"W&B mode must be one of {', '.join(WANDB_MODES)}, got {mode!r}")
        if mode == "online" and not _has_credentials():
            notify("W&B: no API key found (set WANDB_API_KEY); logging offline instead")
            mode = "offline"
        self.mode = mode
        self.run = None
        if mode == "disabled":
            return
        try:
            import wandb

            self.run = wandb.init(
                project=project,
                name=name,
                mode=mode,
                config=config,
                dir=str(run_dir),
                settings=wandb.Settings(init_timeout=_init_timeout(), silent=True),
            )
        except Exception as error:  # noqa: BLE001 - W&B must never stop training; said once, below
            notify(f"W&B could not start ({type(error).__name__}: {error}); training continues without it")
            self.mode, self.run = "failed", None

    @classmethod
    def off(cls) -> WandbRun:
        """A run that logs nothing and never imports W&B."""
        return cls("", "disabled", {}, Path("."))

    @property
    def active(self) -> bool:
        return self.run is not None

    def log(self, metrics: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log(metrics)

    def finish(self, summary: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(summary)
            self.run.finish()
            self.run = None


def _init_timeout() -> float:
    try:
        return float(os.environ.get("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_SECONDS))
    except ValueError:
        return INIT_TIMEOUT_SECONDS


class WandbOutput(KVWriter):
    """An SB3 logger output that forwards each dump (loss, exploration rate, ...) to W&B."""

    def __init__(self, run: WandbRun):
        self.run = run

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        numbers = {key: value for key, value in key_values.items() if isinstance(value, (int, float))}
        if numbers:
            self.run.log({**numbers, "env_steps": step})

    def close(self) -> None:
        pass
