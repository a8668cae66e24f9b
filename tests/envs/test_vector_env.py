"""SnakeVectorEnv: gym.make_vec, Gymnasium's VectorEnv contract, the same games as SyncVectorEnv of SnakeEnv,
both autoreset modes.

Gymnasium 1.4 has no checker for vector envs (``gymnasium.utils.env_checker`` checks single envs only), so
the contract is tested here directly, and against Gymnasium's own ``SyncVectorEnv`` as the reference.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import sb3_snake
from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs import SnakeVectorEnv
from sb3_snake.envs.rules import BODY, DIRECTION_DELTAS, FOOD, HEAD, NECK
from tests.conftest import cuda, random_state

IDS = [(sb3_snake.SNAKE_ENV_ID, False), (sb3_snake.EGOCENTRIC_SNAKE_ENV_ID, True)]


def _food_of(board):
    rows, cols = np.nonzero(board[FOOD])
    return (int(rows[0]), int(cols[0])) if len(rows) else None


def _is_start(observation) -> bool:
    """A standard start: a head, two more body cells and one food."""
    return observation[HEAD].sum() == 1 and observation[BODY].sum() == 2 and observation[FOOD].sum() == 1


def _head(observation) -> tuple[int, int]:
    return tuple(int(x) for x in np.argwhere(observation[HEAD])[0])


def _assert_infos_equal(got, expected):
    """The same keys, and the same values: arrays by value and dtype kind, ``final_obs`` game by game."""
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, dict):
            _assert_infos_equal(got[key], value)
        elif key == "final_obs":
            assert [o is None for o in got[key]] == [o is None for o in value]
            for mine, theirs in zip(got[key], value, strict=True):
                if theirs is not None:
                    np.testing.assert_array_equal(mine, theirs)
        else:
            assert got[key].dtype.kind == value.dtype.kind, key
            np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.parametrize(("env_id", "egocentric"), IDS)
@pytest.mark.parametrize("mode", [None, "vector_entry_point"])
def test_make_vec_builds_the_batched_env_with_the_kwargs(env_id, egocentric, mode):
    env = gym.make_vec(env_id, num_envs=6, vectorization_mode=mode, board_size=8, countdown=True, seed=3)
    assert type(env) is SnakeVectorEnv and env.num_envs == 6
    assert env.rules.egocentric is egocentric and env.rules.board_size == 8 and env.rules.countdown
    assert env.single_observation_space.shape == (6, 8, 8) and env.observation_space.shape == (6, 6, 8, 8)
    assert env.single_action_space == gym.spaces.Discrete(3 if egocentric else 4)
    assert env.action_space == gym.spaces.MultiDiscrete([env.single_action_space.n] * 6)
    assert env.spec.id == env_id and env.spec.kwargs["vectorization_mode"] == "vector_entry_point"
    assert gym.make_vec(env_id, num_envs=2, device="cpu", autoreset_mode="SameStep").autoreset_mode == (
        AutoresetMode.SAME_STEP
    )


@pytest.mark.parametrize(("env_id", "egocentric"), IDS)
def test_make_vec_sync_still_builds_snake_envs(env_id, egocentric):
    env = gym.make_vec(env_id, num_envs=3, vectorization_mode="sync", board_size=6)
    assert isinstance(env, SyncVectorEnv)
    assert all(isinstance(e.unwrapped, SnakeEnv) for e in env.envs)
    assert all(e.unwrapped.rules.egocentric is egocentric and e.unwrapped.rules.board_size == 6 for e in env.envs)


def test_metadata_matches_snake_env():
    env = SnakeVectorEnv(2)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert env.metadata["render_fps"] == SnakeEnv.metadata["render_fps"] == BatchedSnakeVecEnv.metadata["render_fps"]
    assert env.metadata["render_modes"] == SnakeEnv.metadata["render_modes"]
    assert SnakeVectorEnv(2, autoreset_mode=AutoresetMode.SAME_STEP).metadata["autoreset_mode"] is (
        AutoresetMode.SAME_STEP
    )
    assert SnakeVectorEnv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP  # the class's is not changed


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("egocentric", [False, True])
def test_vector_contract(mode, egocentric):
    """What a checker of vector envs would check: spaces hold what is returned, dtypes, shapes, info masks."""
    env = SnakeVectorEnv(16, board_size=4, seed=0, egocentric=egocentric, autoreset_mode=mode)
    obs, infos = env.reset(seed=1)
    assert env.observation_space.contains(obs) and obs.shape == (16, 5, 4, 4) and obs.dtype == np.uint8
    assert set(infos) == {"score", "_score", "length", "_length"} and infos["_score"].all()
    rng, ends = np.random.default_rng(0), 0
    for _ in range(100):
        obs, rewards, terminations, truncations, infos = env.step(rng.integers(env.single_action_space.n, size=16))
        assert env.observation_space.contains(obs)
        assert rewards.shape == terminations.shape == truncations.shape == (16,)
        assert rewards.dtype == np.float32 and terminations.dtype == truncations.dtype == np.bool_
        done = terminations | truncations
        ends += done.sum()
        for key in ("score", "length"):
            assert infos[key].dtype == np.int64 and infos[f"_{key}"].all()
        if mode is AutoresetMode.NEXT_STEP:
            assert "final_obs" not in infos
            np.testing.assert_array_equal(infos.get("_is_success", np.zeros(16, bool)), done)
        else:
            assert "is_success" not in infos
            np.testing.assert_array_equal(infos.get("_final_obs", np.zeros(16, bool)), done)
            if done.any():
                assert infos["_final_info"] is not infos["_final_obs"]
                np.testing.assert_array_equal(infos["_final_info"], done)
                assert all(env.single_observation_space.contains(o) for o in infos["final_obs"][done])
                assert infos["final_info"]["is_success"].dtype == np.bool_
    assert ends > 20
    env.close()
    assert env.closed


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize(
    ("board_size", "max_steps", "countdown", "stall_growth", "egocentric", "reachable"),
    [
        (5, 4, False, 0, False, False),
        (6, 3, True, 1, False, True),
        (5, 4, False, 0, True, False),
        (6, 3, True, 1, True, True),
    ],
)
def test_same_games_as_sync_vector_env_of_snake_env(
    mode, board_size, max_steps, countdown, stall_growth, egocentric, reachable
):
    """Same random states, same random actions: the same observations, rewards, flags and infos as
    Gymnasium's SyncVectorEnv of SnakeEnv in the same autoreset mode, over many episode ends.

    The two draw starts and food from different generators, so the games are made equal with set_state:
    at the start, after each autoreset (where both must show a standard start), and the single game takes
    the batched game's new food after eating."""
    num_games, rng = 16, np.random.default_rng(board_size + 10 * egocentric)
    rules = {"board_size": board_size, "max_steps_without_food": max_steps, "countdown": countdown}
    # Starts on a wall: a throwaway step of NEXT_STEP can die, which must not show.
    rules.update(stall_growth=stall_growth, egocentric=egocentric, reachable=reachable, dist_to_border=0)
    vector = SnakeVectorEnv(num_games, seed=0, autoreset_mode=mode, **rules)
    reference = SyncVectorEnv([lambda: SnakeEnv(**rules) for _ in range(num_games)], autoreset_mode=mode)
    vector.reset(seed=0)
    reference.reset(seed=0)

    def restart(i):
        state = random_state(rng, board_size, max_length=board_size * board_size // 2)
        np.testing.assert_array_equal(vector.set_state(i, *state), reference.envs[i].set_state(*state))

    for i in range(num_games):
        restart(i)
    events = {"ate": 0, "died": 0, "truncated": 0, "autoreset": 0}
    restarting = np.zeros(num_games, dtype=bool)  # NEXT_STEP: the games whose next step shows a new start
    for _ in range(200):
        actions = rng.integers(vector.single_action_space.n, size=num_games)
        obs, rewards, terminations, truncations, infos = vector.step(actions)
        expected_obs, expected_rewards, expected_terminations, expected_truncations, expected_infos = reference.step(
            actions
        )
        np.testing.assert_array_equal(rewards, expected_rewards)
        np.testing.assert_array_equal(terminations, expected_terminations)
        np.testing.assert_array_equal(truncations, expected_truncations)
        _assert_infos_equal(infos, expected_infos)
        done = terminations | truncations
        started = restarting if mode is AutoresetMode.NEXT_STEP else done
        ate = (rewards == 1.0) & ~done
        for i in range(num_games):
            if started[i]:  # each drew its own start: both must be one
                assert _is_start(obs[i]) and _is_start(expected_obs[i])
                events["autoreset"] += 1
                restart(i)
                continue
            compared = [c for c in range(obs.shape[1]) if not (ate[i] and c == FOOD)]  # new food differs
            np.testing.assert_array_equal(obs[i][compared], expected_obs[i][compared])
            if ate[i]:
                events["ate"] += 1
                reference.envs[i]._food = _food_of(vector._games.observe_first(i + 1)[i].numpy())  # unturned
        events["died"] += int(terminations.sum())
        events["truncated"] += int(truncations.sum())
        restarting = done & (mode is AutoresetMode.NEXT_STEP)
    assert events["died"] > 300 and events["truncated"] > 20 and events["ate"] > 20, events
    assert events["autoreset"] >= events["died"] + events["truncated"] - num_games, events


def _about_to_end(env):
    """Game 0 dies moving up, game 1 eats moving right, game 2 moves on (board 10)."""
    before = env.set_state(0, [(0, 5), (1, 5), (2, 5)], 0, (9, 9))
    env.set_state(1, [(5, 5), (5, 4), (5, 3)], 1, (5, 6))
    env.set_state(2, [(5, 2), (6, 2), (7, 2)], 0, (0, 0))
    return before, np.array([0, 1, 0])


def test_next_step_shows_the_last_observation_then_a_new_start_and_ignores_the_action():
    runs = []
    for action in (0, 1, 3):  # the action given to game 0 on the step after it ended
        env = SnakeVectorEnv(3, seed=4)
        env.reset(seed=4)
        before, actions = _about_to_end(env)
        obs, rewards, terminations, truncations, infos = env.step(actions)
        np.testing.assert_array_equal(obs[0], before)
        np.testing.assert_array_equal(rewards, [-1.0, 1.0, 0.0])
        np.testing.assert_array_equal(terminations, [True, False, False])
        assert infos["is_success"][0] == False and list(infos["_is_success"]) == [True, False, False]  # noqa: E712
        assert list(infos["score"]) == [0, 1, 0] and list(infos["length"]) == [3, 4, 3]
        steps = [env.step(np.array([action, 1, 0]))]
        steps.append(env.step(np.array([0, 1, 0])))  # and the game plays on from that start
        runs.append(steps)
    for steps in runs:
        obs, rewards, terminations, truncations, infos = steps[0]
        assert _is_start(obs[0]) and rewards[0] == 0.0 and not terminations[0] and not truncations[0]
        assert infos["score"][0] == 0 and infos["length"][0] == 3 and "is_success" not in infos
        assert rewards[1] == 1.0 or obs[1][HEAD].sum() == 1  # game 1 went on as usual
        for step, first in zip(steps, runs[0], strict=True):
            np.testing.assert_array_equal(step[0][0], first[0][0])  # the same, whatever the ignored action


def test_next_step_never_ends_a_game_on_the_step_that_shows_its_start():
    """The throwaway step of a game waiting for its start (BatchedGames steps all) must not leak: here a
    start can die at once (on a wall) and a step without food truncates."""
    env = SnakeVectorEnv(64, board_size=4, seed=0, max_steps_without_food=1, dist_to_border=0)
    env.reset(seed=0)
    rng, previous, ends = np.random.default_rng(0), np.zeros(64, dtype=bool), 0
    for _ in range(200):
        obs, rewards, terminations, truncations, _ = env.step(rng.integers(4, size=64))
        assert not (terminations | truncations)[previous].any()
        assert (rewards[previous] == 0).all() and all(_is_start(o) for o in obs[previous])
        previous = terminations | truncations
        ends += previous.sum()
    assert ends > 500


def test_same_step_shows_the_new_start_and_keeps_the_last_in_final_obs():
    env = SnakeVectorEnv(3, seed=4, autoreset_mode="SameStep")
    env.reset(seed=4)
    before, actions = _about_to_end(env)
    obs, rewards, terminations, truncations, infos = env.step(actions)
    assert _is_start(obs[0]) and not np.array_equal(obs[0], before)
    np.testing.assert_array_equal(terminations, [True, False, False])
    np.testing.assert_array_equal(infos["final_obs"][0], before)
    assert list(infos["final_obs"][1:]) == [None, None]
    assert list(infos["_final_obs"]) == list(infos["_final_info"]) == [True, False, False]
    final = infos["final_info"]
    assert final["score"][0] == 0 and final["length"][0] == 3 and final["is_success"][0] == False  # noqa: E712
    assert list(final["_score"]) == list(final["_is_success"]) == [True, False, False]
    assert list(infos["score"]) == [0, 1, 0] and list(infos["length"]) == [3, 4, 3]  # game 0's new start's


def test_set_state_ends_the_wait_for_a_new_start():
    env = SnakeVectorEnv(3, seed=4)
    env.reset(seed=4)
    env.step(_about_to_end(env)[1])  # game 0 ended: its next step would show a new start
    env.set_state(0, [(5, 5), (5, 4), (5, 3)], 1, (5, 6))
    obs, rewards, terminations, _, infos = env.step(np.array([1, 1, 0]))
    assert rewards[0] == 1.0 and _head(obs[0]) == (5, 6) and infos["length"][0] == 4


@pytest.mark.parametrize("mode", ["Disabled", AutoresetMode.DISABLED, "next_step", 3, None])
def test_other_autoreset_modes_are_refused(mode):
    with pytest.raises(UsageError, match=r"autoreset_mode must be AutoresetMode.NEXT_STEP or .*got .*; 'Disabled'"):
        SnakeVectorEnv(2, autoreset_mode=mode)
    with pytest.raises(UsageError, match="autoreset_mode must be"):
        gym.make_vec(sb3_snake.SNAKE_ENV_ID, num_envs=2, autoreset_mode=mode)


def test_reset_mask_restarts_only_those_games_and_ends_their_wait():
    env = SnakeVectorEnv(3, seed=2)
    env.reset(seed=2)
    _about_to_end(env)
    kept = env.step(np.array([0, 1, 0]))[0]
    obs, infos = env.reset(options={"reset_mask": np.array([True, False, False])})
    np.testing.assert_array_equal(obs[1:], kept[1:])
    assert _is_start(obs[0])
    assert list(infos["_score"]) == [True, False, False] and list(infos["score"]) == [0, 0, 0]
    assert list(infos["length"]) == [3, 0, 0]
    # Game 0 no longer waits: it moves straight on, the start's head becoming the neck.
    head, neck = np.array(_head(obs[0])), np.argwhere(obs[0][NECK])[0]
    direction = [tuple(d) for d in DIRECTION_DELTAS.tolist()].index(tuple(head - neck))
    moved = env.step(np.array([direction, 1, 0]))[0][0]
    assert _head(moved) == tuple(head + DIRECTION_DELTAS[direction]) and moved[NECK][tuple(head)] == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reset_mask": [True, False]}, r"reset_mask'\] must be a bool NumPy array of shape \(2,\), got a list"),
        ({"reset_mask": np.ones(3, dtype=bool)}, "got a ndarray of shape"),
        ({"reset_mask": np.ones(2, dtype=int)}, "dtype int64"),
        ({"reset_mask": np.zeros(2, dtype=bool)}, "all False; pass True for at least one game"),
    ],
)
def test_bad_reset_masks_are_refused(options, message):
    with pytest.raises(UsageError, match=message):
        SnakeVectorEnv(2).reset(options=options)


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError, match="num_envs must be a positive integer, got 0"):
        SnakeVectorEnv(0)
    with pytest.raises(UsageError, match="seed must be an integer"):
        SnakeVectorEnv(2).reset(seed=[1, 2])
    with pytest.raises(UsageError, match="action must be 0 .up., 1 .right., 2 .down. or 3 .left., got 4 for game 1"):
        SnakeVectorEnv(2).step(np.array([0, 4]))
    with pytest.raises(UsageError, match="expected 2 actions"):
        SnakeVectorEnv(2).step(np.array([0]))
    with pytest.raises(UsageError, match="long_starts must be a share"):
        SnakeVectorEnv(2, long_starts=2)


