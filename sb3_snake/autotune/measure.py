"""The real measurement behind ``auto``: samples/s of one candidate's gradient step, of the learner
that will train (:class:`GradientStepMeter` for SnakeDQN, :class:`PQNStepMeter` for PQN).

A candidate's first measurement builds its model (with random play in its replay buffer, or its
rollout) and runs untimed warm-up steps (compilation and CUDA graph capture included); each
measurement then times one slice of gradient steps with :func:`sb3_snake.common.timing.time_for`.
The model is kept for the candidate's later slices, so :data:`~sb3_snake.autotune.search.ROUNDS`
slices cost one warm-up. Steps are timed one to a call, so a compiled candidate runs a graph of
one step (:attr:`~sb3_snake.update.steps.CompiledSteps.steps_per_call`): the same measure for
every batch size, leaving out what a graph of several steps saves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.logger import Logger

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune.search import ROUNDS, Candidate
from sb3_snake.common.timing import device_sync, time_for
from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE, SnakeDQN
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.pqn import PQN
from sb3_snake.pqn.gradient_step import Samples
from sb3_snake.update.capture import WARMUP_STEPS

#: Seconds of timed gradient steps per measured configuration (warm-up not counted).
MEASURE_SECONDS = 0.6


def fill_replay_buffer(model: SnakeDQN, env: BatchedSnakeVecEnv, transitions: int, seed: int = 0) -> None:
    """Add at least ``transitions`` real transitions of uniformly random play to the model's buffer
    (over the env's own actions: four directions, or three turns in the egocentric view)."""
    obs, rng = env.reset(), np.random.default_rng(seed)
    n_actions = int(env.action_space.n)
    while model.replay_buffer.size() * env.num_envs < transitions and not model.replay_buffer.full:
        actions = rng.integers(n_actions, size=env.num_envs)
        next_obs, rewards, dones, infos = env.step(actions)
        model.replay_buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = next_obs


def filled_model(
    settings: OptimizationSettings,
    device: torch.device | str,
    board_size: int,
    transitions: int,
    policy_kwargs: dict[str, Any] | None = None,
    n_envs: int = 256,
    countdown: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    egocentric: bool = False,
    symmetry_augmentation: bool = False,
) -> SnakeDQN:
    """A fresh SnakeDQN for timing gradient steps of ``batch_size``: ``transitions`` of random
    play in its buffer, learning from the first step, no logging, and a compile asked for made
    at its first gradient step, which waits for it. ``auto`` times the network's
    step on the whole board without augmentation; the benchmarks pass ``sb3-snake train``'s
    view and augmentation, to time the step it trains with."""
    env = BatchedSnakeVecEnv(
        n_envs, board_size=board_size, device=device, seed=0, countdown=countdown, egocentric=egocentric
    )
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        # A compile asked for starts at the first gradient step, and the step waits for it: it is the
        # compiled step that is timed.
        optimizations=replace(settings, compile_after=0, compile_in_background=False),
        policy_kwargs=policy_kwargs,
        buffer_size=transitions,
        batch_size=batch_size,
        learning_starts=0,
        device=device,
        seed=0,
        symmetry_augmentation=symmetry_augmentation,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_replay_buffer(model, env, transitions)
    return model


class GradientStepMeter:
    """The :data:`~sb3_snake.autotune.search.Measure` of a real run: samples/s of
    ``SnakeDQN.train`` per candidate (with the CUDA graph as the run asks), one timed slice of at
    least ``seconds`` a call (:func:`~sb3_snake.common.timing.time_for`). A candidate's first
    call builds its model and runs untimed warm-up steps (compilation and the graph's capture
    included); the model is kept for its later slices."""

    def __init__(
        self,
        device: torch.device,
        policy_kwargs: dict[str, Any],
        board_size: int,
        seconds: float = MEASURE_SECONDS / ROUNDS,
        countdown: bool = False,
        use_cuda_graph: bool = True,
    ):
        self.device, self.policy_kwargs, self.board_size = device, policy_kwargs, board_size
        self.seconds, self.countdown, self.use_cuda_graph = seconds, countdown, use_cuda_graph
        self.models: dict[Candidate, SnakeDQN] = {}

    def __call__(self, candidate: Candidate) -> float:
        model = self.models.get(candidate) or self._build(candidate)

        def step() -> None:
            model.train(gradient_steps=1, batch_size=candidate.batch_size)

        duration, steps = time_for(step, device_sync(self.device), self.seconds)
        return steps * candidate.batch_size / duration

    def _build(self, candidate: Candidate) -> SnakeDQN:
        transitions = max(2048, 2 * candidate.batch_size)
        settings = replace(candidate.settings(torch.get_num_threads()), use_cuda_graph=self.use_cuda_graph)
        model = filled_model(
            settings,
            self.device,
            self.board_size,
            transitions,
            self.policy_kwargs,
            n_envs=64,
            countdown=self.countdown,
            batch_size=candidate.batch_size,
        )
        for _ in range(WARMUP_STEPS + 1):  # calls of one step, as timed (a compiled call holds as many)
            model.train(gradient_steps=1, batch_size=candidate.batch_size)
        self.models[candidate] = model
        return model


class PQNStepMeter:
    """The :data:`~sb3_snake.autotune.search.Measure` of a PQN run: samples/s of PQN's minibatch
    steps (``model.step_choice``, as ``PQN.train`` runs them) per candidate, on a rollout of random
    play of the run's own games and policy, one timed slice of at least ``seconds`` a call. A
    candidate's first call builds its model and runs untimed warm-up steps (compilation and the
    graph's capture included); the model is kept for its later slices.

    :param policy: the PQN policy's name (``"MlpPolicy"``, ``"CnnPolicy"``, ``"AttentionPolicy"``).
    :param n_envs: the run's games; ``n_steps``: the moves of each per rollout.
    :param board_options: the run's board (``countdown``, ``reachable``, ``egocentric``).
    """

    def __init__(
        self,
        device: torch.device,
        policy: str,
        policy_kwargs: dict[str, Any],
        board_size: int,
        n_envs: int,
        n_steps: int,
        seconds: float = MEASURE_SECONDS / ROUNDS,
        use_cuda_graph: bool = True,
        **board_options: Any,
    ):
        self.device, self.policy, self.policy_kwargs, self.board_size = device, policy, policy_kwargs, board_size
        self.n_envs, self.n_steps, self.board_options = n_envs, n_steps, board_options
        self.seconds, self.use_cuda_graph = seconds, use_cuda_graph
        #: Each candidate's model and the rollout its steps fit.
        self.models: dict[Candidate, tuple[PQN, Samples]] = {}

    def __call__(self, candidate: Candidate) -> float:
        model, rollout = self.models.get(candidate) or self._build(candidate)

        def step() -> None:
            _step(model, rollout)

        duration, steps = time_for(step, device_sync(self.device), self.seconds)
        return steps * candidate.batch_size / duration

    def _build(self, candidate: Candidate) -> tuple[PQN, Samples]:
        settings = replace(candidate.settings(torch.get_num_threads()), use_cuda_graph=self.use_cuda_graph)
        env = BatchedSnakeVecEnv(
            self.n_envs, board_size=self.board_size, device=self.device, seed=0, **self.board_options
        )
        model = PQN(
            self.policy,
            env,
            n_steps=self.n_steps,
            n_minibatches=self.n_steps * self.n_envs // candidate.batch_size,
            exploration_initial_eps=1.0,
            exploration_final_eps=1.0,
            # A compile asked for starts at the first gradient step, and the step waits for it: it is the
            # compiled step that is timed.
            optimizations=replace(settings, compile_after=0, compile_in_background=False),
            policy_kwargs=self.policy_kwargs,
            device=self.device,
            seed=0,
        )
        model.set_logger(Logger(folder=None, output_formats=[]))
        model._setup_learn(self.n_steps * self.n_envs, None)
        rollout = model.collect_rollout(model._init_callback(None))
        model.policy.set_training_mode(True)
        for _ in range(WARMUP_STEPS + 1):  # calls of one step, as timed (a compiled call holds as many)
            _step(model, rollout)
        self.models[candidate] = (model, rollout)
        return model, rollout


def _step(model: PQN, rollout: Samples) -> None:
    """One of PQN's minibatch steps on ``rollout``, a new pass over it once the last one is used up."""
    update = model.step_choice.update
    if update.order is None or update.taken >= len(update.order):
        order = torch.randperm(len(rollout.returns), device=model.device).view(-1, model.batch_size)
        update.start_pass(rollout, order)
    model.step_choice.run(1, model.batch_size)
