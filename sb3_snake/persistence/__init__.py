"""Models and replay buffers on disk, by concern: the model file
(:mod:`~sb3_snake.persistence.model_file`), the replay file
(:mod:`~sb3_snake.persistence.replay_file`) and the older formats still read
(:mod:`~sb3_snake.persistence.migrations`). Files are written atomically and read back without
running code from them."""

from sb3_snake.persistence.migrations import legacy_replay_buffer_path, saved_board_options
from sb3_snake.persistence.model_file import check_env, load_model, one_line, save_model, saved_metadata, write_json
from sb3_snake.persistence.replay_file import (
    RECORDED,
    REPLAY_ARRAYS,
    load_replay_buffer,
    replay_buffer_path,
    save_replay_buffer,
)
from sb3_snake.q_learning.save_format import read_metadata

__all__ = [
    "RECORDED",
    "REPLAY_ARRAYS",
    "check_env",
    "legacy_replay_buffer_path",
    "load_model",
    "load_replay_buffer",
    "one_line",
    "read_metadata",
    "replay_buffer_path",
    "save_model",
    "save_replay_buffer",
    "saved_board_options",
    "saved_metadata",
    "write_json",
]