def test_seeded_resets_repeat():
    def run(seed):
        env = SnakeVectorEnv(16, seed=99)
        frames, rng = [env.reset(seed=seed)[0]], np.random.default_rng(0)
        frames += [env.step(rng.integers(4, size=16))[0] for _ in range(60)]
        return np.stack(frames)

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_returned_arrays_are_never_written_again():
    env = SnakeVectorEnv(8, board_size=4, seed=0)
    obs, infos = env.reset(seed=0)
    kept = [obs.copy(), infos["score"].copy(), infos["length"].copy()]
    step = env.step(np.zeros(8, dtype=int))
    kept_step = [a.copy() for a in step[:4]] + [step[4]["length"].copy()]
    for _ in range(20):
        env.step(np.ones(8, dtype=int))
    for got, expected in zip([obs, infos["score"], infos["length"]], kept, strict=True):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip([*step[:4], step[4]["length"]], kept_step, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_render_gives_one_frame_per_game():
    env = SnakeVectorEnv(3, board_size=5, seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    frames = env.render()
    assert len(frames) == 3 and frames[0].shape == (5 * 16, 5 * 16, 3)
    env = SnakeVectorEnv(3, board_size=5, seed=0, render_mode="ansi", egocentric=True)
    assert [frame.count("H") for frame in env.render()] == [1, 1, 1]
    assert SnakeVectorEnv(2).render() is None


@cuda
def test_runs_on_cuda_and_returns_numpy():
    env = gym.make_vec(sb3_snake.SNAKE_ENV_ID, num_envs=256, device="cuda")
    assert env.device.type == "cuda"
    obs, _ = env.reset(seed=0)
    rng, ends = np.random.default_rng(0), 0
    for _ in range(100):
        obs, rewards, terminations, truncations, infos = env.step(rng.integers(4, size=256))
        assert isinstance(obs, np.ndarray) and env.observation_space.contains(obs)
        ends += (terminations | truncations).sum()
    assert ends > 0 and torch.cuda.is_available()
