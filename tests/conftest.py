"""Shared helpers: one interface over both environments, random valid game states, a fake W&B,
and the config and settings of a run that takes seconds."""

from __future__ import annotations

import os
import sys
import tempfile
import types

import numpy as np
import pytest
import torch

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.envs.rules import DIRECTION_DELTAS


class SingleGame:
    """Plays one game of either environment through the same calls.

    For ``BatchedSnakeVecEnv`` the single game is game 0 of a batch of one; when it finishes,
    the observation returned is the terminal one (as ``SnakeEnv`` does), not the restarted game.
    """

    def __init__(self, kind: str, **rules):
        self.kind = kind
        if kind == "single":
            self.env = SnakeEnv(**rules)
            self.env.reset(seed=0)
        else:
            self.env = BatchedSnakeVecEnv(1, seed=0, **rules)
            self.env.reset()

    def set_state(self, body, direction, food):
        if self.kind == "single":
            return self.env.set_state(body, direction, food)
        return self.env.set_state(0, body, direction, food)

    def step(self, action: int):
        if self.kind == "single":
            return self.env.step(action)
        obs, rewards, dones, infos = self.env.step(np.array([action]))
        info = dict(infos[0])
        if not dones[0]:
            return obs[0], float(rewards[0]), False, False, info
        truncated = info["TimeLimit.truncated"]
        return info["terminal_observation"], float(rewards[0]), not truncated, truncated, info


@pytest.fixture(params=["single", "batched"])
def game_kind(request) -> str:
    return request.param


def direction_between(cell, neighbour) -> int:
    """The direction (0 up, 1 right, 2 down, 3 left) from ``cell`` to the adjacent ``neighbour``."""
    delta = (neighbour[0] - cell[0], neighbour[1] - cell[1])
    return [tuple(d) for d in DIRECTION_DELTAS.tolist()].index(delta)


def neck_direction(body) -> int:
    """The direction (0 up, 1 right, 2 down, 3 left) from the head ``body[0]`` to the neck ``body[1]``."""
    return direction_between(body[0], body[1])


def random_state(rng: np.random.Generator, board_size: int, max_length: int | None = None):
    """A random valid ``(body, direction, food)``: a self-avoiding walk from a random head."""
    n = board_size
    max_length = max_length or n * n
    target_length = int(rng.integers(2, max_length + 1))
    while True:
        body = [(int(rng.integers(n)), int(rng.integers(n)))]
        while len(body) < target_length:
            row, col = body[-1]
            options = [(row + dr, col + dc) for dr, dc in DIRECTION_DELTAS.tolist()]
            options = [c for c in options if 0 <= c[0] < n and 0 <= c[1] < n and c not in body]
            if not options:
                break
            body.append(options[int(rng.integers(len(options)))])
        if len(body) >= 2:
            break
    direction = int(rng.choice([d for d in range(4) if d != neck_direction(body)]))
    free = [(r, c) for r in range(n) for c in range(n) if (r, c) not in body]
    food = free[int(rng.integers(len(free)))] if free else None
    return body, direction, food


