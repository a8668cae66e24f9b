"""Weights & Biases logging that never blocks or breaks training.

:class:`WandbRun` starts a run in the mode asked for, falls back to offline when online was
asked without credentials, and to no logging at all (said once, on the console) when W&B
cannot start. SB3's own training metrics reach it through :class:`WandbOutput`, an SB3 logger
output format.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import KVWriter

logger = logging.getLogger(__name__)

WANDB_MODES = ("online", "offline", "disabled")


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

    :param mode: ``online``, ``offline`` or ``disabled``; ``WANDB_MODE`` in the environment
        wins, as in W&B itself.
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
        mode = os.environ.get("WANDB_MODE", mode)
        if mode not in WANDB_MODES:
            raise ValueError(f"W&B mode must be one of {', '.join(WANDB_MODES)}, got {mode!r}")
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
                settings=wandb.Settings(init_timeout=60, silent=True),
            )
        except Exception as error:  # noqa: BLE001 - W&B must never stop training; said once, below
            notify(f"W&B could not start ({type(error).__name__}: {error}); training continues without it")
            self.mode, self.run = "failed", None

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
