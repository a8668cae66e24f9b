"""Rendering of Snake observations, shared by both environments.

Every renderer works from observations alone, so what is drawn is exactly what the agent sees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import tile_images

from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import BODY, FOOD, HEAD

#: The render modes of both environments.
RENDER_MODES = ("ansi", "rgb_array")
CELL_PIXELS = 16
#: How many games a batched env's ``render("rgb_array")`` tiles into one image.
RENDERED_GAMES = 16
_BACKGROUND = np.array([24, 24, 24], dtype=np.uint8)
_COLORS = {
    BODY: np.array([40, 160, 60], dtype=np.uint8),
    HEAD: np.array([130, 230, 90], dtype=np.uint8),
    FOOD: np.array([220, 50, 50], dtype=np.uint8),
}


def render_ansi(observation: np.ndarray) -> str:
    """A text board: ``H`` head, ``o`` body, ``*`` food, ``.`` empty, framed by ``#``."""
    _, rows, cols = observation.shape
    chars = np.full((rows, cols), ".", dtype="<U1")
    chars[observation[BODY].astype(bool)] = "o"
    chars[observation[FOOD].astype(bool)] = "*"
    chars[observation[HEAD].astype(bool)] = "H"
    border = "#" * (cols + 2)
    lines = [border, *("#" + "".join(row) + "#" for row in chars), border]
    return "\n".join(lines) + "\n"


def render_rgb(observation: np.ndarray, cell_pixels: int = CELL_PIXELS) -> np.ndarray:
    """An ``(rows * cell_pixels, cols * cell_pixels, 3)`` uint8 image of the board."""
    _, rows, cols = observation.shape
    image = np.broadcast_to(_BACKGROUND, (rows, cols, 3)).copy()
    for channel in (BODY, FOOD, HEAD):
        image[observation[channel].astype(bool)] = _COLORS[channel]
    return image.repeat(cell_pixels, axis=0).repeat(cell_pixels, axis=1)


def render_tiled(observations: Sequence[np.ndarray]) -> np.ndarray:
    """Several boards in one image, tiled in a near-square grid as SB3's ``VecEnv.render`` does."""
    return tile_images([render_rgb(observation) for observation in observations])


def check_render_mode(render_mode: str | None) -> str | None:
    """``render_mode`` if an environment can render that way, else a :class:`UsageError`."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise UsageError(
            f"render_mode must be one of {list(RENDER_MODES)} or None, got {render_mode!r}; "
            "pass 'ansi' for a text board or 'rgb_array' for an image"
        )
    return render_mode
