"""The reachability channel (``reachable=True``): which cells the head can reach through free
cells, the tail's counted free; equal in both envs (step by step: the ``reachable`` rows of
``test_batched_vec_env.test_equivalent_to_snake_env_step_by_step``), turned with the egocentric
view, mirrored with the game (``test_egocentric.test_a_mirrored_game_is_the_mirror_image_of_the_game``),
saved with a model and refused with one line where it cannot apply."""

import numpy as np
import pytest
from typer.testing import CliRunner

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import (
    BODY,
    HEAD,
    TAIL,
    UP,
    board_options,
    board_space,
    opposite,
    reachable_channel,
)
from tests.conftest import SingleGame, neck_direction, random_state

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, use_flash_attention=False, num_threads=1)
WALL = [(5, 2), (4, 2), (3, 2), (2, 2), (1, 2), (0, 2)]  # column 2 of a 6x6 board, bottom to top


def reached(observation, countdown=False):
    return observation[reachable_channel(countdown)]


@pytest.mark.parametrize("countdown", [False, True])
def test_a_wall_of_body_cuts_the_board_and_the_tail_counts_as_free(game_kind, countdown):
    """A snake along column 2 of a 6x6 board, head at (5, 1): the head reaches the cells of
    columns 0 and 1 only; the tail is reachable when it lies on that side."""
    game = SingleGame(game_kind, board_size=6, reachable=True, countdown=countdown)
    left = {(row, col) for row in range(6) for col in (0, 1)} - {(5, 1)}
    # Tail on the far side: unreachable, and nothing beyond the wall is.
    obs = game.set_state([(5, 1), *WALL, (0, 3)], UP, (0, 0))
    expected = np.zeros((6, 6), dtype=np.uint8)
    for cell in left:
        expected[cell] = 1
    np.testing.assert_array_equal(reached(obs, countdown), expected)
    # Tail on the head's side: reachable, through the cell it leaves as the head arrives.
    obs = game.set_state([(5, 1), *WALL, (0, 1)], UP, (0, 0))
    assert reached(obs, countdown)[0, 1] == 1 and obs[TAIL][0, 1] == 1
    np.testing.assert_array_equal(reached(obs, countdown), expected)
    assert reached(obs, countdown)[obs[HEAD].astype(bool)].sum() == 0  # never the head's own cell


def test_on_an_open_board_every_free_cell_and_the_tail_are_reachable(game_kind):
    game = SingleGame(game_kind, reachable=True)
    obs = game.set_state([(5, 5), (5, 4), (5, 3)], UP, (0, 0))
    free = 1 - obs[BODY] - obs[HEAD]
    free[obs[TAIL].astype(bool)] = 1
    np.testing.assert_array_equal(reached(obs), free)


def test_the_egocentric_view_turns_the_channel_with_the_board(game_kind):
    """The egocentric observation, reachability included, is the board's turned to the heading."""
    seen = SingleGame(game_kind, egocentric=True, reachable=True)
    board = SingleGame(game_kind, reachable=True)
    rng = np.random.default_rng(4)
    partial = 0
    for _ in range(40):
        body, _, food = random_state(rng, 10)
        state = (body, opposite(neck_direction(body)), food)
        view, plain = seen.set_state(*state), board.set_state(*state)
        np.testing.assert_array_equal(view, np.rot90(plain, state[1], axes=(1, 2)))
        partial += int(reached(plain).sum() + len(body) < 101)  # some free cell out of reach
    assert partial > 0  # the random snakes wall off pockets, so the channel is not just "free"


@pytest.mark.parametrize(("countdown", "reachable"), [(False, False), (True, False), (False, True), (True, True)])
def test_the_optional_channels_are_read_back_from_the_space(countdown, reachable):
    assert board_options(board_space(4, countdown, reachable)) == {"countdown": countdown, "reachable": reachable}


def test_a_model_keeps_its_channel_and_is_refused_where_it_cannot_apply(tmp_path):
    """Saved with the model (read back by eval, play and resume, safely or trusted); a resume or
    an env without the channel is refused in one line naming the flag."""
    import json
    import zipfile

    from sb3_snake.cli import app
    from sb3_snake.envs import SnakeEnv
    from sb3_snake.persistence import load_model
    from sb3_snake.training.config import TrainConfig
    from sb3_snake.training.evaluation import evaluate
    from sb3_snake.training.resume import resume_config
    from sb3_snake.training.run import train

    config = TrainConfig(
        algo="dqn",
        episodes=None,
        timesteps=64,
        n_envs=4,
        board_size=5,
        learning_starts=16,
        buffer_size=512,
        batch_size=16,
    )
    train(TrainConfig(**{**config.__dict__, "reachable": True, "sources": {}}), FAST, tmp_path / "run")
    path = tmp_path / "run" / "model.zip"
    with zipfile.ZipFile(path) as archive:
        assert json.loads(archive.read("sb3_snake.json"))["observation_channels"][-1] == "reachable"
    for trusted in (False, True):
        model = load_model(path, FAST, trusted=trusted)
        assert board_options(model.observation_space) == {"countdown": False, "reachable": True}
        assert evaluate(model, episodes=2)["episodes"] == 2
    assert resume_config(path).reachable is True
    with pytest.raises(UsageError, match="trained with the reachable channel; pass reachable=True"):
        load_model(path, FAST, env=SnakeEnv(board_size=5, egocentric=True))
    flags = [
        "--episodes",
        "1",
        "--no-compile",
        "--no-bf16",
        "--no-flash-attention",
        "--output",
        str(tmp_path / "again"),
    ]
    result = CliRunner().invoke(app, ["train", "--resume", str(path), "--no-reachable", *flags])
    assert result.exit_code == 2 and not (tmp_path / "again" / "model.zip").exists()
    assert "was trained with the reachable channel; pass --reachable" in result.output.splitlines()[-1]
