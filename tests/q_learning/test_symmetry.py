"""The board's symmetries: a transformed game is the same game, and replayed batches are transformed consistently."""

import numpy as np
import pytest
import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.envs import SnakeEnv
from sb3_snake.envs.rules import FOOD
from sb3_snake.q_learning.symmetry import NUM_SYMMETRIES, SymmetryAugmentation, action_permutations, cell_permutations
from tests.conftest import random_state

BOARD = 6


def test_symmetries_are_eight_distinct_permutations():
    cells, actions = cell_permutations(BOARD), action_permutations()
    assert len({tuple(row.tolist()) for row in cells}) == NUM_SYMMETRIES
    for row in (*cells, *actions):
        assert sorted(row.tolist()) == list(range(len(row)))
    assert cells[0].tolist() == list(range(BOARD * BOARD)) and actions[0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("symmetry", range(NUM_SYMMETRIES))
def test_a_transformed_game_is_the_same_game(symmetry):
    """Play a game and its mirror image side by side: each observation is the transformed one."""
    augmentation = SymmetryAugmentation(BOARD)
    destination = torch.argsort(cell_permutations(BOARD)[symmetry]).tolist()  # where each cell's content goes
    turn = action_permutations()[symmetry].tolist()

    def moved(cell):
        flat = destination[cell[0] * BOARD + cell[1]]
        return divmod(flat, BOARD)

    def transformed(obs):
        return augmentation.transform(torch.as_tensor(obs)[None], torch.tensor([symmetry]))[0].numpy()

    def mirror(body, direction, food):
        return [moved(c) for c in body], turn[direction], None if food is None else moved(food)

    rng = np.random.default_rng(symmetry)
    steps = 0
    for _ in range(60):
        original, image = SnakeEnv(board_size=BOARD), SnakeEnv(board_size=BOARD)
        original.reset(seed=0)
        image.reset(seed=1)
        state = random_state(rng, BOARD, max_length=12)
        np.testing.assert_array_equal(image.set_state(*mirror(*state)), transformed(original.set_state(*state)))
        for _ in range(15):
            action = int(rng.integers(4))
            obs, reward, terminated, truncated, info = original.step(action)
            image_obs, image_reward, image_terminated, image_truncated, _ = image.step(turn[action])
            steps += 1
            assert (image_reward, image_terminated, image_truncated) == (reward, terminated, truncated)
            ate = reward == 1.0 and not terminated
            channels = [c for c in range(obs.shape[0]) if not (ate and c == FOOD)]  # new food differs by RNG
            np.testing.assert_array_equal(image_obs[channels], transformed(obs)[channels])
            if terminated or truncated:
                break
            if ate:  # carry the original's new food over, as the env equivalence test does
                image.set_state(*mirror(*original.state))
                original.set_state(*original.state)
    assert steps > 100


def test_replayed_batch_is_transformed_consistently():
    augmentation = SymmetryAugmentation(BOARD)
    batch = 16
    observations = torch.rand(batch, 5, BOARD, BOARD)
    samples = ReplayBufferSamples(
        observations=observations,
        actions=torch.randint(4, (batch, 1)),
        next_observations=observations.flip(1),
        dones=torch.zeros(batch, 1),
        rewards=torch.ones(batch, 1),
    )
    symmetries = torch.arange(batch) % NUM_SYMMETRIES
    out = augmentation(samples, symmetries)
    for i, g in enumerate(symmetries.tolist()):
        expected = torch.rot90(observations[i], g % 4, dims=(-2, -1))
        expected = expected.flip(-1) if g >= 4 else expected
        torch.testing.assert_close(out.observations[i], expected)
        torch.testing.assert_close(out.next_observations[i], expected.flip(0))
        assert out.actions[i, 0] == action_permutations()[g, samples.actions[i, 0]]
    assert out.actions.shape == samples.actions.shape and out.actions.dtype == samples.actions.dtype
    assert torch.equal(out.rewards, samples.rewards) and torch.equal(out.dones, samples.dones)
    drawn = augmentation(samples)  # default: random symmetries, still a valid batch
    assert drawn.observations.shape == observations.shape


def test_the_drawn_symmetries_do_not_follow_torchs_global_generator():
    """A compile in a background thread saves torch's global generator before tracing and puts
    it back after (dynamo does); draws from it meanwhile would come again. The augmentation's
    come from its own generator, seeded from the global one."""
    torch.manual_seed(0)
    augmentation = SymmetryAugmentation(BOARD)
    torch.manual_seed(0)
    again = SymmetryAugmentation(BOARD)
    observations = torch.rand(64, 5, BOARD, BOARD)
    samples = ReplayBufferSamples(
        observations, torch.zeros(64, 1, dtype=torch.long), observations, *torch.zeros(2, 64, 1)
    )
    state = torch.get_rng_state()
    first = augmentation(samples).observations
    torch.set_rng_state(state)  # as a compile in another thread would
    assert not torch.equal(augmentation(samples).observations, first)  # new draws, not the same ones again
    assert torch.equal(again(samples).observations, first)  # and still decided by the seed


def test_egocentric_augmentation_draws_only_the_mirror_and_swaps_the_turns():
    """Seen from the snake, the board's one symmetry is the mirror image: a replayed transition
    is itself or its mirror image with left and right swapped, which is a game of the same rules
    (``test_egocentric``)."""
    from sb3_snake.envs.rules import mirror_action, mirror_observation

    augmentation = SymmetryAugmentation(BOARD, egocentric=True)
    observations = torch.randint(0, 2, (64, 5, BOARD, BOARD), dtype=torch.uint8)
    actions = torch.arange(64).remainder(3).unsqueeze(1)
    samples = ReplayBufferSamples(
        observations, actions, observations.roll(1, 0), torch.zeros(64, 1), torch.zeros(64, 1)
    )
    torch.manual_seed(0)
    augmented = augmentation(samples)
    mirrored = (augmented.actions != samples.actions).squeeze(1) | (augmented.observations != observations).flatten(
        1
    ).any(1)
    assert 10 < int(mirrored.sum()) < 54  # about half of them
    for index in range(64):
        obs, action = observations[index].numpy(), int(samples.actions[index])
        if mirrored[index]:
            obs, action = mirror_observation(obs), mirror_action(action)
        np.testing.assert_array_equal(augmented.observations[index].numpy(), obs)
        assert int(augmented.actions[index]) == action
