"""``SnakeCnnExtractor``: perfect_snake's convolutional network for Snake boards, for SB3 policies."""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class SnakeCnnExtractor(BaseFeaturesExtractor):
    """perfect_snake's network for 10x10 Snake: 3x3 convolutions of ``channels`` (the first of
    stride 1, the others of stride 2), then ``features_dim`` features with LayerNorm. A channel
    of ones marks the board first, so that the convolutions' zero padding reads as wall; each
    input channel is scaled into [0, 1] by the observation space's upper bound."""

    def __init__(
        self, observation_space: gym.spaces.Box, features_dim: int = 256, channels: tuple[int, ...] = (32, 64, 64)
    ):
        super().__init__(observation_space, features_dim)
        board_channels, *board = observation_space.shape
        high = torch.as_tensor(observation_space.high[:, 0, 0], dtype=torch.float32).clamp(min=1)
        self.register_buffer("scale", (1 / high).view(1, -1, 1, 1))
        layers, width = [], board_channels + 1
        for index, out in enumerate(channels):
            layers += [nn.Conv2d(width, out, 3, stride=1 if index == 0 else 2, padding=1), nn.ReLU()]
            width = out
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.cnn(torch.zeros(1, board_channels + 1, *board)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, features_dim), nn.LayerNorm(features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        boards = observations * self.scale
        return self.linear(self.cnn(torch.cat([boards, torch.ones_like(boards[:, :1])], dim=1)))
