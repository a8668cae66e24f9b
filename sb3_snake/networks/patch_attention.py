"""``PatchAttentionExtractor``: patches of the board as tokens, self-attention among them, and every
token read out in its place: PQN's attention network.

The board is cut into ``patch_size`` x ``patch_size`` patches (:func:`~sb3_snake.networks.attention.cut_patches`,
2x2 on 10x10), each embedded linearly with a learned embedding of its place. ``num_layers`` blocks let
every token attend to every other (``scaled_dot_product_attention``, so the optimization layer's
attention kernel applies) in a pre-norm residual block. The tokens are then normalised and read
out together, in place, by one LayerNorm layer: no pooling, so where each cell lies is never
averaged away. Design notes: docs/design-notes.md, "sb3_snake/networks/patch_attention.py".
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from sb3_snake.networks.attention import SelfAttention, cut_patches


def default_patch_size(board_size: int) -> int:
    """2 cells a side on boards of 8 and more (25 tokens on 10x10), else 1: few enough tokens that
    attention costs little beside the readout."""
    return 2 if board_size >= 8 else 1


class AttentionBlock(nn.Module):
    """``x + attention(norm(x))``: pre-norm self-attention added to the tokens (no MLP: the
    readout after the blocks is the network's nonlinearity)."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.norm = nn.LayerNorm(embed_dim)
        self.attention = SelfAttention(embed_dim, num_heads)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens + self.attention(self.norm(tokens))


class PatchAttentionExtractor(BaseFeaturesExtractor):
    """Transformer features extractor for ``(C, H, W)`` boards that keeps every token's place.

    :param observation_space: a ``Box`` of shape ``(C, H, W)``, any board size from 4 up.
    :param features_dim: size of the output vector (the readout layer's width).
    :param embed_dim: token width.
    :param num_heads: attention heads (must divide ``embed_dim``).
    :param num_layers: attention blocks (:class:`AttentionBlock`; 0: the token embedding read out alone).
    :param patch_size: cells per token side; ``None`` picks :func:`default_patch_size`.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        features_dim: int = 256,
        embed_dim: int = 32,
        num_heads: int = 2,
        num_layers: int = 1,
        patch_size: int | None = None,
    ):
        if len(observation_space.shape) != 3:
            raise ValueError(
                f"PatchAttentionExtractor needs (C, H, W) observations, got shape {observation_space.shape}"
            )
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        self.patch_size = patch_size or default_patch_size(max(height, width))
        grid = (math.ceil(height / self.patch_size), math.ceil(width / self.patch_size))
        self.padding = (0, grid[1] * self.patch_size - width, 0, grid[0] * self.patch_size - height)
        tokens = grid[0] * grid[1]
        self.embed = nn.Linear(channels * self.patch_size**2, embed_dim)
        self.position = nn.Parameter(torch.randn(1, tokens, embed_dim) * 0.02)
        self.blocks = nn.ModuleList(AttentionBlock(embed_dim, num_heads) for _ in range(num_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Sequential(nn.Linear(tokens * embed_dim, features_dim), nn.LayerNorm(features_dim), nn.ReLU())
        high = np.asarray(observation_space.high, dtype=np.float32).reshape(channels, -1).max(axis=1)
        scaled = np.isfinite(high) & (high > 1)
        scale = torch.as_tensor(np.where(scaled, 1.0 / high, 1.0)).view(-1, 1, 1) if scaled.any() else None
        self.register_buffer("input_scale", scale, persistent=False)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            observations = observations * self.input_scale.to(observations.dtype)
        board = F.pad(observations, self.padding) if any(self.padding) else observations
        tokens = self.embed(cut_patches(board, self.patch_size)) + self.position
        for block in self.blocks:
            tokens = block(tokens)
        return self.readout(self.norm(tokens).flatten(1))
