"""``SnakeDQN``: SB3's DQN with the attention policy and the optimization layer applied.

``SnakeDQN("AttentionPolicy", env, optimizations=settings, **dqn_kwargs)`` is all a library
user needs; the CLI does nothing more. ``"MlpPolicy"`` and ``"CnnPolicy"`` keep working and get
the same optimizations. When ``batch_size`` is not passed it comes from the settings.

Every zip that :meth:`SnakeDQN.save` writes also holds ``sb3_snake.json``: the model described
in plain JSON (policy, spaces, hyperparameters, counters), written here and read back by
:func:`sb3_snake.persistence.load_model` so that a model can be loaded without unpickling
anything from the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import warnings
import zipfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.common.type_aliases import ReplayBufferSamples, RolloutReturn, TrainFreq
from stable_baselines3.common.utils import LinearSchedule, should_collect_more_steps
from stable_baselines3.dqn.policies import CnnPolicy, DQNPolicy, MlpPolicy, QNetwork
from torch import nn

from sb3_snake.acceleration.optimizations import (
    ActiveOptimizations,
    Decision,
    apply_optimizations,
    compile_failure,
    compile_networks,
    decide_compiled_update,
    name_compile,
)
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.replay import DeviceReplayBuffer, use_device_replay_buffer
from sb3_snake.dqn.shaping import shaping_rewards
from sb3_snake.dqn.symmetry import SymmetryAugmentation
from sb3_snake.dqn.update.captured import CapturedUpdate
from sb3_snake.dqn.update.compiled import CompiledUpdate, td_targets, unsupported_reason
from sb3_snake.envs import BatchedSnakeVecEnv

logger = logging.getLogger(__name__)

#: The zip entry of a saved model that describes it in plain JSON.
METADATA_ENTRY = "sb3_snake.json"
METADATA_FORMAT = "sb3-snake model"
METADATA_VERSION = 1

#: DQN hyperparameters kept in the metadata and reported as what a run really trained with.
HYPERPARAMETERS = (
    "seed",
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "gradient_steps",
    "target_update_interval",
    "exploration_initial_eps",
    "exploration_final_eps",
    "exploration_fraction",
    "max_grad_norm",
    "n_steps",
    "exploration_steps",
    "double_dqn",
    "symmetry_augmentation",
    "early_steps",
    "early_update_fraction",
    "food_shaping",
    "learning_rate_half_life",
)
#: Counters that a resumed run continues from.
COUNTERS = ("num_timesteps", "_n_updates", "_n_calls", "_episode_num", "exploration_rate")
#: A halving learning rate changes in this many steps per half-life, not continuously: a
#: captured CUDA graph bakes the rate in and is captured again whenever it changes.
HALF_LIFE_STEPS = 8


def half_life_factor(env_steps: int, half_life: int) -> float:
    """The learning rate's multiplier after ``env_steps`` of decay with the given ``half_life``
    (both in env steps; a half-life of 0 never decays), in :data:`HALF_LIFE_STEPS` steps per
    half-life: 1 until the first eighth has passed, 0.5 from one half-life on."""
    if half_life <= 0 or env_steps <= 0:
        return 1.0
    return 0.5 ** ((env_steps * HALF_LIFE_STEPS // half_life) / HALF_LIFE_STEPS)


def _portable_classes() -> dict[str, type]:
    from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN

    classes = [SnakeAttentionExtractor, FlattenExtractor, NatureCNN, torch.optim.Adam, torch.optim.AdamW]
    classes += [nn.ReLU, nn.Tanh, nn.GELU, nn.SiLU, nn.ELU, nn.LeakyReLU, torch.optim.SGD, torch.optim.RMSprop]
    return {f"{cls.__module__}.{cls.__qualname__}": cls for cls in classes}


#: Classes that may appear in ``policy_kwargs`` of a model loaded without unpickling, by name.
PORTABLE_CLASSES = _portable_classes()


def encode_policy_kwargs(value: Any) -> Any:
    """``policy_kwargs`` as JSON: classes of :data:`PORTABLE_CLASSES` become ``{"class": name}``;
    anything else that JSON cannot hold makes the whole value ``None`` (not portable)."""

    def encode(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, (list, tuple)):
            return [encode(element) for element in item]
        if isinstance(item, dict) and all(isinstance(key, str) for key in item):
            return {key: encode(element) for key, element in item.items()}
        name = f"{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', '')}"
        if isinstance(item, type) and PORTABLE_CLASSES.get(name) is item:
            return {"class": name}
        raise TypeError(name)

    try:
        return encode(value)
    except TypeError:
        return None


class FinishedGameInfos(list):
    """SB3's per-game ``infos`` of one step, built for the games that finished only; the others
    share one empty dict. ``finished`` lists those games' indices."""

    finished: list[int]


