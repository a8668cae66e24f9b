"""``SnakeAttentionExtractor``: a small transformer over the board for SB3 policies.

The board becomes a sequence of tokens: each ``patch_size`` x ``patch_size`` patch of cells
(one cell per token on small boards) is flattened and linearly embedded, and learned row and
column embeddings are added. ``num_layers`` pre-norm transformer blocks follow, whose attention
is ``torch.nn.functional.scaled_dot_product_attention``, so the SDPA backend chosen by the
optimization layer (FlashAttention or not) applies. A learned query attends over the tokens to
pool them (again through SDPA), and a linear layer maps the pooled vector to ``features_dim``.

Padding that makes the board a multiple of the patch size is zeros; a patch's padding pattern
is fixed by its position, so the learned position embedding of that token is what tells the
network which of its cells lie off the board.

Patches are cut with ``view``/``permute`` (one copy), not ``F.unfold``: on CPU ``unfold`` loops
over the batch and took most of the forward pass.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

#: Boards up to this many cells get one token per cell; larger ones use patches.
MAX_CELL_TOKENS = 64


def default_patch_size(board_size: int) -> int:
    """The smallest patch size that keeps the token count at or below ``MAX_CELL_TOKENS``."""
    return max(1, math.ceil(board_size / math.isqrt(MAX_CELL_TOKENS)))


def cut_patches(board: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``(B, C, rows * p, cols * p)`` -> ``(B, rows * cols, C * p * p)``: one row per patch,
    patches in row-major order, each flattened channel-first (as ``F.unfold`` orders them)."""
    batch, channels, height, width = board.shape
    p = patch_size
    return (
        board.reshape(batch, channels, height // p, p, width // p, p)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(batch, (height // p) * (width // p), channels * p * p)
    )


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``scaled_dot_product_attention``."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, dim // self.num_heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).reshape(batch, tokens, dim))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, embed_dim: int, num_heads: int, mlp_ratio: int):
        super().__init__()
        self.attention_norm = nn.LayerNorm(embed_dim)
        self.attention = SelfAttention(embed_dim, num_heads)
        self.mlp_norm = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, mlp_ratio * embed_dim), nn.GELU(), nn.Linear(mlp_ratio * embed_dim, embed_dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class AttentionPool(nn.Module):
    """One learned query attending over all tokens (through SDPA), per head."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Parameter(torch.zeros(1, num_heads, 1, embed_dim // num_heads))
        self.norm = nn.LayerNorm(embed_dim)
        self.kv = nn.Linear(embed_dim, 2 * embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        k, v = (
            self.kv(self.norm(x)).view(batch, tokens, 2, self.num_heads, dim // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        query = self.query.expand(batch, -1, -1, -1).to(k.dtype)
        return F.scaled_dot_product_attention(query, k, v).reshape(batch, dim)


class SnakeAttentionExtractor(BaseFeaturesExtractor):
    """Transformer features extractor for ``(C, H, W)`` board observations.

    Use it like any SB3 extractor, e.g. ``policy_kwargs={"features_extractor_class":
    SnakeAttentionExtractor, "features_extractor_kwargs": {"embed_dim": 32}}``; the
    ``AttentionPolicy`` of :class:`~sb3_snake.SnakeDQN` uses it by default.

    The default sizes are small on purpose: they train at about 11,000 gradient samples/s
    (batch 256, fp32) on a 2-core CPU, where two blocks of width 32 managed about 4,300 and
    one block of width 64 about 5,300 (README, "Measured performance").

    :param observation_space: a ``Box`` of shape ``(C, H, W)``, any board size from 4 up.
    :param features_dim: size of the output vector.
    :param embed_dim: token width.
    :param num_heads: attention heads (must divide ``embed_dim``).
    :param num_layers: transformer blocks.
    :param mlp_ratio: hidden width of each block's MLP, as a multiple of ``embed_dim``.
    :param patch_size: cells per token side; ``None`` picks :func:`default_patch_size`.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        features_dim: int = 128,
        embed_dim: int = 32,
        num_heads: int = 2,
        num_layers: int = 1,
        mlp_ratio: int = 2,
        patch_size: int | None = None,
    ):
        if len(observation_space.shape) != 3:
            raise ValueError(
                f"SnakeAttentionExtractor needs (C, H, W) observations, got shape {observation_space.shape}"
            )
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        self.patch_size = patch_size or default_patch_size(max(height, width))
        self.grid = (math.ceil(height / self.patch_size), math.ceil(width / self.patch_size))
        self.padding = (0, self.grid[1] * self.patch_size - width, 0, self.grid[0] * self.patch_size - height)
        patch_inputs = channels * self.patch_size**2
        self.embed = nn.Linear(patch_inputs, embed_dim)
        self.row_embedding = nn.Parameter(torch.randn(self.grid[0], 1, embed_dim) * 0.02)
        self.col_embedding = nn.Parameter(torch.randn(1, self.grid[1], embed_dim) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(embed_dim, num_heads, mlp_ratio) for _ in range(num_layers))
        self.pool = AttentionPool(embed_dim, num_heads)
        self.head = nn.Sequential(nn.Linear(embed_dim, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        board = F.pad(observations, self.padding) if any(self.padding) else observations
        patches = cut_patches(board, self.patch_size)
        positions = (self.row_embedding + self.col_embedding).reshape(1, -1, self.row_embedding.shape[-1])
        tokens = self.embed(patches) + positions
        for block in self.blocks:
            tokens = block(tokens)
        return self.head(self.pool(tokens))
