"""Rendering of Snake boards, shared by both environments.

The cells drawn are the observation's, so what is drawn is what the agent sees. The body's
order is not in a binary body plane, though: a long snake drawn cell by cell is a solid blob
whose path from head to tail cannot be followed, so you cannot see why it died. Both
environments therefore pass the body's cells in order, head first, and the renderers draw the
path: in an image, each segment an inset square joined to the next by a bridge across their
shared edge, shaded from head to tail, so two cells side by side that are not consecutive stay
apart; in text, box-drawing characters that connect along the path. The head and the food have
colours (and characters) of their own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import tile_images

from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import BODY, FOOD, HEAD

#: The render modes of both environments. ``human`` draws the text board on stdout, so that it
#: needs no window library (Gymnasium would otherwise show ``rgb_array`` frames with pygame).
RENDER_MODES = ("human", "ansi", "rgb_array")
#: The frame rate of ``human`` rendering, the environments' ``metadata["render_fps"]``.
RENDER_FPS = 10
CELL_PIXELS = 16
#: How many games a batched env's ``render("rgb_array")`` tiles into one image.
RENDERED_GAMES = 16

#: A body, head first: ``(row, col)`` cells, each next to the one before it.
Body = Sequence[tuple[int, int]]

_BACKGROUND = np.array([24, 24, 24], dtype=np.uint8)
HEAD_COLOR = np.array([250, 210, 60], dtype=np.uint8)
FOOD_COLOR = np.array([230, 60, 60], dtype=np.uint8)
#: The body is shaded from the first colour (behind the head) to the second (the tail).
BODY_COLORS = (np.array([70, 210, 100], dtype=np.float64), np.array([20, 90, 60], dtype=np.float64))

# Text: the body's character joins the sides it connects to along the path (up, right, down, left).
_GLYPHS = {
    frozenset("ud"): "│",
    frozenset("lr"): "─",
    frozenset("dr"): "┌",
    frozenset("dl"): "┐",
    frozenset("ur"): "└",
    frozenset("ul"): "┘",
    frozenset("u"): "╵",
    frozenset("d"): "╷",
    frozenset("l"): "╴",
    frozenset("r"): "╶",
}
_SIDES = {(-1, 0): "u", (1, 0): "d", (0, -1): "l", (0, 1): "r"}


def render_ansi(observation: np.ndarray, body: Body | None = None) -> str:
    """A text board framed by ``#``: ``H`` head, ``*`` food, ``.`` empty, and the body.

    With ``body`` (head first) each body cell is a box-drawing character that connects to the
    cells before and after it, so the path reads from head to tail; without it, ``o``.
    """
    _, rows, cols = observation.shape
    chars = np.full((rows, cols), ".", dtype="<U1")
    chars[observation[BODY].astype(bool)] = "o"
    if body is not None:
        for index in range(1, len(body)):
            chars[body[index]] = _GLYPHS[frozenset(_sides(body, index))]
    chars[observation[FOOD].astype(bool)] = "*"
    chars[observation[HEAD].astype(bool)] = "H"
    border = "#" * (cols + 2)
    lines = [border, *("#" + "".join(row) + "#" for row in chars), border]
    return "\n".join(lines) + "\n"


#: The slowest animation, in frames per second: a frame a minute (a slower one looks stopped,
#: and ``1 / fps`` of a tiny rate overflows the clock); 0 draws without waiting.
MIN_FPS = 1 / 60
#: The fastest animation that still waits between frames: a millisecond a frame.
MAX_FPS = 1000.0


def check_fps(fps: float) -> None:
    """Raise UsageError unless ``fps`` is 0 (no wait) or from :data:`MIN_FPS` to :data:`MAX_FPS`."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (fps == 0 or MIN_FPS <= fps <= MAX_FPS):
        raise UsageError(
            f"fps must be 0 (no wait) or from {MIN_FPS:.4f} (a frame a minute) to {MAX_FPS:g}, got {fps!r}"
        )


