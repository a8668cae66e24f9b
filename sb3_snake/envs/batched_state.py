"""How :class:`~sb3_snake.envs.batched_games.BatchedGames` stores its games, and how a snake is
written into that store.

The work of a step grows with the number of games, not of cells. Per game: a row of scalars (one row per
quantity, ``HEAD_ROW`` to ``EPISODE_ROW``, each contiguous over games); a *link plane*, one byte per cell,
``0`` off the body, else ``1 + d`` for a body cell whose next cell towards the head lies in direction ``d`` (the
observation's body plane and the body's order at once); and, with the countdown channel, an *entry-step
plane*, the episode step at which the head entered each cell. A step writes two bytes of the link plane and
one value of the entry-step plane.
Design notes: docs/design-notes.md, "sb3_snake/envs/batched_state.py".
"""

from __future__ import annotations

import numpy as np
import torch

from sb3_snake.envs.rules import FOOD, HEAD, NECK, TAIL, SnakeRules

# Rows of the per-game state: flat head, neck and tail cells, direction, snake length, flat
# food cell (-1 when the board is full), steps without food, food eaten, steps in the episode.
HEAD_ROW, NECK_ROW, TAIL_ROW, DIRECTION_ROW, LENGTH_ROW, FOOD_ROW, STEPS_WITHOUT_FOOD_ROW, SCORE_ROW, EPISODE_ROW = (
    range(9)
)
STATE_ROWS = 9
#: Observation channels drawn as one-hot cells from the state, and the state row of each.
ONE_HOT_CHANNELS = ((HEAD, HEAD_ROW), (NECK, NECK_ROW), (TAIL, TAIL_ROW), (FOOD, FOOD_ROW))


def encode_snakes(
    rules: SnakeRules, bodies: np.ndarray, directions: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Games holding the given snakes (flat cells, head first, ``(count, L)``) and no food.

    :return: rows of state ``(count, STATE_ROWS)``, link planes and entry-step planes
        ``(count, cells)``; the head entered its cell at step 0, the cell ``k`` behind it at ``-k``.
    """
    count, length = bodies.shape
    states = np.zeros((count, STATE_ROWS), dtype=np.int64)
    states[:, HEAD_ROW], states[:, NECK_ROW], states[:, TAIL_ROW] = bodies[:, 0], bodies[:, 1], bodies[:, -1]
    states[:, DIRECTION_ROW], states[:, LENGTH_ROW], states[:, FOOD_ROW] = directions, length, -1
    # Each body cell links to the cell before it in the list (one step closer to the head).
    toward_head = np.argmax(rules.neighbor_table()[bodies[:, 1:]] == bodies[:, :-1, None], axis=2)
    links = np.zeros((count, rules.num_cells), dtype=np.uint8)
    links[np.arange(count)[:, None], bodies[:, 1:]] = 1 + toward_head
    entered = np.zeros((count, rules.num_cells), dtype=np.int64)
    entered[np.arange(count)[:, None], bodies] = -np.arange(length)
    states_t, links_t, entered_t = (torch.as_tensor(table, device=device) for table in (states, links, entered))
    return states_t, links_t, entered_t


def start_tables(rules: SnakeRules, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Every possible starting game: rows of state (no food yet), link planes, entry-step
    planes and free cells.

    All starts leave the same number of cells free, so food is a uniform pick from a row of
    the free-cell table: together with a uniform start, the same distribution as
    ``SnakeEnv.reset``.
    """
    bodies, directions = rules.start_states()
    states, links, entered = encode_snakes(rules, bodies, directions, device)
    occupied = links.bool()
    occupied[torch.arange(len(bodies), device=device), states[:, HEAD_ROW]] = True
    free = torch.arange(rules.num_cells, device=device).expand(len(bodies), -1)[~occupied]
    return states, links, entered, free.view(len(bodies), -1)


def copy_rows(destination: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> None:
    """``destination[index] = source`` along dim 0, through the widest integer view the rows allow.

    PyTorch's indexed copies move one element at a time, so copying uint8 rows as int64 words
    moves eight bytes per element instead of one.
    """
    row_bytes = destination[0].numel() * destination.element_size()
    wide = next(
        dtype for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8) if row_bytes % dtype.itemsize == 0
    )
    rows = destination.view(len(destination), -1).view(wide)
    rows.index_copy_(0, index, source.reshape(len(source), -1).view(wide))