_NO_INFO: dict[str, Any] = {}


def finished_games(env: BatchedSnakeVecEnv, step: Any) -> tuple[np.ndarray, FinishedGameInfos]:
    """``dones`` and ``infos`` as SB3's VecEnv ``step`` gives them, from a ``BatchedStep``: the one
    read on the host per step (which games finished, and their episode statistics)."""
    dones = (step.terminated | step.truncated).cpu().numpy()
    infos = FinishedGameInfos([_NO_INFO] * env.num_envs)
    finished = env.finished_infos(step)
    for index, info in finished.items():
        infos[index] = info
    infos.finished = list(finished)
    return dones, infos


class TrainingDiverged(RuntimeError):
    """The TD loss became NaN or infinite: the networks' weights can no longer be trusted."""


class SnakeQNetwork(QNetwork):
    """A QNetwork whose forward pass runs inside the optimization layer's context.

    The context (SDPA backend, bf16 autocast) covers the network only; Q-values are returned
    as float32 so that everything computed from them stays in full precision.

    :param dueling: split the head into a state value and action advantages,
        ``Q = V + A - mean(A)`` (Wang et al., 2016); ``q_net`` is then the advantage stream.
    """

    forward_context: Callable[[], AbstractContextManager] = contextlib.nullcontext

    def __init__(self, *args: Any, dueling: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dueling = dueling
        if dueling:
            self.value_net = nn.Sequential(*create_mlp(self.features_dim, 1, self.net_arch, self.activation_fn))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        with self.forward_context():
            q_values = self.q_values(self.extract_features(obs, self.features_extractor))
        return q_values.float()

    def q_values(self, features: torch.Tensor) -> torch.Tensor:
        """The head: Q-values from the extracted features (``V + A - mean(A)`` when dueling)."""
        q_values = self.q_net(features)
        if self.dueling:
            q_values = self.value_net(features) + q_values - q_values.mean(dim=1, keepdim=True)
        return q_values

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "dueling": self.dueling}


class _OptimizedQNetworks:
    """Mixin for DQN policies: build :class:`SnakeQNetwork` (optionally dueling) instead of ``QNetwork``,
    and use the fused Adam kernel.

    ``torch.optim.Adam`` defaults to a loop over parameters on CPU; ``fused=True`` does the whole
    step in one kernel (about 10x faster for this policy's small tensors on the project's
    2-core CPU, ~0.6 ms instead of ~5.7 ms per step). Given ``optimizer_kwargs`` win.
    """

    def __init__(self, *args: Any, dueling: bool = False, **kwargs: Any):
        self.dueling = dueling
        optimizer_kwargs = dict(kwargs.pop("optimizer_kwargs", None) or {})
        if kwargs.get("optimizer_class", torch.optim.Adam) in (torch.optim.Adam, torch.optim.AdamW):
            optimizer_kwargs.setdefault("fused", True)
        super().__init__(*args, optimizer_kwargs=optimizer_kwargs, **kwargs)

    def make_q_net(self) -> SnakeQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return SnakeQNetwork(**net_args, dueling=self.dueling).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "dueling": self.dueling}


