"""The snake is drawn so that its path can be followed: linked segments, shading, a distinct head and food."""

import numpy as np
import pytest

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.envs.render import BODY_COLORS, CELL_PIXELS, FOOD_COLOR, HEAD_COLOR, render_rgb

C = CELL_PIXELS
# A U turned on its side: the head (1, 1) moves left; (1, 2) and (2, 2) are side by side but not
# consecutive, nor are the head and the tail (2, 1).
U_BODY = [(1, 1), (1, 2), (1, 3), (2, 3), (2, 2), (2, 1)]
U_FOOD = (4, 4)


def u_frame(render_mode="rgb_array"):
    env = SnakeEnv(board_size=6, render_mode=render_mode)
    env.reset(seed=0)
    env.set_state(U_BODY, 3, U_FOOD)
    return env.render()


def centre(frame, cell):
    return frame[cell[0] * C + C // 2, cell[1] * C + C // 2]


def between(frame, a, b):
    """The pixel on the shared edge of two neighbouring cells, halfway along it."""
    if a[0] == b[0]:
        return frame[a[0] * C + C // 2, max(a[1], b[1]) * C]
    return frame[max(a[0], b[0]) * C, a[1] * C + C // 2]


def test_adjacent_but_unlinked_body_cells_are_drawn_apart():
    frame = u_frame()
    background = frame[0, 0]
    assert (between(frame, (1, 2), (2, 2)) == background).all()  # side by side, not consecutive
    assert (between(frame, (1, 1), (2, 1)) == background).all()  # head and tail
    for a, b in zip(U_BODY, U_BODY[1:], strict=False):  # every consecutive pair is linked
        assert (between(frame, a, b) != background).any(), (a, b)


def test_head_and_food_are_distinct_and_the_body_is_shaded_from_head_to_tail():
    frame = u_frame()
    assert (centre(frame, U_BODY[0]) == HEAD_COLOR).all()
    assert (centre(frame, U_FOOD) == FOOD_COLOR).all()
    body = [tuple(int(c) for c in centre(frame, cell)) for cell in U_BODY[1:]]
    assert body[0] == tuple(BODY_COLORS[0].astype(int)) and body[-1] == tuple(BODY_COLORS[1].astype(int))
    brightness = [sum(color) for color in body]
    assert brightness == sorted(brightness, reverse=True) and len(set(body)) == len(body)
    assert tuple(HEAD_COLOR.astype(int)) not in body and tuple(FOOD_COLOR.astype(int)) not in body


def test_text_follows_the_path():
    lines = u_frame("ansi").splitlines()
    assert lines[2] == "#.H─┐..#"
    assert lines[3] == "#.╶─┘..#"
    assert lines[5] == "#....*.#"


def test_without_the_order_adjacent_body_cells_still_stand_apart():
    observation = SnakeEnv(board_size=6).set_state(U_BODY, 3, U_FOOD)
    frame = render_rgb(observation)
    assert (between(frame, (1, 2), (1, 3)) == frame[0, 0]).all()
    assert (centre(frame, (1, 2)) != frame[0, 0]).any()


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_both_environments_draw_the_same_board(mode):
    venv = BatchedSnakeVecEnv(2, board_size=6, seed=0)
    venv.reset()
    venv.set_state(0, U_BODY, 3, U_FOOD)
    batched = venv.render(mode) if mode == "ansi" else venv.get_images()[0]
    assert (
        np.array_equal(np.asarray(batched), np.asarray(u_frame(mode))) if mode != "ansi" else batched == u_frame(mode)
    )


def test_bodies_follow_the_link_plane_after_moves():
    venv = BatchedSnakeVecEnv(1, board_size=6, seed=0)
    env = SnakeEnv(board_size=6, render_mode="ansi")
    env.reset(seed=0)
    venv.reset()
    venv.set_state(0, U_BODY, 3, U_FOOD)
    env.set_state(U_BODY, 3, U_FOOD)
    for action in (2, 2, 1):  # down, down, right: the body bends behind the head
        env.step(action)
        venv.step(np.array([action]))
        assert venv.render("ansi") == env.render()


@pytest.mark.parametrize("env_id", ["sb3_snake/Snake-v0", "sb3_snake/SnakeEgocentric-v0"])
def test_human_mode_draws_the_text_board_on_stdout_without_a_window_library(capsys, env_id):
    """RL Zoo's ``enjoy`` asks for ``human``; without it in the env's modes, Gymnasium wrapped the
    ``rgb_array`` frames in its pygame window, and pygame is not installed."""
    import gymnasium as gym

    env = gym.make(env_id, board_size=6, render_mode="human")
    assert env.unwrapped.render_mode == "human" and "human" in env.metadata["render_modes"]
    env.reset(seed=0)
    drawn = capsys.readouterr().out
    assert drawn.startswith("\n########\n") and drawn.endswith("score 0  length 3\n")
    env.step(1)
    assert capsys.readouterr().out.count("########") == 2  # a frame, framed top and bottom
    assert env.render() is None and capsys.readouterr().out == ""  # that step drew it already
    env.unwrapped.set_state(U_BODY, 3, U_FOOD)
    env.render()
    assert "#.H─┐..#" in capsys.readouterr().out.splitlines()


def test_the_batched_env_draws_its_first_game_in_human_mode(capsys):
    venv = BatchedSnakeVecEnv(2, board_size=6, seed=0, render_mode="human")
    venv.reset()
    venv.set_state(0, U_BODY, 3, U_FOOD)
    assert venv.render() is None
    assert "#.H─┐..#" in capsys.readouterr().out.splitlines()
