"""PQN's attention network: patch tokens, attention through SDPA, every token read out in place."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sb3_snake.networks import patch_attention
from sb3_snake.networks.patch_attention import PatchAttentionExtractor, default_patch_size


def board_space(channels: int = 5, size: int = 10, high: float = 1.0) -> gym.spaces.Box:
    return gym.spaces.Box(0, high, (channels, size, size), np.float32)


@pytest.mark.parametrize("size", [4, 6, 7, 10, 11])
def test_any_board_gives_features_of_the_asked_width(size):
    torch.manual_seed(0)
    extractor = PatchAttentionExtractor(board_space(size=size), features_dim=24, embed_dim=8, num_heads=2)
    features = extractor(torch.rand(3, 5, size, size))
    assert features.shape == (3, 24) and features.isfinite().all()
    tokens = math.ceil(size / default_patch_size(size)) ** 2
    assert extractor.position.shape == (1, tokens, 8)


def test_where_a_cell_lies_changes_the_features():
    """No pooling: the same cells in other places give other features, even with attention."""
    torch.manual_seed(0)
    extractor = PatchAttentionExtractor(board_space(channels=1, size=6), features_dim=16, embed_dim=8, num_heads=1)
    one, other = torch.zeros(2, 1, 1, 6, 6)
    one[0, 0, 0, 0], other[0, 0, 5, 5] = 1.0, 1.0
    with torch.no_grad():
        assert not torch.allclose(extractor(one), extractor(other))


def test_attention_runs_through_sdpa_once_per_block(monkeypatch):
    """So the optimization layer's SDPA backend context chooses its kernel."""
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    extractor = PatchAttentionExtractor(board_space(), features_dim=16, embed_dim=8, num_heads=2, num_layers=2)
    extractor(torch.rand(4, 5, 10, 10))
    assert calls == [(4, 2, 25, 4)] * 2  # batch, heads, 25 tokens of 2x2 cells, head width
    assert not PatchAttentionExtractor(board_space(), embed_dim=8, num_layers=0).blocks


def test_channels_above_one_are_scaled_into_the_unit_range():
    space = gym.spaces.Box(
        low=np.zeros((2, 4, 4), np.float32), high=np.stack([np.ones((4, 4)), np.full((4, 4), 15.0)]).astype(np.float32)
    )
    extractor = PatchAttentionExtractor(space, features_dim=8, embed_dim=4, num_heads=1)
    assert extractor.input_scale.flatten().tolist() == pytest.approx([1.0, 1 / 15])


@pytest.mark.parametrize(
    ("space", "kwargs", "words"),
    [
        (gym.spaces.Box(0, 1, (100,), np.float32), {}, r"needs \(C, H, W\) observations"),
        (board_space(), {"embed_dim": 10, "num_heads": 3}, "must be divisible by num_heads"),
    ],
)
def test_shapes_that_cannot_work_are_refused(space, kwargs, words):
    with pytest.raises(ValueError, match=words):
        PatchAttentionExtractor(space, **kwargs)


def test_the_block_adds_attention_to_the_tokens():
    block = patch_attention.AttentionBlock(8, 2)
    for parameter in block.attention.parameters():
        torch.nn.init.zeros_(parameter)  # attention that adds nothing
    tokens = torch.rand(2, 5, 8)
    assert torch.equal(block(tokens), tokens)
