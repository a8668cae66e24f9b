"""``SnakeDQN``: SB3's DQN with the attention policy and the optimization layer applied.

``SnakeDQN("AttentionPolicy", env, optimizations=settings, **dqn_kwargs)`` is all a library user needs; the CLI
does nothing more. ``"MlpPolicy"`` and ``"CnnPolicy"`` keep working and get the same optimizations. When
``batch_size`` is not passed it is :data:`DEFAULT_BATCH_SIZE`, as ``sb3-snake train``'s.

What it changes of SB3's ``DQN``, each in its own module: the policies (:mod:`~sb3_snake.dqn.policies`), the
rollout loop on tensors (:mod:`~sb3_snake.dqn.rollout`), the gradient step (:mod:`~sb3_snake.dqn.gradient_step`,
run by :mod:`sb3_snake.update`), TD targets (:mod:`~sb3_snake.dqn.targets`), and the plain-JSON description
every saved zip holds (:mod:`~sb3_snake.q_learning.save_format`). Here: the options, the schedules, and the
update loop.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.dqn.policies import DQNPolicy

from sb3_snake.acceleration.optimizations import ActiveOptimizations, use_device_replay_buffer
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import TrainingDiverged, UsageError, did_you_mean
from sb3_snake.common.schedules import averaging_rate, half_life_factor, scale_learning_rate
from sb3_snake.dqn.gradient_step import DQNUpdate
from sb3_snake.dqn.policies import POLICY_ALIASES
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.rollout import TensorRollouts
from sb3_snake.envs.action_masks import is_snake_board
from sb3_snake.q_learning import save_format, targets
from sb3_snake.q_learning.averaging import q_networks
from sb3_snake.q_learning.exploration import linear_epsilon, random_moves
from sb3_snake.q_learning.save_schema import HYPERPARAMETERS
from sb3_snake.q_learning.symmetry import SymmetryAugmentation
from sb3_snake.update.compile import Compile
from sb3_snake.update.steps import StepChoice

logger = logging.getLogger(__name__)

#: Replay samples per gradient step when none is given, here and in ``sb3-snake train``
#: (:class:`~sb3_snake.training.config.TrainConfig`): DQN learns per update, and at one replay
#: ratio a smaller batch makes more updates in about the same time; on score-against-minutes
#: curves 128 reached each score sooner than 512 (docs/history.md, "Time to skill").
DEFAULT_BATCH_SIZE = 128
#: Gradient steps one update runs before asking ``update_interrupt`` whether to go on: far above
#: the few steps of a usual update (which never asks), small enough that a stop is honoured
#: within a second or so of a long one.
UPDATE_CHUNK = 256


class SnakeDQN(TensorRollouts, DQN):
    """DQN with the attention policy and the optimizations of :class:`OptimizationSettings`.

    Built like SB3's ``DQN``, with SB3's defaults and each option below off. ``sb3-snake
    train`` trains something else: the egocentric view with long starts and stall growth (the
    env's), symmetry augmentation, food shaping 1.0, a learning rate of 5e-4 halving every
    800,000 env steps, a replay ratio of 32 (16 for the first 50,000 env steps), batch 128, 16
    games, its network sizes, and a compile after 8,000 gradient steps in a child process.
    :func:`sb3_snake.build_model` builds exactly that env and model
    (``build_model(TrainConfig(...))``, ``auto`` resolved), and ``TrainConfig``'s fields are
    those options with their ``sb3-snake train`` defaults.

    :param policy: ``"AttentionPolicy"``, ``"MlpPolicy"``, ``"CnnPolicy"`` or a policy class.
    :param env: the environment, typically a :class:`~sb3_snake.BatchedSnakeVecEnv`.
    :param optimizations: the settings to apply; ``None`` uses the built-in defaults as
        :meth:`OptimizationSettings.unmeasured` gives them (nothing measured, nothing compiled).
        Nothing is read from ``.env`` or the environment here: ``OptimizationSettings.load()``
        does that when asked, as the CLI does. The compile's options are settings too:
        ``use_torch_compile``, ``compile_mode``, ``compile_after`` (gradient steps trained
        eagerly first: a cold compile takes long on a small CPU) and ``compile_in_background``
        (train on while a child process compiles; without it training waits, and the switch
        falls at a fixed gradient step, so a seeded run repeats exactly). What is compiled, and
        when, is the model's :class:`~sb3_snake.update.compile.Compile`
        (``model.compile_state``).
    :param exploration_steps: when set, epsilon falls linearly from ``exploration_initial_eps``
        to ``exploration_final_eps`` over this many env steps (all envs together), whatever
        ``total_timesteps`` is; SB3's ``exploration_fraction`` needs a known total, which a run
        that stops after a number of episodes does not have.
    :param double_dqn: compute TD targets with Double DQN (van Hasselt et al., 2016): the
        online network picks the next action, the target network values it.
    :param symmetry_augmentation: show each replayed transition under a random one of the
        board's eight symmetries (:mod:`sb3_snake.q_learning.symmetry`), or of the two an egocentric
        board keeps (itself and its mirror image); needs square observations.
    :param early_steps: for this many env steps (all envs together), train
        ``early_update_fraction`` of the scheduled gradient steps: a replay ratio for the first
        minutes of a run. Early on the replay buffer is small and the policy changes fast, so
        fresh play is worth more than replaying the same few games; later, replaying more of a
        full buffer learns more per game (0: no early phase).
    :param early_update_fraction: the fraction of ``gradient_steps`` trained before
        ``early_steps``, kept exact over calls (0.5 with one gradient step per update trains on
        every other update).
    :param food_shaping: scale of potential-based reward shaping towards the food
        (:mod:`sb3_snake.dqn.targets`; 0: off): the TD targets gain ``scale * (discount *
        phi(s') - phi(s))``, which leaves the optimal policy as it is. The env's own rewards,
        and so episode returns, scores and the replay buffer, are unchanged.
    :param learning_rate_half_life: after ``early_steps``, the learning rate (SB3's, from its
        schedule) halves every this many env steps (all envs together; 0: it does not), in
        eighths of a half-life (:func:`~sb3_snake.common.schedules.half_life_factor`). SB3's own schedules follow the
        progress towards ``total_timesteps``, which a run that stops by episodes or by the clock
        does not know; this follows the env steps taken.
    :param safe_exploration: draw exploration's random moves among the moves that do not die at
        once (:mod:`sb3_snake.envs.action_masks`, read from the observations; any move where
        none is safe), so that exploring games live on and fill the replay buffer with long
        snakes; greedy moves are the network's as ever. Needs Snake boards.
    :param fatal_move_targets: also fit, in every batch, the Q-values of the moves that die at
        once to their known value (:func:`~sb3_snake.q_learning.targets.fatal_move_loss`).
    :param stall_as_death: store a game the env truncates (the stall limit) as lost: a death's
        reward, no bootstrap (:func:`~sb3_snake.q_learning.targets.stall_as_death`; scores keep
        the rules' rewards).
    :param averaging_half_life: greedy play uses an exponential moving average of the trained
        weights whose past halves every this many env steps (:mod:`sb3_snake.q_learning.averaging`;
        0: the trained weights). PQN's rules, shared; each needs Snake boards and is off here: in
        SnakeDQN's shorter runs the average, near its random start, played far worse (docs/benchmarks.md).
    :param kwargs: any other ``DQN`` argument (``n_steps`` gives n-step returns; a dueling
        head is ``policy_kwargs={"dueling": True}``).

    The replay buffer is :class:`~sb3_snake.dqn.replay.DeviceReplayBuffer` on CUDA (sampled on the
    GPU) and SB3's own on the CPU, unless ``replay_buffer_class`` is given.

    After construction, ``model.active_optimizations`` says what is really active and why
    anything requested is not (the compile decision's reason says what is compiled), and
    ``model.step_choice`` runs the gradient steps (:class:`~sb3_snake.update.steps.StepChoice`).
    Compilation is not saved; :meth:`load` applies the optimizations it is given again.
    """

    policy_aliases = POLICY_ALIASES
    #: The learner's name in a model file's description (:mod:`sb3_snake.q_learning.save_format`).
    description_name = "SnakeDQN"

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: Any,
        optimizations: OptimizationSettings | None = None,
        exploration_steps: int | None = None,
        double_dqn: bool = False,
        symmetry_augmentation: bool = False,
        early_steps: int = 0,
        early_update_fraction: float = 1.0,
        food_shaping: float = 0.0,
        learning_rate_half_life: int = 0,
        safe_exploration: bool = False,
        fatal_move_targets: bool = False,
        stall_as_death: bool = False,
        averaging_half_life: int = 0,
        **kwargs: Any,
    ):
        self.exploration_steps = exploration_steps
        self.safe_exploration = safe_exploration
        self.fatal_move_targets, self.stall_as_death = fatal_move_targets, stall_as_death
        self.averaging_half_life, self._averaged_at = averaging_half_life, 0
        if averaging_half_life:  # the policy keeps the averaged network, and a saved model says so
            kwargs["policy_kwargs"] = {**(kwargs.get("policy_kwargs") or {}), "averaged": True}
        self.learning_rate_half_life = learning_rate_half_life
        self.early_steps = early_steps
        self.early_update_fraction = early_update_fraction
        self.food_shaping = food_shaping
        self._early_credit = 0.0
        #: Asked between chunks of :data:`UPDATE_CHUNK` gradient steps of one update: True ends
        #: the update early. The training run sets it to its time limit and stop request, so an
        #: update of many gradient steps cannot outlast either (None: never asked).
        self.update_interrupt: Callable[[], bool] | None = None
        self.double_dqn = double_dqn
        self.symmetry_augmentation = symmetry_augmentation
        self._augmentation: SymmetryAugmentation | None = None
        self.step_choice: StepChoice | None = None
        self.optimizations = optimizations if optimizations is not None else OptimizationSettings.unmeasured()
        kwargs.setdefault("batch_size", DEFAULT_BATCH_SIZE)
        self.active_optimizations: ActiveOptimizations | None = None
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        if self.food_shaping and self._vec_normalize_env is not None:
            raise UsageError("food_shaping needs the env's own observations and rewards; remove VecNormalize")
        if self.replay_buffer_class is None and use_device_replay_buffer(self.device.type)[0]:
            self.replay_buffer_class = DeviceReplayBuffer
            self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "n_steps": self.n_steps, "gamma": self.gamma}
        with warnings.catch_warnings():
            # SB3 warns that n_steps is ignored with a custom buffer class; ours takes it above.
            warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored because a custom")
            super()._setup_model()
        for name in ("safe_exploration", "fatal_move_targets", "stall_as_death"):
            if getattr(self, name) and not is_snake_board(self.observation_space, self.action_space):
                raise UsageError(
                    f"{name} reads the moves that do not die from Snake boards, and this env's "
                    f"observations {self.observation_space} are not; turn {name} off"
                )
        self.active_optimizations = self._apply_optimizations(self.optimizations)
        self._setup_augmentation()
        self.step_choice = StepChoice(DQNUpdate(self))

    def _apply_optimizations(self, settings: OptimizationSettings) -> ActiveOptimizations:
        """What is really active with ``settings`` for this model (decided by
        :meth:`ActiveOptimizations.decide`), with both Q-networks given its forward context.
        Compiling is the model's own (:class:`~sb3_snake.update.compile.Compile`): the
        compile decision says only whether it is asked for and available. The thread count is
        decided (``active.num_threads``) but not set: that is the entry point's
        (:func:`~sb3_snake.acceleration.optimizations.torch_threads`)."""
        if settings.auto_fields:
            logger.warning(
                "%s: auto, but not measured for this model, so the values that run everywhere are used "
                "(fp32, PyTorch's attention kernel, no compile); "
                "sb3_snake.autotune.resolve_auto measures them, as sb3-snake train does",
                ", ".join(OptimizationSettings.env_key(name) for name in settings.auto_fields),
            )
        device_buffer = isinstance(self.replay_buffer, DeviceReplayBuffer)
        active = ActiveOptimizations.decide(settings, self.device, device_buffer)
        for network in q_networks(self.policy):
            network.forward_context = active.forward_context
        for decision, field in ((active.bf16, "use_bf16"), (active.flash, "use_flash_attention")):
            # An auto setting that fell back to the default asked for "where it runs", not for it.
            asked = not active.settings.source(field).startswith("auto")
            if decision.requested and not decision.active and asked:
                logger.warning("optimization requested but not active: %s", decision.reason)
        return active

    def _setup_augmentation(self) -> None:
        self._augmentation = None
        if self.symmetry_augmentation:
            *_, height, width = self.observation_space.shape
            if height != width:
                raise UsageError(
                    f"symmetry augmentation needs a square board, got observations of {height}x{width}; "
                    "turn symmetry_augmentation off"
                )
            egocentric = self.action_space.n == 3  # three turns: boards seen from the snake
            self._augmentation = SymmetryAugmentation(width, self.device, egocentric=egocentric)

    def _store_transition(
        self,
        replay_buffer: Any,
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """SB3's, with ``stall_as_death``: a game the env truncated is stored as lost
        (:func:`~sb3_snake.q_learning.targets.stall_as_death`); the env's infos stay as they are."""
        cut = [done and info.get("TimeLimit.truncated", False) for done, info in zip(dones, infos, strict=True)]
        if self.stall_as_death and any(cut):
            truncated = torch.as_tensor(np.array(cut))
            reward = targets.stall_as_death(torch.as_tensor(reward), torch.as_tensor(dones), truncated)[0].numpy()
            infos = [
                {**info, "TimeLimit.truncated": False} if stalled else info
                for info, stalled in zip(infos, cut, strict=True)
            ]
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)

    def random_actions(self, observations: torch.Tensor) -> torch.Tensor:
        """Exploration's random move for each game of ``observations``: uniform, or among the
        moves that do not die at once with ``safe_exploration``
        (:func:`~sb3_snake.q_learning.exploration.random_moves`)."""
        return random_moves(observations, int(self.action_space.n), self.safe_exploration)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's, with exploration's random moves from :meth:`random_actions` when
        ``safe_exploration`` is on (SB3's own, uniform, otherwise)."""
        if not self.safe_exploration:
            return super().predict(observation, state, episode_start, deterministic)
        if deterministic or np.random.rand() >= self.exploration_rate:
            return self.policy.predict(observation, state, episode_start, deterministic)
        observations = np.asarray(observation)
        single = not self.policy.is_vectorized_observation(observations)
        actions = self.random_actions(torch.as_tensor(observations[None] if single else observations)).numpy()
        return (actions[0] if single else actions), state

    @property
    def compile_state(self) -> Compile:
        """What ``torch.compile`` compiles for this model, when, and how it went."""
        return self.step_choice.compile

    def _on_step(self) -> None:
        super()._on_step()
        if self.exploration_steps:
            start, end = self.exploration_initial_eps, self.exploration_final_eps
            self.exploration_rate = linear_epsilon(self.num_timesteps, start, end, self.exploration_steps)
            self.logger.record("rollout/exploration_rate", self.exploration_rate)

    def _update_learning_rate(self, optimizers: list[torch.optim.Optimizer] | torch.optim.Optimizer) -> None:
        """SB3's rate from its schedule, times :func:`~sb3_snake.common.schedules.half_life_factor`
        of the env steps since ``early_steps``."""
        super()._update_learning_rate(optimizers)
        factor = half_life_factor(self.num_timesteps - self.early_steps, self.learning_rate_half_life)
        rate = scale_learning_rate(optimizers, factor)
        if rate is not None:
            self.logger.record("train/learning_rate", rate)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's DQN update loop around one update object (``self.step_choice``: eager, compiled or
        captured), with no host sync per step.

        SB3 calls ``loss.item()`` after every gradient step, which waits for the device each
        time; here the losses stay on the device and are read once per call. That one read
        also checks them: a NaN or infinite loss raises :class:`TrainingDiverged`.
        Before ``early_steps`` it trains ``early_update_fraction`` of ``gradient_steps``. An update
        longer than :data:`UPDATE_CHUNK` steps runs in chunks and ends early when
        ``update_interrupt`` says so (a time limit, a stop request).
        """
        if self.num_timesteps < self.early_steps:
            self._early_credit += gradient_steps * self.early_update_fraction
            gradient_steps = int(self._early_credit)
            self._early_credit -= gradient_steps
            if not gradient_steps:
                return
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        done = min(gradient_steps, UPDATE_CHUNK)
        mean_loss = self.step_choice.run(done, batch_size)
        if done < gradient_steps:  # a long update: in chunks, asking update_interrupt between them
            total = mean_loss * done
            while done < gradient_steps and not (self.update_interrupt and self.update_interrupt()):
                steps = min(UPDATE_CHUNK, gradient_steps - done)
                total = total + self.step_choice.run(steps, batch_size) * steps
                done += steps
            mean_loss = total / done
        self._n_updates += done
        if self.averaging_half_life:  # the averaged network follows the weights just trained
            self.policy.update_average(averaging_rate(self.num_timesteps - self._averaged_at, self.averaging_half_life))
            self._averaged_at = self.num_timesteps
        loss = mean_loss.item()
        TrainingDiverged.check(loss, self._n_updates, self.learning_rate)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)

    def learn(self, *args: Any, **kwargs: Any) -> SnakeDQN:
        """SB3's ``learn``; when it ends, however it ends, a compile child still running is stopped
        and reaped (:meth:`~sb3_snake.update.steps.StepChoice.close`)."""
        try:
            return super().learn(*args, **kwargs)
        finally:
            if self.step_choice is not None:
                self.step_choice.close()

    def optimizations_in_effect(self) -> ActiveOptimizations:
        """``active_optimizations`` as they stand now: a compile still waiting for its gradient
        step is reported not active, with the step it waits for (a run's summary uses this)."""
        return replace(self.active_optimizations, compile=self.compile_state.in_effect(self._n_updates))

    def _excluded_save_params(self) -> list[str]:
        # _last_obs may be a device tensor (the tensor rollout loop); a loaded model resets its env anyway.
        excluded = [
            "optimizations",
            "active_optimizations",
            "step_choice",
            "_augmentation",
            "_last_obs",
            "update_interrupt",
        ]
        return [*super()._excluded_save_params(), *excluded, "_last_original_obs"]

    def set_hyperparameters(self, **values: Any) -> None:
        """Change hyperparameters of a built (or loaded) model, as if it had been made with them.

        Takes the names of :data:`~sb3_snake.q_learning.save_schema.HYPERPARAMETERS` (except ``n_steps``,
        which fixes the replay buffer's kind), ``train_freq`` and ``verbose``. The learning-rate and
        exploration schedules are rebuilt; a new ``buffer_size`` gives a new, empty replay buffer. A
        captured update (:class:`~sb3_snake.dqn.gradient_step.CapturedSteps`) is dropped and captured again
        with the new values.
        """
        settable = [name for name in (*HYPERPARAMETERS, "train_freq", "verbose") if name != "n_steps"]
        unknown = sorted(set(values) - set(settable))
        if unknown == ["n_steps"]:
            raise UsageError("cannot set n_steps on a built model: it fixes the replay buffer's kind; build a new one")
        if unknown:
            raise UsageError(f"cannot set {', '.join(unknown)} on a built model; {did_you_mean(unknown[0], settable)}")
        if "averaging_half_life" in values and bool(values["averaging_half_life"]) != self.policy.averaged:
            built, keep = ("with", "above") if self.policy.averaged else ("without", "at")
            raise UsageError(
                f"averaging_half_life cannot turn the averaged network on or off on a built model (built {built} "
                f"one, averaging_half_life {self.averaging_half_life}); keep it {keep} 0, or build a new model"
            )
        rebuild_buffer = "buffer_size" in values and values["buffer_size"] != self.buffer_size
        for name, value in values.items():
            setattr(self, name, value)
        self.step_choice.reload()  # a graph baked in gamma, clipping, Double DQN and augmentation
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
        """SB3's; loading gives the optimizer new state tensors, which a captured update would
        not see (it is dropped) and a compiled one reads again."""
        if self.step_choice is not None:
            self.step_choice.reload()
        super().set_parameters(*args, **kwargs)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters this model trains with now, as plain JSON values."""
        values = {name: getattr(self, name) for name in HYPERPARAMETERS}
        if not isinstance(values["learning_rate"], (int, float)):
            values["learning_rate"] = float(self.lr_schedule(self._current_progress_remaining))
        return {**values, "train_freq": self.train_freq.frequency, "train_freq_unit": self.train_freq.unit.value}

    def metadata(self) -> dict[str, Any]:
        """This model in plain JSON (:func:`sb3_snake.q_learning.save_format.metadata`)."""
        return save_format.metadata(self)

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """SB3's ``save``, plus the plain-JSON description
        (:func:`~sb3_snake.q_learning.save_format.write_metadata`)."""
        super().save(path, exclude=exclude, include=include)
        save_format.write_metadata(self, path)

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
