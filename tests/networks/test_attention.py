"""SnakeAttentionExtractor: any board size, configured through policy_kwargs, saved with the model."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.envs.rules import COUNTDOWN, HEAD, board_space
from sb3_snake.networks.attention import (
    AttentionPool,
    HeadView,
    SnakeAttentionExtractor,
    cut_patches,
    default_patch_size,
)


@pytest.mark.parametrize("board_size", [4, 5, 8, 10, 13, 20])
def test_any_board_size(board_size):
    space = gym.spaces.Box(0, 1, (5, board_size, board_size), np.uint8)
    extractor = SnakeAttentionExtractor(space, features_dim=48)
    out = extractor(torch.as_tensor(np.stack([space.sample() for _ in range(3)])).float())
    assert out.shape == (3, 48)
    tokens = extractor.grid[0] * extractor.grid[1]
    assert tokens <= 64


def test_patch_size_rule():
    assert [default_patch_size(n) for n in (4, 8, 9, 10, 16, 17, 30)] == [1, 1, 2, 2, 2, 3, 4]


def test_uses_sdpa_not_multihead_attention():
    space = gym.spaces.Box(0, 1, (5, 10, 10), np.uint8)
    extractor = SnakeAttentionExtractor(space)
    assert not any(isinstance(m, torch.nn.MultiheadAttention) for m in extractor.modules())
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        extractor(torch.zeros(2, 5, 10, 10))
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
    assert len(calls) == 2  # one block, one attention pool


def attention_pool_by_definition(pool: AttentionPool, x: torch.Tensor) -> torch.Tensor:
    """The pool as attention is defined: keys and values of every normalised token, one query per head."""
    batch, tokens, dim = x.shape
    heads = pool.num_heads
    k, v = pool.kv(pool.norm(x)).view(batch, tokens, 2, heads, dim // heads).permute(2, 0, 3, 1, 4)
    return torch.nn.functional.scaled_dot_product_attention(pool.query.expand(batch, -1, -1, -1), k, v).reshape(
        batch, dim
    )


@pytest.mark.parametrize(("embed_dim", "num_heads"), [(32, 2), (24, 3), (8, 1)])
def test_attention_pool_is_attention_with_keys_and_values_of_every_token(embed_dim, num_heads):
    torch.manual_seed(0)
    pool = AttentionPool(embed_dim, num_heads)
    with torch.no_grad():  # a query that is not zero, so the attention weights are not uniform
        pool.query.normal_()
        pool.kv.bias.normal_()
    x = torch.randn(5, 17, embed_dim, requires_grad=True)
    folded, defined = pool(x), attention_pool_by_definition(pool, x)
    torch.testing.assert_close(folded, defined, atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(defined)
    folded_grads = torch.autograd.grad((folded * weights).sum(), [x, *pool.parameters()])
    defined_grads = torch.autograd.grad((defined * weights).sum(), [x, *pool.parameters()])
    for a, b in zip(folded_grads, defined_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("patch_size", [1, 2, 3])
def test_patches_match_unfold_channels_last(patch_size):
    board = torch.randn(3, 4, 6, 6)
    unfolded = torch.nn.functional.unfold(board, kernel_size=patch_size, stride=patch_size).transpose(1, 2)
    # unfold flattens each patch channel, row, column; cut_patches row, column, channel
    expected = unfolded.reshape(3, -1, 4, patch_size, patch_size).permute(0, 1, 3, 4, 2).reshape(unfolded.shape)
    torch.testing.assert_close(cut_patches(board, patch_size), expected, rtol=0, atol=0)


@pytest.mark.parametrize("board_size", [5, 10])
def test_embedding_keeps_the_channel_first_weights_of_saved_models(board_size):
    """Token embeddings equal embed(unfolded patch): a model saved before channels-last patches means the same."""
    space = gym.spaces.Box(0, 1, (5, board_size, board_size), np.uint8)
    extractor = SnakeAttentionExtractor(space)
    board = torch.nn.functional.pad(torch.rand(4, 5, board_size, board_size), extractor.padding)
    p = extractor.patch_size
    unfolded = torch.nn.functional.unfold(board, kernel_size=p, stride=p).transpose(1, 2)
    expected = extractor.embed(unfolded)
    got = torch.nn.functional.linear(cut_patches(board, p), extractor.channels_last_embedding(), extractor.embed.bias)
    torch.testing.assert_close(got, expected)


def test_a_board_that_is_not_a_multiple_of_the_patch_is_padded_with_zeros():
    space = gym.spaces.Box(0, 1, (5, 5, 5), np.uint8)
    extractor = SnakeAttentionExtractor(space, patch_size=2)
    assert extractor.grid == (3, 3) and extractor.padding == (0, 1, 0, 1)
    board = torch.nn.functional.pad(torch.ones(1, 5, 5, 5), extractor.padding)
    patches = cut_patches(board, 2)  # the last patch holds one cell of the board, three of padding
    assert patches.shape == (1, 9, 20) and patches[0, -1].sum() == 5 and patches[0, 0].sum() == 20
    assert extractor(torch.ones(2, 5, 5, 5)).shape == (2, extractor.features_dim)


def test_bad_shapes_and_heads():
    with pytest.raises(ValueError, match=r"needs \(C, H, W\)"):
        SnakeAttentionExtractor(gym.spaces.Box(0, 1, (10,), np.uint8))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        SnakeAttentionExtractor(gym.spaces.Box(0, 1, (5, 6, 6), np.uint8), embed_dim=30, num_heads=4)


def test_configured_through_policy_kwargs_and_saved_with_plain_dqn(tmp_path):
    env = BatchedSnakeVecEnv(2, board_size=6, seed=0)
    kwargs = {
        "features_extractor_class": SnakeAttentionExtractor,
        "features_extractor_kwargs": {"embed_dim": 16, "num_heads": 2, "features_dim": 24},
    }
    model = DQN("MlpPolicy", env, policy_kwargs=kwargs, learning_starts=0, buffer_size=100, seed=0)
    assert model.q_net.features_extractor.features_dim == 24
    model.save(tmp_path / "m.zip")
    loaded = DQN.load(tmp_path / "m.zip")
    obs = env.reset()
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0])


def random_boards(batch, channels, height, width, generator):
    """Boards of random cells with exactly one head each."""
    boards = (torch.rand(batch, channels, height, width, generator=generator) < 0.3).float()
    boards[:, HEAD] = 0
    heads = torch.randint(height * width, (batch,), generator=generator)
    boards[:, HEAD].view(batch, -1)[torch.arange(batch), heads] = 1
    return boards, heads


@pytest.mark.parametrize(("height", "width"), [(4, 4), (6, 9), (10, 10)])
def test_head_view_puts_every_cell_at_its_offset_from_the_head(height, width):
    boards, heads = random_boards(16, 5, height, width, torch.Generator().manual_seed(height * width))
    view = HeadView((5, height, width), features_dim=8).view(boards)
    assert view.shape == (16, 5, 2 * height - 1, 2 * width - 1)
    others = [c for c in range(5) if c != HEAD]
    for b, head in enumerate(heads.tolist()):
        head_row, head_col = divmod(head, width)
        for i in range(2 * height - 1):
            for j in range(2 * width - 1):
                row, col = head_row + i - (height - 1), head_col + j - (width - 1)
                on_board = 0 <= row < height and 0 <= col < width
                expected = boards[b, others, row, col] if on_board else torch.zeros(4)
                assert view[b, -1, i, j] == on_board
                torch.testing.assert_close(view[b, :-1, i, j], expected, rtol=0, atol=0)


def test_head_view_is_the_same_wherever_the_same_scene_lies_on_the_board():
    """A snake and food shifted together give the same view, up to the on-board channel."""
    board = torch.zeros(1, 5, 10, 10)
    board[0, HEAD, 4, 4] = board[0, 1, 5, 4] = board[0, 2, 2, 6] = 1
    shifted = torch.roll(board, shifts=(2, -3), dims=(2, 3))
    head_view = HeadView((5, 10, 10), features_dim=8)
    original, moved = head_view.view(board), head_view.view(shifted)
    torch.testing.assert_close(original[:, :-1], moved[:, :-1], rtol=0, atol=0)
    assert not torch.equal(original[:, -1], moved[:, -1])


def test_head_view_can_be_left_out():
    space = gym.spaces.Box(0, 1, (5, 8, 8), np.uint8)
    with_view, without = SnakeAttentionExtractor(space), SnakeAttentionExtractor(space, head_view_dim=0)
    assert isinstance(with_view.head_view, HeadView) and without.head_view is None
    assert without(torch.zeros(2, 5, 8, 8)).shape == with_view(torch.zeros(2, 5, 8, 8)).shape


def test_channels_bounded_above_one_are_scaled_to_one_by_the_space():
    """The countdown's moves reach the network divided by the channel's bound; binary boards as they are."""
    counted = board_space(6, countdown=True)
    torch.manual_seed(0)
    scaled = SnakeAttentionExtractor(counted, embed_dim=16)
    unscaled = SnakeAttentionExtractor(gym.spaces.Box(0, 1, counted.shape, np.uint8), embed_dim=16)
    unscaled.load_state_dict(scaled.state_dict())
    assert unscaled.input_scale is None and SnakeAttentionExtractor(board_space(6)).input_scale is None
    env = BatchedSnakeVecEnv(8, board_size=6, seed=0, countdown=True)
    obs = torch.as_tensor(env.reset()).float()
    for _ in range(5):
        obs = torch.as_tensor(env.step(np.random.default_rng(0).integers(4, size=8))[0]).float()
    assert obs[:, COUNTDOWN].max() > 1
    divided = obs.clone()
    divided[:, COUNTDOWN] /= counted.high[COUNTDOWN, 0, 0]
    torch.testing.assert_close(scaled(obs), unscaled(divided))
    assert not torch.allclose(scaled(obs), unscaled(obs))


def test_head_view_keeps_no_table_that_grows_with_the_board_squared():
    """Where each cell lands is computed from the head, so a large board's view costs no more
    memory than the board (a table of positions per head cell would need tens of gigabytes here)."""
    channels, size = 5, 200
    head_view = HeadView((channels, size, size), features_dim=1)
    assert sum(buffer.numel() for buffer in head_view.buffers()) <= channels * size * size + channels
    boards, heads = random_boards(2, channels, size, size, torch.Generator().manual_seed(0))
    view, others = head_view.view(boards), [c for c in range(channels) if c != HEAD]
    for b, head in enumerate(heads.tolist()):  # the board's corner cell (0, 0) as the head sees it
        row, col = divmod(head, size)
        corner = view[b, :, size - 1 - row, size - 1 - col]
        torch.testing.assert_close(corner, torch.cat([boards[b, others, 0, 0], torch.ones(1)]), rtol=0, atol=0)
        assert view[b, -1].sum() == size * size  # every board cell is in view, and nothing else


@pytest.mark.parametrize("board_size", [6, 10, 11])
def test_a_conv_stem_makes_the_tokens_from_features_that_see_each_cells_neighbourhood(board_size):
    space = board_space(board_size)
    torch.manual_seed(0)  # 16 channels: some cell's all dying in the ReLUs is no worry with this seed
    extractor = SnakeAttentionExtractor(space, features_dim=16, embed_dim=8, num_layers=0, conv_stem=16)
    assert extractor.embed.in_features == 16 * extractor.patch_size**2
    board = torch.zeros(1, *space.shape)
    board[0, HEAD, 2, 2] = 1
    assert extractor(board).shape == (1, 16)
    features = extractor.stem(board)[0]  # (16, n, n): the head reaches its neighbours' features only
    far = extractor.stem(torch.zeros_like(board))[0]
    changed = (features != far).any(dim=0)
    assert changed[0:5, 0:5].all() and not changed[5:, :].any() and not changed[:, 5:].any()


def test_a_conv_stem_tells_the_wall_from_a_free_cell():
    stem = SnakeAttentionExtractor(board_space(6), conv_stem=4).stem
    empty = stem(torch.zeros(1, *board_space(6).shape))[0]
    assert not torch.allclose(empty[:, 0, 3], empty[:, 2, 3])  # a cell beside the wall, one inside