def draw_text(frame: str, caption: str = "", out: TextIO | None = None, fps: float = 0.0) -> None:
    """Show a text frame (:func:`render_ansi`) and a caption line on ``out`` (stdout): in a
    terminal over the frame before, waiting ``1 / fps`` seconds after it (0: no wait); elsewhere
    (a file, a pipe) after it. How ``sb3-snake play`` and the ``human`` render mode draw."""
    out = out if out is not None else sys.stdout
    out.write("\x1b[H\x1b[2J" if out.isatty() else "\n")
    out.write(frame + (f"{caption}\n" if caption else ""))
    out.flush()
    if out.isatty() and fps > 0:
        time.sleep(1 / fps)


def render_rgb(observation: np.ndarray, body: Body | None = None, cell_pixels: int = CELL_PIXELS) -> np.ndarray:
    """An ``(rows * cell_pixels, cols * cell_pixels, 3)`` uint8 image of the board.

    Every cell is drawn inset from its edges, so neighbouring cells are apart; with ``body``
    (head first), consecutive segments are joined across their shared edge and shaded from
    head to tail. Without it each body cell stands alone in the first body colour.
    """
    _, rows, cols = observation.shape
    image = np.broadcast_to(_BACKGROUND, (rows * cell_pixels, cols * cell_pixels, 3)).copy()
    inset = max(1, cell_pixels // 5)

    def fill(row: int, col: int, color: np.ndarray) -> None:
        top, left = row * cell_pixels, col * cell_pixels
        image[top + inset : top + cell_pixels - inset, left + inset : left + cell_pixels - inset] = color

    if body is None:
        for row, col in zip(*np.nonzero(observation[BODY]), strict=True):
            fill(row, col, BODY_COLORS[0].astype(np.uint8))
    else:
        for index in range(len(body) - 1, 0, -1):  # tail first, so the head's end is drawn on top
            color = _shade(index, len(body))
            fill(*body[index], color)
            _bridge(image, body[index], body[index - 1], color, cell_pixels, inset)
    for row, col in zip(*np.nonzero(observation[FOOD]), strict=True):
        fill(row, col, FOOD_COLOR)
    for row, col in zip(*np.nonzero(observation[HEAD]), strict=True):
        fill(row, col, HEAD_COLOR)
    return image


def render_tiled(observations: Sequence[np.ndarray], bodies: Sequence[Body] | None = None) -> np.ndarray:
    """Several boards in one image, tiled in a near-square grid as SB3's ``VecEnv.render`` does."""
    bodies = bodies if bodies is not None else [None] * len(observations)
    return tile_images([render_rgb(observation, body) for observation, body in zip(observations, bodies, strict=True)])


def check_render_mode(render_mode: str | None) -> str | None:
    """``render_mode`` if an environment can render that way, else a :class:`UsageError`."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise UsageError(
            f"render_mode must be one of {list(RENDER_MODES)} or None, got {render_mode!r}; "
            "pass 'human' to draw the board on stdout, 'ansi' for it as text or 'rgb_array' for an image"
        )
    return render_mode


def _sides(body: Body, index: int) -> list[str]:
    """The sides of ``body[index]`` that the path leaves by: towards the cell before it and after it."""
    row, col = body[index]
    neighbours = [body[index - 1]] + ([body[index + 1]] if index + 1 < len(body) else [])
    return [_SIDES[(other[0] - row, other[1] - col)] for other in neighbours]


def _shade(index: int, length: int) -> np.ndarray:
    """The colour of segment ``index`` (1: behind the head, ``length - 1``: the tail)."""
    share = (index - 1) / max(1, length - 2)
    return np.rint(BODY_COLORS[0] + share * (BODY_COLORS[1] - BODY_COLORS[0])).astype(np.uint8)


def _bridge(
    image: np.ndarray,
    cell: tuple[int, int],
    towards: tuple[int, int],
    color: np.ndarray,
    cell_pixels: int,
    inset: int,
) -> None:
    """Fill the gap between the inset squares of two neighbouring cells."""
    (row, col), (other_row, other_col) = cell, towards
    if row == other_row:  # side by side: the gap spans the shared vertical edge
        edge = max(col, other_col) * cell_pixels
        top = row * cell_pixels
        image[top + inset : top + cell_pixels - inset, edge - inset : edge + inset] = color
    else:  # one above the other: the gap spans the shared horizontal edge
        edge = max(row, other_row) * cell_pixels
        left = col * cell_pixels
        image[edge - inset : edge + inset, left + inset : left + cell_pixels - inset] = color
