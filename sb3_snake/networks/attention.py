"""``SnakeAttentionExtractor``: a small transformer over the board for SB3 policies.

The board becomes tokens: each ``patch_size`` x ``patch_size`` patch of cells (one cell per token on small
boards, :func:`default_patch_size`) is cut channels-last (:func:`cut_patches`), linearly embedded, and given
learned row and column embeddings; padding is zeros. ``num_layers`` pre-norm transformer blocks follow, then a
learned query pools the tokens (:class:`AttentionPool`); all attention is
``torch.nn.functional.scaled_dot_product_attention``, so the optimization layer's SDPA backend applies. Beside
it a :class:`HeadView` (the board re-centred on the head, one linear layer); the two feature vectors are
concatenated. Every input channel is scaled into [0, 1] by the observation space's finite upper bound.
Design notes: docs/design-notes.md, "sb3_snake/networks/attention.py".
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from sb3_snake.envs.rules import HEAD

#: Boards up to this many cells get one token per cell; larger ones use patches.
MAX_CELL_TOKENS = 64


def default_patch_size(board_size: int) -> int:
    """The smallest patch size that keeps the token count at or below ``MAX_CELL_TOKENS``."""
    return max(1, math.ceil(board_size / math.isqrt(MAX_CELL_TOKENS)))


def cut_patches(board: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``(B, C, rows * p, cols * p)`` -> ``(B, rows * cols, p * p * C)``: one row per patch,
    patches in row-major order, each flattened row, column, channel (channels last).

    The board is made channels-last first, so the copy that gathers a patch moves runs of
    ``p * C`` contiguous values; cutting channel-first patches (``F.unfold``'s order) in one
    permute moves single values, and that copy was nearly all of the patch embedding's time.
    """
    batch, channels, height, width = board.shape
    p = patch_size
    return (
        board.permute(0, 2, 3, 1)
        .reshape(batch, height // p, p, width // p, p * channels)
        .transpose(2, 3)
        .reshape(batch, (height // p) * (width // p), p * p * channels)
    )


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``scaled_dot_product_attention``."""

    #: Runs SDPA, so the optimization layer's attention kernel acts on it (:func:`calls_sdpa`).
    calls_sdpa = True

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
    """One learned query per head attending over all tokens (through SDPA).

    The query is folded through the key map (``W_k^T q``, one query row per head of one SDPA call over the
    normalised tokens) and the value map ``W_v`` is applied once to each head's pooled vector: the same
    function of the same parameters (``query``, ``norm``, ``kv``; saved models load unchanged), without
    the ``(batch, tokens, 2 * embed_dim)`` keys and values. Design notes: docs/design-notes.md,
    "sb3_snake/networks/attention.py".
    """

    calls_sdpa = True

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Parameter(torch.zeros(1, num_heads, 1, embed_dim // num_heads))
        self.norm = nn.LayerNorm(embed_dim)
        self.kv = nn.Linear(embed_dim, 2 * embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        head_dim = dim // self.num_heads
        key_weight, value_weight = self.kv.weight.view(2, self.num_heads, head_dim, dim).unbind(0)
        value_bias = self.kv.bias.view(2, self.num_heads, head_dim)[1]
        normed = self.norm(x).unsqueeze(1)  # (batch, 1, tokens, dim): one SDPA head, whose query rows are ours
        queries = (self.query.view(self.num_heads, 1, head_dim) @ key_weight).view(1, 1, self.num_heads, dim)
        queries = queries.expand(batch, -1, -1, -1).to(normed.dtype)
        pooled = F.scaled_dot_product_attention(queries, normed, normed, scale=head_dim**-0.5)
        values = torch.einsum("bhe,hde->bhd", pooled.view(batch, self.num_heads, dim), value_weight)
        return (values + value_bias.to(values.dtype)).reshape(batch, dim)


def calls_sdpa(network: nn.Module) -> bool:
    """Whether ``network`` runs ``scaled_dot_product_attention`` anywhere, so that an attention
    kernel (FlashAttention, a named SDPA backend) can change what it runs: a network without one
    (an MLP, the CNN) reports the kernel as not active rather than as a choice that did nothing."""
    return any(getattr(module, "calls_sdpa", False) for module in network.modules())


class HeadView(nn.Module):
    """The board as seen from the head, through a linear layer and a ReLU.

    A ``(C, H, W)`` board becomes a ``(C, 2H - 1, 2W - 1)`` view whose centre is the head: each
    board cell sits at its offset from the head, so every cell is in view wherever the head is.
    The head channel (always just the centre) is replaced by an on-board channel, which is 0
    beyond the walls.

    The view is one ``scatter`` of each channel's ``H x W`` values into zeros (what lies beyond the walls),
    at the cell's landing with the head on cell 0 less the head's shift, so nothing grows with the board
    squared; the on-board channel is ones scattered the same way. Design notes: docs/design-notes.md,
    "sb3_snake/networks/attention.py".

    :param board_shape: ``(C, H, W)`` of the observations; channel :data:`~sb3_snake.envs.rules.HEAD`
        marks the head.
    :param features_dim: size of the output vector.
    """

    def __init__(self, board_shape: tuple[int, int, int], features_dim: int):
        super().__init__()
        channels, height, width = board_shape
        cells = height * width
        rows, cols = torch.arange(cells) // width, torch.arange(cells) % width
        self.view_shape = (channels, 2 * height - 1, 2 * width - 1)
        view_cells = self.view_shape[1] * self.view_shape[2]
        # With the head on cell h, board cell c lands on view cell (row_c - row_h + H - 1) * (2W - 1)
        # + col_c - col_h + W - 1: where it lands with the head on cell 0, less the head's own shift.
        landing = (rows + height - 1) * self.view_shape[2] + cols + width - 1
        self.register_buffer(
            "landing", torch.cat([landing + k * view_cells for k in range(channels)]), persistent=False
        )
        # The other channels in order; the on-board channel (ones) takes the head channel's place, last.
        others = torch.tensor([c for c in range(channels) if c != HEAD])
        self.register_buffer("other_channels", others, persistent=False)
        self.board_shape = board_shape
        self.linear = nn.Linear(channels * view_cells, features_dim)

    def view(self, observations: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C, 2H - 1, 2W - 1)``: the head-centred view (on-board channel last)."""
        width, view_width = self.board_shape[2], self.view_shape[2]
        flat = observations.flatten(2)
        head = flat[:, HEAD].argmax(dim=1)
        shift = (head // width) * view_width + head % width
        values = torch.cat([flat[:, self.other_channels], torch.ones_like(flat[:, :1])], dim=1).flatten(1)
        view = flat.new_zeros(flat.shape[0], math.prod(self.view_shape))
        return view.scatter_(1, self.landing - shift[:, None], values).view(-1, *self.view_shape)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(self.view(observations).flatten(1)))


class ConvStem(nn.Module):
    """Two 3x3 convolutions and a LayerNorm over channels: each cell's features see its 5x5
    neighbourhood before it becomes a token. An on-board channel of ones is added first, so
    that the zeros the convolutions pad with read as wall, not as free cells.

    :param channels: the observations' channels.
    :param width: the channels of each convolution, and of every cell's features.
    """

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.first = nn.Conv2d(channels + 1, width, 3, padding=1)
        self.second = nn.Conv2d(width, width, 3, padding=1)
        self.norm = nn.LayerNorm(width)

    def forward(self, board: torch.Tensor) -> torch.Tensor:
        on_board = torch.ones_like(board[:, :1])
        features = F.relu(self.second(F.relu(self.first(torch.cat([board, on_board], dim=1)))))
        return self.norm(features.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class SnakeAttentionExtractor(BaseFeaturesExtractor):
    """Transformer features extractor for ``(C, H, W)`` board observations.

    Use it like any SB3 extractor, e.g. ``policy_kwargs={"features_extractor_class":
    SnakeAttentionExtractor, "features_extractor_kwargs": {"embed_dim": 32}}``; the
    ``AttentionPolicy`` of :class:`~sb3_snake.SnakeDQN` uses it by default.

    The default sizes are small on purpose, and ``sb3-snake train`` passes ``num_layers=0`` (the tokens go
    straight to the pooling query); the default here stays one block, which models saved before that option
    were built with. Why: docs/design-notes.md, "sb3_snake/networks/attention.py".

    :param observation_space: a ``Box`` of shape ``(C, H, W)``, any board size from 4 up.
    :param features_dim: size of the output vector.
    :param embed_dim: token width.
    :param num_heads: attention heads (must divide ``embed_dim``).
    :param num_layers: transformer blocks.
    :param mlp_ratio: hidden width of each block's MLP, as a multiple of ``embed_dim``.
    :param patch_size: cells per token side; ``None`` picks :func:`default_patch_size`.
    :param head_view_dim: output size of the :class:`HeadView` beside the transformer; 0 leaves
        it out (then the observations need no head channel).
    :param conv_stem: channels of a :class:`ConvStem` whose features, not the cells' channels,
        are cut into tokens (0: none, each token a linear map of its cells).
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
        head_view_dim: int = 64,
        conv_stem: int = 0,
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
        self.stem = ConvStem(channels, conv_stem) if conv_stem else None
        patch_inputs = (conv_stem or channels) * self.patch_size**2
        self.embed = nn.Linear(patch_inputs, embed_dim)
        self.row_embedding = nn.Parameter(torch.randn(self.grid[0], 1, embed_dim) * 0.02)
        self.col_embedding = nn.Parameter(torch.randn(1, self.grid[1], embed_dim) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(embed_dim, num_heads, mlp_ratio) for _ in range(num_layers))
        self.pool = AttentionPool(embed_dim, num_heads)
        self.head_view = HeadView(observation_space.shape, head_view_dim) if head_view_dim else None
        self.head = nn.Sequential(nn.Linear(embed_dim + head_view_dim, features_dim), nn.ReLU())
        high = np.asarray(observation_space.high, dtype=np.float32).reshape(channels, -1).max(axis=1)
        scaled = np.isfinite(high) & (high > 1)
        scale = torch.as_tensor(np.where(scaled, 1.0 / high, 1.0)).view(-1, 1, 1) if scaled.any() else None
        self.register_buffer("input_scale", scale, persistent=False)

    def channels_last_embedding(self) -> torch.Tensor:
        """``embed``'s weight for :func:`cut_patches`' order. ``embed`` keeps the channel-first
        order of its inputs (``F.unfold``'s), which saved models hold."""
        weight = self.embed.weight
        channels = weight.shape[1] // self.patch_size**2
        return weight.view(-1, channels, self.patch_size, self.patch_size).permute(0, 2, 3, 1).reshape(weight.shape)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            observations = observations * self.input_scale.to(observations.dtype)
        board = self.stem(observations) if self.stem is not None else observations
        board = F.pad(board, self.padding) if any(self.padding) else board
        patches = cut_patches(board, self.patch_size)
        positions = (self.row_embedding + self.col_embedding).reshape(1, -1, self.row_embedding.shape[-1])
        tokens = F.linear(patches, self.channels_last_embedding(), self.embed.bias) + positions
        for block in self.blocks:
            tokens = block(tokens)
        features = self.pool(tokens)
        if self.head_view is not None:
            features = torch.cat([features, self.head_view(observations)], dim=1)
        return self.head(features)
