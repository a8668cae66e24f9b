"""The eight symmetries of the square board, used to augment replayed transitions.

Snake's rules look the same after rotating the board by a multiple of 90 degrees or mirroring it, the absolute
actions turned with it, so ``Q(g(s), g(a)) = Q(s, a)`` for each symmetry ``g``, and each replayed transition is
shown under a random one of the eight. A symmetry is a permutation of the board's cells, applied to every
observation channel alike, and a permutation of the four actions. Egocentric boards keep one symmetry besides
the identity: the mirror image, which swaps left and right.
Design notes: docs/design-notes.md, "sb3_snake/q_learning/symmetry.py".
"""

from __future__ import annotations

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.envs.rules import DIRECTION_DELTAS

#: How many symmetries the square has: four rotations, each with or without a mirror.
NUM_SYMMETRIES = 8
#: The mirror image without a turn: columns reversed.
MIRROR = 4


def _apply(grid: torch.Tensor, symmetry: int) -> torch.Tensor:
    """Symmetry ``symmetry`` (0 is the identity) of the last two dimensions of ``grid``."""
    rotated = torch.rot90(grid, symmetry % 4, dims=(-2, -1))
    return rotated.flip(-1) if symmetry >= 4 else rotated


def cell_permutations(board_size: int) -> torch.Tensor:
    """``perm[g, p]``: the flat cell whose content lands on cell ``p`` under symmetry ``g``, ``(8, cells)``."""
    grid = torch.arange(board_size * board_size).view(board_size, board_size)
    return torch.stack([_apply(grid, g).reshape(-1) for g in range(NUM_SYMMETRIES)])


def action_permutations() -> torch.Tensor:
    """``actions[g, a]``: the action that symmetry ``g`` turns action ``a`` into, ``(8, 4)``.

    Found by moving a marked cell one step in direction ``a`` on a 3x3 board and seeing
    where the step points once the board is transformed.
    """
    table = torch.empty((NUM_SYMMETRIES, 4), dtype=torch.int64)
    for action, (d_row, d_col) in enumerate(DIRECTION_DELTAS.tolist()):
        board = torch.zeros(3, 3, dtype=torch.int64)
        board[1, 1], board[1 + d_row, 1 + d_col] = 1, 2
        for g in range(NUM_SYMMETRIES):
            moved = _apply(board, g)
            start, end = (torch.nonzero(moved == mark)[0] for mark in (1, 2))
            table[g, action] = DIRECTION_DELTAS.tolist().index((end - start).tolist())
    return table


class SymmetryAugmentation:
    """Transforms each sampled transition by a random one of the board's eight symmetries.

    :param board_size: side of the square board.
    :param device: where the replayed batches live.
    """

    def __init__(self, board_size: int, device: torch.device | str = "cpu", egocentric: bool = False):
        # Draws from a generator of its own, seeded from torch's (so SB3's seed still decides
        # them): whatever else draws from torch's global generator (dynamo saves and restores
        # it around a trace) leaves the augmentation's draws as they are. A captured CUDA graph
        # must be told of it (CapturedSteps registers it).
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(int(torch.randint(2**62, ()).item()))
        self.cells = cell_permutations(board_size).to(device)
        if egocentric:
            # Egocentric boards all show the snake moving up, so the one symmetry that keeps
            # them so is the mirror (4: no turn, mirrored), which swaps the turns left and right.
            self.symmetries = torch.tensor([0, MIRROR], device=device)
            self.actions = torch.tensor([[0, 1, 2]] * NUM_SYMMETRIES, device=device)
            self.actions[MIRROR] = torch.tensor([2, 1, 0], device=device)
        else:
            self.symmetries = torch.arange(NUM_SYMMETRIES, device=device)
            self.actions = action_permutations().to(device)

    def transform(self, observations: torch.Tensor, symmetries: torch.Tensor) -> torch.Tensor:
        """Observations ``(B, C, H, W)`` with sample ``i`` under symmetry ``symmetries[i]``."""
        batch, channels = observations.shape[:2]
        flat = observations.reshape(batch, channels, -1)
        index = self.cells.index_select(0, symmetries).unsqueeze(1).expand(-1, channels, -1)
        return flat.gather(2, index).view_as(observations)

    def draw(self, count: int) -> torch.Tensor:
        """``count`` symmetries drawn uniformly among this board's."""
        draws = torch.randint(len(self.symmetries), (count,), device=self.symmetries.device, generator=self.generator)
        return self.symmetries[draws]

    def __call__(self, samples: ReplayBufferSamples, symmetries: torch.Tensor | None = None) -> ReplayBufferSamples:
        """``samples`` with transition ``i`` under symmetry ``symmetries[i]`` (default: uniform draws)."""
        if symmetries is None:
            symmetries = self.draw(len(samples.actions))
        actions = self.actions[symmetries.unsqueeze(1), samples.actions.long()].to(samples.actions.dtype)
        return samples._replace(
            observations=self.transform(samples.observations, symmetries),
            next_observations=self.transform(samples.next_observations, symmetries),
            actions=actions,
        )
