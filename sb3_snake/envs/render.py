"""Rendering of a Snake observation, shared by both environments.

Both renderers work from the observation alone, so what is drawn is exactly what the
agent sees.
"""

from __future__ import annotations

import numpy as np

from sb3_snake.envs.rules import BODY, FOOD, HEAD

CELL_PIXELS = 16
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