#: Marks a test that needs a CUDA GPU: ``pytest -m cuda`` selects these, and without a GPU they
#: are skipped (:func:`pytest_collection_modifyitems`).
cuda = pytest.mark.cuda


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The suite is the entry point here and owns the thread count (the library never sets it):
    one thread, so that tests and the programs some of them start do not fight over 2 cores."""
    from sb3_snake.acceleration.optimizations import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session", autouse=True)
def auto_settings_cache(tmp_path_factory):
    """``auto`` settings measured during the suite are cached in a folder of its own (shared by
    the programs some tests start), never in the user's cache."""
    folder = tmp_path_factory.mktemp("sb3-snake-cache")
    previous = os.environ.get("SB3_SNAKE_CACHE_DIR")
    os.environ["SB3_SNAKE_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SB3_SNAKE_CACHE_DIR", None)
    else:
        os.environ["SB3_SNAKE_CACHE_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def no_other_load():
    """``auto`` measurements of the suite see no other load, so whether they are cached does not
    depend on the host of CI's virtual machine; yields the real meter, for the tests of it."""
    from sb3_snake.common import system

    real = system.other_load_meter
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(system, "other_load_meter", lambda: lambda: 0.0)
        yield real


class InstantCompile:
    """Stands in for :class:`~sb3_snake.update.child.CompileJob`: done at once, and what it
    "compiled" is the update graph itself, run eagerly (see :func:`instant_compile`)."""

    started: list[int] = []  #: the batch sizes of the compiles started, in order

    def __init__(self, graph, arguments, options, compile_threads=1, timeout=None):
        self.graph, self.threads = graph, options["threads"]
        self.steps_per_call, self.batch_size = arguments[0].observations.shape[:2]
        self.artifact, self.child = None, types.SimpleNamespace(pid=0, seconds=0.0)
        self.inductor_cache = tempfile.gettempdir()
        InstantCompile.started.append(self.batch_size)

    def poll(self):
        return True

    def wait(self, interrupted=None):
        return True

    def failure(self):
        return ""

    def result(self):
        return {"cached": False}

    def close(self):
        pass


@pytest.fixture
def instant_compile(monkeypatch):
    """Compiles finish at once and their graph runs eagerly (a real compile takes long; the
    compile's own tests do one): for tests of when a compile starts and how training uses it."""
    from sb3_snake.update.graph import UpdateGraph

    monkeypatch.setattr("sb3_snake.update.compile.CompileJob", InstantCompile)
    monkeypatch.setattr("sb3_snake.update.compile.load", lambda path, *context: UpdateGraph.forward)
    InstantCompile.started = []
    return InstantCompile


#: A small attention network, so that DQN tests run in moments.
SMALL_POLICY = {"features_extractor_kwargs": {"embed_dim": 16, "num_heads": 2, "features_dim": 32}}


def small_dqn(
    settings,
    board_size: int = 5,
    transitions: int = 128,
    policy_kwargs=None,
    device: str = "cpu",
    countdown: bool = False,
    egocentric: bool = False,
    **dqn_kwargs,
):
    """A small SnakeDQN on 8 games whose replay buffer already holds ``transitions`` of random play,
    on the CPU unless ``device`` says otherwise (SB3's ``auto`` would take a GPU where one is)."""
    from stable_baselines3.common.logger import Logger

    from sb3_snake import SnakeDQN
    from sb3_snake.autotune import fill_replay_buffer

    env = BatchedSnakeVecEnv(8, board_size=board_size, seed=0, countdown=countdown, egocentric=egocentric)
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        learning_starts=0,
        buffer_size=512,
        batch_size=32,
        seed=0,
        policy_kwargs={**SMALL_POLICY, **(policy_kwargs or {})},
        device=device,
        **dqn_kwargs,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_replay_buffer(model, env, transitions)
    return model


def fixed_batch(model, monkeypatch):
    """One sampled batch of 32, which ``model``'s replay buffer then returns for every sample: for
    models that sample a batch a step (eager or captured updates, not a CPU-compiled one, which
    samples all of a call's batches at once)."""
    batch = model.replay_buffer.sample(32)
    monkeypatch.setattr(model.replay_buffer, "sample", lambda *args, **kwargs: batch)
    return batch


class FakeWandb(types.ModuleType):
    """Records what the run gives W&B."""

    def __init__(self):
        super().__init__("wandb")
        self.init_kwargs, self.logged, self.summary, self.finished = None, [], {}, False
        self.Settings = lambda **kwargs: kwargs

    def init(self, **kwargs):
        self.init_kwargs = kwargs
        fake = self

        class Run:
            summary = fake.summary

            def log(self, metrics):
                fake.logged.append(metrics)

            def finish(self):
                fake.finished = True

        return Run()


@pytest.fixture
def fake_wandb(monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return fake


def rewrite_metadata(path, target, edit):
    """Copy the saved model at ``path`` to ``target`` with its ``sb3_snake.json`` passed through
    ``edit`` (a function from the metadata dict to the new one)."""
    import json
    import zipfile

    from sb3_snake.q_learning.save_format import METADATA_ENTRY

    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    entries[METADATA_ENTRY] = json.dumps(edit(json.loads(entries[METADATA_ENTRY]))).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return target


#: Settings of quick CPU runs: nothing compiled, one thread.
FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def tiny_config(**changes):
    """A SnakeDQN TrainConfig of a run that takes seconds: 12 episodes of 4 games on a 5x5 board, batch
    16, on the CPU."""
    from sb3_snake.training.config import TrainConfig

    values = {
        "algo": "dqn",
        "episodes": 12,
        "n_envs": 4,
        "board_size": 5,
        "seed": 1,
        "learning_starts": 16,
        "exploration_steps": 50,
        "buffer_size": 2_000,
        "batch_size": 16,
        "device": "cpu",
    }
    return TrainConfig(**{**values, **changes})


def scripted_games(mean_score: float, episodes: int = 5, longest: int = 3, won: int = 0) -> dict:
    """What :func:`sb3_snake.training.evaluation.evaluate` returns, the fields an evaluation
    during training reads, for tests that script evaluations."""
    return {"mean_score": mean_score, "episodes": episodes, "max_length": longest, "ends": {"won": won}}