class AttentionPolicy(_OptimizedQNetworks, DQNPolicy):
    """DQN policy whose features extractor is :class:`SnakeAttentionExtractor` by default.

    ``net_arch`` defaults to ``[]``: the extractor already ends in a hidden layer.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeAttentionExtractor)
        kwargs.setdefault("net_arch", [])
        super().__init__(*args, **kwargs)


class SnakeMlpPolicy(_OptimizedQNetworks, MlpPolicy):
    """SB3's ``MlpPolicy`` with the optimization layer's forward context."""


class SnakeCnnPolicy(_OptimizedQNetworks, CnnPolicy):
    """SB3's ``CnnPolicy`` with the optimization layer's forward context."""


def compiled_update_decision(model: SnakeDQN) -> Decision:
    """Whether a compile of ``model`` compiles its whole update
    (:func:`~sb3_snake.acceleration.optimizations.decide_compiled_update` for its device and its support)."""
    return decide_compiled_update(model.device.type, unsupported_reason(model))


def compile_model(model: SnakeDQN, active: ActiveOptimizations) -> ActiveOptimizations:
    """Compile as :func:`compiled_update_decision` says: the whole update on the CPU (a
    :class:`CompiledUpdate`, which compiles at its first call), else the Q-networks."""
    whole = compiled_update_decision(model)
    if not whole.active:
        if whole.requested:
            logger.info("compiling the Q-networks, not the whole update: %s", whole.reason)
        return compile_networks(model, active)
    model._compiled = CompiledUpdate(model, active)
    return name_compile(active, whole)


class SnakeDQN(DQN):
    """DQN with the attention policy and the optimizations of :class:`OptimizationSettings`.

    :param policy: ``"AttentionPolicy"``, ``"MlpPolicy"``, ``"CnnPolicy"`` or a policy class.
    :param env: the environment, typically a :class:`~sb3_snake.BatchedSnakeVecEnv`.
    :param optimizations: the settings to apply; ``None`` uses the built-in defaults as
        :meth:`OptimizationSettings.unmeasured` gives them (nothing measured, nothing compiled).
        Nothing is read from ``.env`` or the environment here: ``OptimizationSettings.load()``
        does that when asked, as the CLI does.
    :param exploration_steps: when set, epsilon falls linearly from ``exploration_initial_eps``
        to ``exploration_final_eps`` over this many env steps (all envs together), whatever
        ``total_timesteps`` is; SB3's ``exploration_fraction`` needs a known total, which a run
        that stops after a number of episodes does not have.
    :param double_dqn: compute TD targets with Double DQN (van Hasselt et al., 2016): the
        online network picks the next action, the target network values it.
    :param symmetry_augmentation: show each replayed transition under a random one of the
        board's eight symmetries (:mod:`sb3_snake.dqn.symmetry`); needs square observations.
    :param compile_after: with ``torch.compile`` on, train this many gradient steps eagerly and
        compile then (0: compile when the model is built). A cold compile stalls training (the
        two networks took 70-90 s on a 2-core CPU; the whole update, as a CPU now compiles it,
        about 26 s), so a deferred compile keeps the first minute learning and still speeds up
        the rest of a run. On a CPU the whole update is compiled (:mod:`sb3_snake.dqn.update.compiled`),
        on CUDA the two networks (:func:`~sb3_snake.acceleration.optimizations.decide_compiled_update`).
    :param early_steps: for this many env steps (all envs together), train
        ``early_update_fraction`` of the scheduled gradient steps: a replay ratio for the first
        minutes of a run. Early on the replay buffer is small and the policy changes fast, so
        fresh play is worth more than replaying the same few games; later, replaying more of a
        full buffer learns more per game (0: no early phase).
    :param early_update_fraction: the fraction of ``gradient_steps`` trained before
        ``early_steps``, kept exact over calls (0.5 with one gradient step per update trains on
        every other update).
    :param food_shaping: scale of potential-based reward shaping towards the food
        (:mod:`sb3_snake.dqn.shaping`; 0: off): replayed rewards gain ``scale * (gamma * phi(s') -
        phi(s))``, which leaves the optimal policy as it is. The env's own rewards, and so episode
        returns and scores, are unchanged.
    :param learning_rate_half_life: after ``early_steps``, the learning rate (SB3's, from its
        schedule) halves every this many env steps (all envs together; 0: it does not), in
        eighths of a half-life (:func:`half_life_factor`). SB3's own schedules follow the
        progress towards ``total_timesteps``, which a run that stops by episodes or by the clock
        does not know; this follows the env steps taken.
    :param kwargs: any other ``DQN`` argument (``n_steps`` gives n-step returns; a dueling
        head is ``policy_kwargs={"dueling": True}``).

    The replay buffer is :class:`~sb3_snake.dqn.replay.DeviceReplayBuffer` when the model trains on
    CUDA (sampled on the GPU, no copy per batch) and SB3's own on the CPU, unless
    ``replay_buffer_class`` is given (see :func:`~sb3_snake.dqn.replay.use_device_replay_buffer`).

    After construction, ``model.active_optimizations`` says what is really active and why
    anything requested is not (the compile decision's reason says what is compiled).
    Compilation is not saved; :meth:`load` applies the optimizations it is given again.
    """

    policy_aliases = {
        **DQN.policy_aliases,
        "MlpPolicy": SnakeMlpPolicy,
        "CnnPolicy": SnakeCnnPolicy,
        "AttentionPolicy": AttentionPolicy,
    }

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: Any,
        optimizations: OptimizationSettings | None = None,
        exploration_steps: int | None = None,
        double_dqn: bool = False,
        symmetry_augmentation: bool = False,
        compile_after: int = 0,
        early_steps: int = 0,
        early_update_fraction: float = 1.0,
        food_shaping: float = 0.0,
        learning_rate_half_life: int = 0,
        **kwargs: Any,
    ):
        self.exploration_steps = exploration_steps
        self.learning_rate_half_life = learning_rate_half_life
        self.early_steps = early_steps
        self.early_update_fraction = early_update_fraction
        self.food_shaping = food_shaping
        self._early_credit = 0.0
        self.compile_after = compile_after
        self._compile_pending = False
        self.double_dqn = double_dqn
        self.symmetry_augmentation = symmetry_augmentation
        self._augmentation: SymmetryAugmentation | None = None
        self._captured: CapturedUpdate | None = None
        self._compiled: CompiledUpdate | None = None
        self.optimizations = optimizations if optimizations is not None else OptimizationSettings.unmeasured()
        kwargs.setdefault("batch_size", self.optimizations.batch_size)
        self.active_optimizations: ActiveOptimizations | None = None
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        if self.food_shaping and self._vec_normalize_env is not None:
            raise ValueError("food_shaping needs the env's own observations and rewards; remove VecNormalize")
        if self.replay_buffer_class is None and use_device_replay_buffer(self.device.type)[0]:
            self.replay_buffer_class = DeviceReplayBuffer
            self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "n_steps": self.n_steps, "gamma": self.gamma}
        with warnings.catch_warnings():
            # SB3 warns that n_steps is ignored with a custom buffer class; ours takes it above.
            warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored because a custom")
            super()._setup_model()
        deferred = self.compile_after if self.compile_after > self._n_updates else 0
        self.active_optimizations = apply_optimizations(
            self, self.optimizations, deferred, compile_model, compiled_update_decision(self)
        )
        self._compile_pending = bool(deferred) and self.active_optimizations.compile.active
        self._setup_augmentation()

    def _setup_augmentation(self) -> None:
        self._augmentation = None
        if self.symmetry_augmentation:
            *_, height, width = self.observation_space.shape
            if height != width:
                raise ValueError(f"symmetry augmentation needs a square board, got observations of {height}x{width}")
            self._augmentation = SymmetryAugmentation(width, self.device)

    def _on_step(self) -> None:
        super()._on_step()
        if self.exploration_steps:
            progress = min(1.0, self.num_timesteps / self.exploration_steps)
            start, end = self.exploration_initial_eps, self.exploration_final_eps
            self.exploration_rate = start + progress * (end - start)
            self.logger.record("rollout/exploration_rate", self.exploration_rate)

    def _update_learning_rate(self, optimizers: list[torch.optim.Optimizer] | torch.optim.Optimizer) -> None:
        """SB3's rate from its schedule, times :func:`half_life_factor` of the env steps since
        ``early_steps``."""
        super()._update_learning_rate(optimizers)
        factor = half_life_factor(self.num_timesteps - self.early_steps, self.learning_rate_half_life)
        if factor == 1.0:
            return
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["lr"] *= factor
        self.logger.record("train/learning_rate", optimizers[0].param_groups[0]["lr"])

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's DQN update, with optional Double DQN targets and symmetry augmentation, and no
        host sync per step.

        SB3 calls ``loss.item()`` after every gradient step, which waits for the device each
        time; here the losses stay on the device and are read once per call. That one read
        also checks them: a NaN or infinite loss raises :class:`TrainingDiverged`.
        Before ``early_steps`` it trains ``early_update_fraction`` of ``gradient_steps``.
        With the CUDA graph active, the steps replay one captured graph (:mod:`sb3_snake.dqn.update.captured`).
        """
        if self.num_timesteps < self.early_steps:
            self._early_credit += gradient_steps * self.early_update_fraction
            gradient_steps = int(self._early_credit)
            self._early_credit -= gradient_steps
            if not gradient_steps:
                return
        if self._compile_pending and self._n_updates >= self.compile_after:
            self._compile_pending = False
            self.active_optimizations = compile_model(self, self.active_optimizations)
            self._captured = None  # the graph holds the eager networks' kernels
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        captured = self._captured_update(batch_size)
        if captured is not None:
            mean_loss = captured.run(gradient_steps)
            if captured.failure:
                logger.warning("CUDA graph requested but not active: %s; training eagerly", captured.failure)
                graph = Decision(True, False, captured.failure)
                self.active_optimizations, self._captured = replace(self.active_optimizations, cuda_graph=graph), None
        else:
            losses = [
                self.gradient_step(self.replay_buffer.sample(batch_size, env=self._vec_normalize_env))
                for _ in range(gradient_steps)
            ]
            mean_loss = torch.stack(losses).mean()
        self._n_updates += gradient_steps
        loss = mean_loss.item()
        if not math.isfinite(loss):
            raise TrainingDiverged(
                f"the TD loss became {loss} by update {self._n_updates} (learning rate {self.learning_rate}); "
                "lower --learning-rate"
            )
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)

    def gradient_step(self, replay_data: ReplayBufferSamples) -> torch.Tensor:
        """One update from one sampled batch: augmentation, TD targets (Double DQN when on), the
        Huber loss, backward, gradient clipping and the optimizer step; the loss, detached.
        With the whole update compiled (:mod:`sb3_snake.dqn.update.compiled`) one call does it all."""
        if self._augmentation is not None:
            replay_data = self._augmentation(replay_data)
        if self._compiled is not None and (loss := self._compiled_step(replay_data)) is not None:
            return loss
        online = self.q_net if self.double_dqn else None
        target_q_values = td_targets(replay_data, self.q_net_target, online, self.gamma)
        current_q_values = self.q_net(replay_data.observations).gather(1, replay_data.actions.long())
        loss = F.smooth_l1_loss(current_q_values, target_q_values)
        self.policy.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()
        return loss.detach()

    def _compiled_step(self, replay_data: ReplayBufferSamples) -> torch.Tensor | None:
        """The compiled update's loss; ``None`` when its first call (the compile) failed, which
        turns it off with the error as the reason."""
        try:
            return self._compiled(replay_data)
        except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
            if self._compiled.calls:  # it compiled and ran before: not a compile failure
                raise
            reason = compile_failure(error)
            logger.warning("torch.compile requested but not active: %s; training eagerly", reason)
            self.active_optimizations = replace(self.active_optimizations, compile=Decision(True, False, reason))
            self._compiled = None
            return None

    def _captured_update(self, batch_size: int) -> CapturedUpdate | None:
        """The captured update at ``batch_size`` when the CUDA graph is active (and no VecNormalize
        changes the samples), else ``None``; a new batch size gets a new capture."""
        if not self.active_optimizations.cuda_graph.active or self._vec_normalize_env is not None:
            return None
        if self._captured is None or self._captured.batch_size != batch_size:
            self._captured = CapturedUpdate(self, batch_size)
        return self._captured

    def collect_rollouts(
        self,
        env: Any,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: Any = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """SB3's rollout loop, on tensors when it can: with a :class:`BatchedSnakeVecEnv` and a
        :class:`DeviceReplayBuffer` (a model on CUDA), observations, actions and transitions
        stay tensors (``step_tensors``, ``add_tensors``); only which games finished is read on
        the host, for the callbacks. Otherwise SB3's own loop runs."""
        on_tensors = isinstance(env, BatchedSnakeVecEnv) and isinstance(replay_buffer, DeviceReplayBuffer)
        if not on_tensors or self._vec_normalize_env is not None or action_noise is not None:
            return super().collect_rollouts(
                env, callback, train_freq, replay_buffer, action_noise, learning_starts, log_interval
            )
        self.policy.set_training_mode(False)
        num_collected_steps, num_collected_episodes = 0, 0
        callback.on_rollout_start()
        obs = torch.as_tensor(self._last_obs, device=env.device)
        while should_collect_more_steps(train_freq, num_collected_steps, num_collected_episodes):
            actions = self._act_on_tensors(obs, learning_starts, env.num_envs)
            step = env.step_tensors(actions)
            self.num_timesteps += env.num_envs
            num_collected_steps += 1
            dones, infos = finished_games(env, step)
            callback.update_locals({"actions": actions, "new_obs": step.observations, "dones": dones, "infos": infos})
            if not callback.on_step():
                self._last_obs = step.observations
                return RolloutReturn(
                    num_collected_steps * env.num_envs, num_collected_episodes, continue_training=False
                )
            self._update_info_buffer(infos, dones)
            next_obs = step.observations.index_copy(0, step.final_indices, step.final_observations)
            rewards = step.rewards
            if self.food_shaping:
                rewards = rewards + shaping_rewards(self.food_shaping, self.gamma, obs, next_obs, step.terminated)
            replay_buffer.add_tensors(obs, next_obs, actions, rewards, step.terminated | step.truncated, step.truncated)
            obs = step.observations
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            self._on_step()
            for _ in range(len(infos.finished)):
                num_collected_episodes += 1
                self._episode_num += 1
                if log_interval is not None and self._episode_num % log_interval == 0:
                    self.dump_logs()
        self._last_obs = obs
        callback.on_rollout_end()
        return RolloutReturn(num_collected_steps * env.num_envs, num_collected_episodes, continue_training=True)

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """SB3's, with :mod:`~sb3_snake.dqn.shaping`'s term added to the stored rewards when
        ``food_shaping`` is on (the tensor loop of :meth:`collect_rollouts` adds it there)."""
        if self.food_shaping:
            next_obs = np.array(new_obs)
            terminated = np.zeros(len(dones), dtype=bool)
            for i in np.flatnonzero(dones):
                next_obs[i] = infos[i]["terminal_observation"]
                terminated[i] = not infos[i].get("TimeLimit.truncated", False)
            shaping = shaping_rewards(
                self.food_shaping,
                self.gamma,
                torch.as_tensor(self._last_obs),
                torch.as_tensor(next_obs),
                torch.as_tensor(terminated),
            )
            reward = reward + shaping.numpy().astype(reward.dtype)
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)

    def _act_on_tensors(self, obs: torch.Tensor, learning_starts: int, num_envs: int) -> torch.Tensor:
        """SB3's DQN action choice on tensors: random before ``learning_starts``; afterwards one
        exploration draw per vector step (as ``DQN.predict``), else the greedy action of every game."""
        if self.num_timesteps < learning_starts or np.random.rand() < self.exploration_rate:
            return torch.randint(4, (num_envs,), device=obs.device)
        with torch.no_grad():
            return self.q_net(obs.to(self.device)).argmax(dim=1).to(obs.device)

    def optimizations_in_effect(self) -> ActiveOptimizations:
        """``active_optimizations`` as they stand now: a compile still waiting for its gradient
        step is reported not active, with the step it waits for (a run's summary uses this)."""
        active = self.active_optimizations
        if not self._compile_pending:
            return active
        reason = f"deferred to gradient step {self.compile_after:,}, not reached ({self._n_updates:,} trained)"
        return replace(active, compile=Decision(True, False, reason))

    def _excluded_save_params(self) -> list[str]:
        # _last_obs may be a device tensor (the tensor rollout loop); a loaded model resets its env anyway.
        excluded = ["optimizations", "active_optimizations", "_compile_pending", "_augmentation", "_captured"]
        excluded += ["_compiled"]
        excluded += ["_last_obs", "_last_original_obs"]
        return [*super()._excluded_save_params(), *excluded]

    def set_hyperparameters(self, **values: Any) -> None:
        """Change hyperparameters of a built (or loaded) model, as if it had been made with them.

        Takes the names of :data:`HYPERPARAMETERS` (except ``n_steps``, which fixes the replay
        buffer's kind), ``train_freq`` and ``verbose``. The learning-rate and exploration
        schedules are rebuilt; a new ``buffer_size`` gives a new, empty replay buffer. A captured
        update (:mod:`sb3_snake.dqn.update.captured`) is dropped and captured again with the new values.
        """
        unknown = set(values) - (set(HYPERPARAMETERS) - {"n_steps"}) - {"train_freq", "verbose"}
        if unknown:
            raise ValueError(f"cannot set {', '.join(sorted(unknown))} on a built model")
        rebuild_buffer = "buffer_size" in values and values["buffer_size"] != self.buffer_size
        self._captured = None  # gamma, clipping, Double DQN and augmentation are baked into a graph
        for name, value in values.items():
            setattr(self, name, value)
        self._setup_lr_schedule()
        self._convert_train_freq()
        self.exploration_schedule = LinearSchedule(
            self.exploration_initial_eps, self.exploration_final_eps, self.exploration_fraction
        )
        if hasattr(self.replay_buffer, "gamma"):
            self.replay_buffer.gamma = self.gamma  # NStepReplayBuffer discounts with it
        if rebuild_buffer:
            buffer = self.replay_buffer
            kwargs = {"n_steps": buffer.n_steps, "gamma": self.gamma} if hasattr(buffer, "n_steps") else {}
            self.replay_buffer = type(buffer)(
                self.buffer_size,
                self.observation_space,
                self.action_space,
                device=self.device,
                n_envs=self.n_envs,
                optimize_memory_usage=self.optimize_memory_usage,
                **kwargs,
            )
        self._setup_augmentation()

    def set_parameters(self, *args: Any, **kwargs: Any) -> None:
        """SB3's; a captured update is dropped, as loading gives the optimizer new state tensors
        that a graph captured before would not see."""
        self._captured = None
        if self._compiled is not None:
            self._compiled.state = ()  # the optimizer's new state tensors are read again
        super().set_parameters(*args, **kwargs)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters this model trains with now, as plain JSON values."""
        values = {name: getattr(self, name) for name in HYPERPARAMETERS}
        if not isinstance(values["learning_rate"], (int, float)):
            values["learning_rate"] = float(self.lr_schedule(self._current_progress_remaining))
        return {**values, "train_freq": self.train_freq.frequency, "train_freq_unit": self.train_freq.unit.value}

    def metadata(self) -> dict[str, Any]:
        """This model in plain JSON: enough to rebuild it without unpickling (see ``persistence``)."""
        policy = next((name for name, cls in self.policy_aliases.items() if cls is type(self.policy)), None)
        return {
            "format": METADATA_FORMAT,
            "version": METADATA_VERSION,
            "policy": policy,
            "observation_shape": list(self.observation_space.shape),
            "n_actions": int(self.action_space.n),
            "n_envs": self.n_envs,
            "policy_kwargs": encode_policy_kwargs(self.policy_kwargs),
            "hyperparameters": self.hyperparameters(),
            "counters": {name: getattr(self, name) for name in COUNTERS},
        }

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """SB3's ``save``, plus :data:`METADATA_ENTRY` in the zip when ``path`` is a file path."""
        super().save(path, exclude=exclude, include=include)
        if isinstance(path, (str, os.PathLike)):
            target = Path(path) if Path(path).suffix else Path(f"{path}.zip")
            with zipfile.ZipFile(target, "a") as archive:
                archive.writestr(METADATA_ENTRY, json.dumps(self.metadata(), indent=1))

    @classmethod
    def load(
        cls,
        path: Any,
        env: Any = None,
        device: torch.device | str = "auto",
        optimizations: OptimizationSettings | None = None,
        **kwargs: Any,
    ) -> SnakeDQN:
        """SB3's loader, then ``optimizations`` applied (``None``: ``OptimizationSettings.unmeasured()``).

        Like SB3's, it unpickles parts of the file, which can run code: use it only for files
        you trust. :func:`sb3_snake.load_model` loads without unpickling.
        """
        optimizations = optimizations if optimizations is not None else OptimizationSettings.unmeasured()
        return super().load(path, env=env, device=device, optimizations=optimizations, **kwargs)
