"""Which moves do not die at once: read from the boards themselves, for any batch of them.

A move dies at once when the head would leave the board or enter the body; the tail's cell is
free (the tail leaves it as the head arrives, and food never lies on it). With the egocentric
view the snake moves up the board it is shown, so its three turns are fixed cells beside the
head; with absolute actions the heading is the cell from the neck to the head, and the move
back into the neck goes straight on, as the rules say. Both envs offer these masks
(``action_masks()``), and safe exploration draws its random moves among them
(:class:`~sb3_snake.SnakeDQN`'s ``safe_exploration``).
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from sb3_snake.envs.rules import BODY, CHANNEL_COUNTS, DIRECTION_DELTAS, HEAD, NECK, TAIL

#: ``(row, col)`` of the head's move in the egocentric view for each turn: left, straight, right.
EGOCENTRIC_DELTAS = ((0, -1), (-1, 0), (0, 1))


def cell_index(boards: torch.Tensor, channel: int) -> torch.Tensor:
    """``(N,)``: the flat index (row * n + column) of the cell that ``channel`` marks on each of
    the ``(N, C, n, n)`` boards (the head, the neck, the food). An argmax of floats, not of the
    uint8 boards: compiled for the CPU (torch 2.13), inductor miscompiles an argmax over uint8, and
    a compiled gradient step read the wrong cells."""
    return boards[:, channel].flatten(1).float().argmax(dim=1)


def action_masks(observations: torch.Tensor | np.ndarray, egocentric: bool) -> torch.Tensor:
    """``(N, 3)`` (``egocentric``) or ``(N, 4)`` booleans: True where the move of a game in
    ``observations`` (``(N, C, n, n)`` Snake boards of games in play) does not die at once.

    A walled-in snake has no True in its row.
    """
    boards = torch.as_tensor(observations)
    games, n = boards.shape[0], boards.shape[-1]
    head = cell_index(boards, HEAD)
    head_cell = torch.stack((head // n, head % n), dim=1)  # (N, 2)
    if egocentric:
        deltas = torch.tensor(EGOCENTRIC_DELTAS, device=boards.device).expand(games, -1, -1)
    else:
        deltas = _absolute_deltas(boards, head_cell)
    cells = head_cell[:, None, :] + deltas  # (N, A, 2)
    inside = ((cells >= 0) & (cells < n)).all(dim=2)
    flat = cells.clamp(0, n - 1) @ torch.tensor([n, 1], device=boards.device)
    blocked = ((boards[:, BODY] != 0) & (boards[:, TAIL] == 0)).flatten(1)
    return inside & ~blocked.gather(1, flat)


def _absolute_deltas(boards: torch.Tensor, head_cell: torch.Tensor) -> torch.Tensor:
    """The head's move for each of the four directions, the one back into the neck going straight."""
    n = boards.shape[-1]
    neck = cell_index(boards, NECK)
    heading = head_cell - torch.stack((neck // n, neck % n), dim=1)  # (N, 2), one of the four deltas
    table = torch.as_tensor(DIRECTION_DELTAS, device=boards.device)  # (4, 2)
    backwards = (table[None, :, :] == -heading[:, None, :]).all(dim=2)  # (N, 4)
    return torch.where(backwards[:, :, None], heading[:, None, :], table[None, :, :])


def is_snake_board(observation_space: spaces.Space, action_space: spaces.Space) -> bool:
    """Whether observations of ``observation_space`` are Snake boards :func:`action_masks` can
    read, with the three turns or four directions of ``action_space``."""
    shape = getattr(observation_space, "shape", None) or ()
    return (
        isinstance(observation_space, spaces.Box)
        and isinstance(action_space, spaces.Discrete)
        and int(action_space.n) in (3, 4)
        and len(shape) == 3
        and shape[0] in CHANNEL_COUNTS
        and shape[1] == shape[2]
    )


def random_safe_actions(masks: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One move per row of ``masks`` drawn uniformly among its safe ones (among all, where none is)."""
    weights = masks.float()
    weights[~masks.any(dim=1)] = 1.0
    return torch.multinomial(weights, 1, generator=generator).squeeze(1)
