"""Action masks (``sb3_snake.envs.action_masks``): a move is masked exactly when the game dies
of it, in both envs, both views and under mirror images; safe random moves never pick a masked
move while a safe one exists."""

import numpy as np
import pytest
import torch

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.envs.action_masks import action_masks, random_safe_actions
from sb3_snake.envs.rules import mirror_observation, opposite
from tests.conftest import neck_direction, random_state


def play_states(board_size: int, count: int, seed: int):
    """``count`` game states as in play: random bodies of every length, heading away from the neck."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        body, _, food = random_state(rng, board_size)
        yield body, opposite(neck_direction(body)), food


def dies(env: SnakeEnv, state, action: int) -> bool:
    env.set_state(*state)
    _, _, terminated, _, info = env.step(action)
    return terminated and not info.get("is_success", False)


@pytest.mark.parametrize("egocentric", [False, True], ids=["absolute", "egocentric"])
def test_a_move_is_masked_exactly_when_it_dies_at_once_in_both_envs(egocentric):
    env, probe = SnakeEnv(6, egocentric=egocentric), SnakeEnv(6, egocentric=egocentric)
    env.reset(seed=0)
    probe.reset(seed=0)
    batched = BatchedSnakeVecEnv(1, 6, seed=0, egocentric=egocentric)
    batched.reset()
    walled_in = 0
    for state in play_states(6, 300, seed=1):
        env.set_state(*state)
        batched.set_state(0, *state)
        expected = [not dies(probe, state, action) for action in range(env.action_space.n)]
        assert env.action_masks().tolist() == expected, state
        assert batched.action_masks()[0].tolist() == expected, state
        walled_in += not any(expected)
    assert walled_in  # the walled-in case (no safe move) was among them


def test_the_mask_of_a_mirror_image_is_the_mirrored_mask():
    env = SnakeEnv(7, egocentric=True)
    env.reset(seed=0)
    observations = np.stack([env.set_state(*state) for state in play_states(7, 200, seed=2)])
    masks = action_masks(observations, egocentric=True)
    mirrored = action_masks(mirror_observation(observations), egocentric=True)
    assert torch.equal(mirrored, masks.flip(1))  # left and right swapped, straight kept


def test_safe_random_moves_never_pick_a_fatal_move_while_a_safe_one_exists():
    masks = torch.tensor([[True, False, False], [False, False, True], [False, True, True], [False, False, False]] * 50)
    actions = random_safe_actions(masks, torch.Generator().manual_seed(0))
    safe = masks.gather(1, actions[:, None]).squeeze(1)
    assert safe[masks.any(dim=1)].all() and not safe[3::4].any()  # every row with a safe move got one
    assert set(actions[3::4].tolist()) == {0, 1, 2}  # walled in: any move, uniformly
    assert set(actions[2::4].tolist()) == {1, 2}  # both safe moves are drawn


def test_maskable_algorithms_read_the_batched_envs_masks_per_game():
    env = BatchedSnakeVecEnv(3, 6, seed=0, egocentric=True)
    env.reset()
    per_game = env.env_method("action_masks")
    np.testing.assert_array_equal(np.stack(per_game), env.action_masks())
    assert len(env.env_method("action_masks", indices=[2])) == 1
    with pytest.raises(AttributeError, match="no per-game 'render'"):
        env.env_method("render")


def test_sb3_contribs_maskable_ppo_trains_on_the_batched_env_and_plays_only_safe_moves():
    """sb3-contrib finds the masks through ``env_method("action_masks")``; a walled-in game
    (no safe move, an all-False row) leaves it a uniform choice, not an error."""
    sb3_contrib = pytest.importorskip("sb3_contrib")  # the dev extra installs it
    env = BatchedSnakeVecEnv(8, 6, seed=0)
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    model.learn(512)
    buffer = model.rollout_buffer
    masks = buffer.action_masks.reshape(-1, 4).astype(bool)
    actions = buffer.actions.reshape(-1).astype(int)
    assert len(actions) == 8 * 32 and not masks.all()  # the masks did forbid moves
    chosen_allowed = masks[np.arange(len(actions)), actions]
    assert chosen_allowed[masks.any(axis=1)].all()


@pytest.mark.parametrize("egocentric", [True, False])
def test_compiled_masks_are_the_eager_ones(egocentric):
    """SnakeDQN's compiled gradient step reads the masks inside its graph: inductor once
    miscompiled the uint8 argmax that finds the head, and the fatal moves' targets fitted the
    wrong moves (a greedy 0 after 25,000 env steps where the eager step played 30)."""
    boards = torch.as_tensor(
        BatchedSnakeVecEnv(64, board_size=8, seed=3, egocentric=egocentric, long_starts=1.0).reset()
    )
    compiled = torch.compile(lambda observations: action_masks(observations, egocentric), fullgraph=True)
    torch.testing.assert_close(compiled(boards), action_masks(boards, egocentric))
