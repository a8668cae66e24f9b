"""``PQN``: Q-learning over many parallel games, without a replay buffer or a target network
(Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning").

Each iteration plays ``n_steps`` moves of every game epsilon-greedily, turns them into Q(lambda)
targets (:mod:`sb3_snake.pqn.returns`) with the rollout's own Q-values, fits them for ``n_epochs``
passes of ``n_minibatches`` minibatches, and throws the samples away; LayerNorm
(:mod:`sb3_snake.pqn.policies`) stands in for the target network, and the greedy policy plays an
average of the trained weights. ``PQN("MlpPolicy", env)`` takes
any ``VecEnv`` with discrete actions (on a :class:`~sb3_snake.envs.BatchedSnakeVecEnv` the rollout
stays on tensors); ``learn``, ``predict``, ``save``, ``load`` and callbacks are SB3's.
Design notes: docs/design-notes.md, "sb3_snake/pqn/pqn.py".
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.utils import safe_mean

from sb3_snake.acceleration.optimizations import ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import TrainingDiverged, UsageError
from sb3_snake.common.schedules import averaging_rate, half_life_factor, scale_learning_rate
from sb3_snake.envs.action_masks import is_snake_board
from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv
from sb3_snake.networks.attention import calls_sdpa
from sb3_snake.pqn.checks import argument_problem
from sb3_snake.pqn.gradient_step import PQNUpdate, Samples
from sb3_snake.pqn.policies import PQN_POLICY_ALIASES, PQNPolicy
from sb3_snake.pqn.population import POPULATION_ARGUMENTS, Population
from sb3_snake.pqn.rollout import collect_rollout
from sb3_snake.q_learning import save_format
from sb3_snake.q_learning.averaging import q_networks
from sb3_snake.q_learning.exploration import epsilon_greedy, linear_epsilon, random_moves
from sb3_snake.q_learning.save_schema import PQN_HYPERPARAMETERS
from sb3_snake.q_learning.symmetry import SymmetryAugmentation
from sb3_snake.update.compile import Compile
from sb3_snake.update.steps import StepChoice

logger = logging.getLogger(__name__)

SelfPQN = TypeVar("SelfPQN", bound="PQN")
#: Gradient steps one call of the update runs before asking ``update_interrupt`` whether to go on:
#: a handful, so that a stop is honoured within a second of the longest update, and a multiple of
#: the most steps a compiled call holds, so that whole calls run compiled.
UPDATE_CHUNK = 8
#: The options that read the env's own Snake boards and rules (refused elsewhere, and under VecNormalize).
READS_SNAKE_RULES = ("food_shaping", "safe_exploration", "fatal_move_targets", "stall_as_death")


class PQN(BaseAlgorithm):
    """Parallelised Q-Network: epsilon-greedy rollouts of many games, Q(lambda) targets, no
    replay buffer, no target network.

    The defaults, measured on 10x10 Snake (docs/benchmarks.md, "PQN, the default learner"), are the paper's MinAtar
    ones: 32 moves of each game per rollout (128 games: 4,096 samples), two passes of 32
    minibatches of 128 (two gradient samples per env step, in 64 steps), lambda 0.65, lr 5e-4;
    the greedy policy plays weights averaged over a half-life of 100,000 env steps.

    :param policy: ``"MlpPolicy"`` (a LayerNorm MLP of ``[256, 256]`` on the flattened board),
        ``"CnnPolicy"`` (three convolutions, then 256 features with LayerNorm),
        ``"AttentionPolicy"`` (the attention extractor, then one LayerNorm layer) or a class.
    :param env: the environment; PQN is made for a :class:`~sb3_snake.envs.BatchedSnakeVecEnv` of many games.
    :param learning_rate: Adam's step size, or an SB3 schedule of the progress.
    :param n_steps: moves of every game per rollout.
    :param n_epochs: passes over each rollout.
    :param n_minibatches: minibatches per pass, which must divide the rollout; each is
        ``n_steps * n_envs / n_minibatches`` samples (``batch_size``).
    :param gamma: the discount.
    :param q_lambda: lambda of the Q(lambda) targets (0: one-step targets; 1: returns to the
        rollout's end).
    :param exploration_initial_eps: epsilon at the start.
    :param exploration_final_eps: epsilon after ``exploration_steps``.
    :param exploration_steps: env steps (all games together) over which epsilon falls linearly
        (each game draws its own exploration every move); short, as PQN learns only from the
        games it plays (docs/research-log.md, "PQN's exploration").
    :param max_grad_norm: the gradients' norm is clipped to this.
    :param food_shaping: scale of potential-based reward shaping towards the food in the
        targets (:mod:`sb3_snake.q_learning.targets`; 0: off); needs Snake boards.
    :param safe_exploration: draw exploration's random moves among the moves that do not die at
        once (:mod:`sb3_snake.envs.action_masks`); needs Snake boards.
    :param fatal_move_targets: in every minibatch, also fit the Q-values of the moves that die at
        once to their known value (:func:`~sb3_snake.q_learning.targets.fatal_move_values`), which safe
        exploration never plays and the bootstrap's max reads; needs Snake boards.
    :param stall_as_death: a game truncated by the env (on Snake, the stall limit) counts in the
        targets as lost: no bootstrap from its last board, and a death's reward; the env's rewards
        and scores stay the rules'. Needs Snake boards.
    :param symmetry_augmentation: fit each sample under a random symmetry of the board
        (:mod:`sb3_snake.q_learning.symmetry`; egocentric: itself or its mirror image); needs square
        Snake boards.
    :param averaging_half_life: the greedy policy (``predict``, evaluations, the saved model)
        plays an exponential moving average of the trained weights, which halves the weight of
        the past every this many env steps (0: it plays the trained weights); the rollouts act
        with the trained ones (:class:`~sb3_snake.pqn.policies.PQNPolicy`).
    :param learning_rate_half_life: the learning rate (SB3's, from its schedule) halves every
        this many env steps (0: it does not), in eighths of a half-life, as SnakeDQN's does
        (:func:`~sb3_snake.common.schedules.half_life_factor`, without an early phase).
    :param population: learners trained in turn, each on a copy of ``env``'s games (a
        :class:`~sb3_snake.envs.BatchedSnakeVecEnv`), ranked by ``population_games`` greedy games
        every ``population_interval`` env steps of each; the worst take the best one's weights,
        and the best is what plays and is saved (:mod:`sb3_snake.pqn.population`; 1: one learner).
    :param optimizations: the optimization layer's settings (``None``:
        :meth:`OptimizationSettings.unmeasured`, nothing measured or compiled), applied as to
        SnakeDQN: every forward pass, acting and learning, in their context (bf16 autocast, the
        attention kernel); the minibatch step compiled whole in a child process (CPU) or captured
        as a CUDA graph (:mod:`sb3_snake.update`, through ``model.step_choice``). What is really
        active is ``model.active_optimizations``, and what a compile did ``model.compile_state``.
    Every other argument is SB3's ``BaseAlgorithm``'s.
    """

    policy_aliases = PQN_POLICY_ALIASES
    #: The learner's name in a model file's description (:mod:`sb3_snake.q_learning.save_format`).
    description_name = "PQN"
    policy: PQNPolicy

    def __init__(
        self,
        policy: str | type[PQNPolicy],
        env: GymEnv | str | None,
        learning_rate: float | Any = 5e-4,
        n_steps: int = 32,
        n_epochs: int = 2,
        n_minibatches: int = 32,
        gamma: float = 0.99,
        q_lambda: float = 0.65,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.02,
        exploration_steps: int = 100_000,
        max_grad_norm: float = 10.0,
        food_shaping: float = 0.0,
        safe_exploration: bool = False,
        fatal_move_targets: bool = False,
        stall_as_death: bool = False,
        symmetry_augmentation: bool = False,
        averaging_half_life: int = 100_000,
        learning_rate_half_life: int = 0,
        population: int = 1,
        population_interval: int = 100_000,
        population_games: int = 16,
        optimizations: OptimizationSettings | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
    ):
        super().__init__(
            policy,
            env,
            learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            supported_action_spaces=(spaces.Discrete,),
        )
        self.n_steps, self.n_epochs, self.n_minibatches = n_steps, n_epochs, n_minibatches
        self.gamma, self.q_lambda, self.max_grad_norm = gamma, q_lambda, max_grad_norm
        self.exploration_initial_eps, self.exploration_final_eps = exploration_initial_eps, exploration_final_eps
        self.exploration_steps = exploration_steps
        self.exploration_rate = exploration_initial_eps
        self.food_shaping, self.safe_exploration = food_shaping, safe_exploration
        self.fatal_move_targets, self.stall_as_death = fatal_move_targets, stall_as_death
        self.symmetry_augmentation = symmetry_augmentation
        self.averaging_half_life, self.learning_rate_half_life = averaging_half_life, learning_rate_half_life
        self.population, self.population_interval = population, population_interval
        self.population_games = population_games
        self._population: Population | None = None
        self.optimizations = optimizations if optimizations is not None else OptimizationSettings.unmeasured()
        self.active_optimizations: ActiveOptimizations | None = None
        self.step_choice: StepChoice | None = None
        #: Asked between calls of :data:`UPDATE_CHUNK` gradient steps of one update: True ends the
        #: update early. The training run sets it to its time limit and stop request (None: never asked).
        self.update_interrupt: Callable[[], bool] | None = None
        self._augmentation: SymmetryAugmentation | None = None
        self._n_updates = 0
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        problem = argument_problem(self)
        if problem:
            raise UsageError(problem)
        snake_boards = is_snake_board(self.observation_space, self.action_space)
        for name in (*READS_SNAKE_RULES, "symmetry_augmentation"):
            if getattr(self, name) and not snake_boards:
                raise UsageError(f"{name} reads Snake boards, and this env's observations are not; turn {name} off")
        for name in READS_SNAKE_RULES:
            if getattr(self, name) and self._vec_normalize_env is not None:
                raise UsageError(f"{name} needs the env's own observations and rewards; remove VecNormalize")
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(
            self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
        ).to(self.device)
        self.q_net = self.policy.q_net
        self._augmentation = None
        if self.symmetry_augmentation:
            *_, height, width = self.observation_space.shape
            if height != width:
                raise UsageError(f"symmetry_augmentation needs a square board, got {height}x{width}; turn it off")
            egocentric = self.action_space.n == 3
            self._augmentation = SymmetryAugmentation(width, self.device, egocentric=egocentric)
        self.active_optimizations = self._apply_optimizations(self.optimizations)
        self.step_choice = StepChoice(PQNUpdate(self))
        if self.population > 1:
            if not isinstance(self.env, BatchedSnakeVecEnv):
                raise UsageError("population needs a BatchedSnakeVecEnv, whose games each member copies; set it to 1")
            self._population = Population.build(self, self.population, self.population_interval, self.population_games)

    def _apply_optimizations(self, settings: OptimizationSettings) -> ActiveOptimizations:
        """What is really active with ``settings`` for this model (:meth:`ActiveOptimizations.decide`;
        the rollout is on the model's device, as a captured step needs), with the trained and the
        averaged network given its forward context: bf16 autocast and the attention kernel around
        every forward pass, acting and learning alike. The compile is the model's own
        (``step_choice.compile``); the thread count is decided but set by the entry point."""
        if settings.auto_fields:
            logger.warning(
                "%s: auto, but not measured for this model, so the values that run everywhere are used "
                "(fp32, PyTorch's attention kernel, no compile); "
                "sb3_snake.autotune.resolve_auto measures them, as sb3-snake train does",
                ", ".join(OptimizationSettings.env_key(name) for name in settings.auto_fields),
            )
        active = ActiveOptimizations.decide(settings, self.device, device_buffer=True)
        if not calls_sdpa(self.policy):
            active = active.without_attention(save_format.policy_alias(self) or type(self.policy).__name__)
        for network in q_networks(self.policy):
            network.forward_context = active.forward_context
        return active

    # ------------------------------------------------------------------ learning

    def learn(
        self: SelfPQN,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int | None = 10,
        tb_log_name: str = "PQN",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPQN:
        """Roll out, compute the targets, fit them, move the averaged network, until
        ``total_timesteps`` env steps or a callback's ``on_step`` returns False; SB3's logs every
        ``log_interval`` rollouts."""
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        callback.on_training_start(locals(), globals())
        rollouts, population = 0, self._population
        try:
            while self.num_timesteps < total_timesteps:
                for member in range(self.population):  # one learner, or each of a population in turn
                    with self._showing(member):
                        rollout = self.collect_rollout(callback)
                        if rollout is None:
                            break
                        rollouts += 1
                        self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                        if log_interval is not None and rollouts % log_interval == 0:
                            self.dump_logs()
                        try:
                            self.train(rollout)
                        except TrainingDiverged:  # a member that is not the leader takes the leader's weights
                            if population is None or not population.recover(self, member, self.member_timesteps):
                                raise
                        self.policy.update_average(averaging_rate(self.n_steps * self.n_envs, self.averaging_half_life))
                    if self.num_timesteps >= total_timesteps:
                        break
                if rollout is None:
                    break
                if population is not None and population.due(self.member_timesteps):
                    population.rank(self, self.member_timesteps)
            if population is not None and population.stale(self.member_timesteps):  # the last leader is the best now
                population.rank(self, self.member_timesteps)
        finally:  # however it ends: a compile child still running is stopped and reaped
            for step_choice in self._step_choices():
                step_choice.close()
        callback.on_training_end()
        return self

    @property
    def member_timesteps(self) -> int:
        """Env steps of the learner playing now: all of them, or a population member's share
        (its exploration and learning-rate schedules run on its own games)."""
        return self.num_timesteps if self._population is None else self._population.own_steps(self.num_timesteps)

    def _showing(self, member: int) -> Any:
        """The model shows ``member`` of its population inside, then its leader (nothing without one)."""
        return nullcontext() if self._population is None else self._population.playing(self, member)

    def _step_choices(self) -> list[StepChoice]:
        return [self.step_choice] if self._population is None else self._population.step_choices

    def collect_rollout(self, callback: BaseCallback) -> Samples | None:
        """``n_steps`` moves of every game, epsilon-greedy, and their Q(lambda) targets
        (:func:`~sb3_snake.pqn.rollout.collect_rollout`); None when a callback stopped training."""
        return collect_rollout(self, callback)

    def train(self, rollout: Samples) -> None:
        """``n_epochs`` passes of ``n_minibatches`` shuffled minibatches of ``rollout``, each a
        gradient step (:mod:`sb3_snake.pqn.gradient_step`) run by ``step_choice``: eagerly,
        compiled or captured. Between calls of at most :data:`UPDATE_CHUNK` steps it asks
        ``update_interrupt`` whether to go on (a time limit, a stop request), so that a long
        update ends within a second of one; ``_n_updates`` counts the steps that ran."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses, steps, interrupted = [], 0, False
        batch_size, update = self.batch_size, self.step_choice.update
        for _ in range(self.n_epochs):
            update.start_pass(rollout, torch.randperm(len(rollout.returns), device=self.device).view(-1, batch_size))
            for start in range(0, self.n_minibatches, UPDATE_CHUNK):
                if steps and self.update_interrupt is not None and self.update_interrupt():
                    interrupted = True
                    break
                count = min(UPDATE_CHUNK, self.n_minibatches - start)
                losses.append(self.step_choice.run(count, batch_size) * count)
                steps += count
            if interrupted:
                break
        self._n_updates += steps
        loss = (torch.stack(losses).sum() / steps).item()  # the one host read of an iteration
        TrainingDiverged.check(loss, self._n_updates, self.learning_rate)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)

    # ------------------------------------------------------------------ acting

    def epsilon(self, env_steps: int) -> float:
        """Exploration's probability after ``env_steps``
        (:func:`~sb3_snake.q_learning.exploration.linear_epsilon` over ``exploration_steps``)."""
        initial, final = self.exploration_initial_eps, self.exploration_final_eps
        return linear_epsilon(env_steps, initial, final, self.exploration_steps)

    def explore(
        self, observations: torch.Tensor, q_values: torch.Tensor, safe_moves: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each game's move: with probability ``exploration_rate`` a random one (among the moves
        that do not die at once, with ``safe_exploration``: ``safe_moves``, the boards'
        :func:`~sb3_snake.envs.action_masks.action_masks` where the caller has them), else the greedy one."""
        random = random_moves(observations, int(self.action_space.n), self.safe_exploration, safe_moves)
        return epsilon_greedy(q_values, random, self.exploration_rate)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """As SB3's DQN: the greedy move, or, unless ``deterministic``, a random one with
        probability ``exploration_rate`` (one draw for the whole batch, as SB3 draws)."""
        if deterministic or np.random.rand() >= self.exploration_rate:
            leader = self.policy if self._population is None else self._population.leading_policy
            return leader.predict(observation, state, episode_start, deterministic)
        if self.policy.is_vectorized_observation(observation):
            count = observation.shape[0]  # type: ignore[union-attr]
            return np.array([self.action_space.sample() for _ in range(count)]), state
        return np.array(self.action_space.sample()), state

    # ------------------------------------------------------------------ SB3's hooks

    def dump_logs(self) -> None:
        """SB3's rollout and time metrics, as its on-policy algorithms write them."""
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / elapsed)
        if len(self.ep_info_buffer) > 0:
            self.logger.record("rollout/ep_rew_mean", safe_mean([info["r"] for info in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([info["l"] for info in self.ep_info_buffer]))
        self.logger.record("rollout/exploration_rate", self.exploration_rate)
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(step=self.num_timesteps)

    def _update_learning_rate(self, optimizers: list[torch.optim.Optimizer] | torch.optim.Optimizer) -> None:
        """SB3's rate, times ``half_life_factor`` of the env steps (SnakeDQN's rule, no early phase)."""
        super()._update_learning_rate(optimizers)
        rate = scale_learning_rate(optimizers, half_life_factor(self.member_timesteps, self.learning_rate_half_life))
        if rate is not None:
            self.logger.record("train/learning_rate", rate)

    @property
    def batch_size(self) -> int:
        """Samples per gradient step: a rollout (``n_steps * n_envs``) over ``n_minibatches``,
        which divides it."""
        return self.n_steps * self.n_envs // self.n_minibatches

    @property
    def compile_state(self) -> Compile:
        """What ``torch.compile`` compiles for this model, when, and how it went (a population's:
        member 0's, which every member runs)."""
        return self._step_choices()[0].compile

    def optimizations_in_effect(self) -> ActiveOptimizations:
        """``active_optimizations`` as they stand now: a compile still waiting for its gradient
        step is reported not active, with the step it waits for (a run's summary uses this)."""
        return replace(self.active_optimizations, compile=self.compile_state.in_effect(self._n_updates))

    def set_parameters(self, *args: Any, **kwargs: Any) -> None:
        """SB3's; loading gives the optimizer new state tensors, which a captured update would
        not see (it is dropped) and a compiled one reads again."""
        if self.step_choice is not None:
            self.step_choice.reload()
        super().set_parameters(*args, **kwargs)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters this model trains with now, as plain JSON values."""
        values = {name: getattr(self, name) for name in PQN_HYPERPARAMETERS}
        if not isinstance(values["learning_rate"], (int, float)):
            values["learning_rate"] = float(self.lr_schedule(self._current_progress_remaining))
        return values

    def metadata(self) -> dict[str, Any]:
        """This model in plain JSON (:func:`sb3_snake.q_learning.save_format.metadata`)."""
        return save_format.metadata(self)

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """SB3's ``save``, plus the plain-JSON description that ``sb3_snake.load_model`` reads
        without unpickling (:func:`~sb3_snake.q_learning.save_format.write_metadata`)."""
        with nullcontext() if self._population is None else self._population.leading(self):
            super().save(path, exclude=exclude, include=include)
            save_format.write_metadata(self, path)

    def _excluded_save_params(self) -> list[str]:
        excluded = ["q_net", "_augmentation", "optimizations", "active_optimizations", "step_choice"]
        # a saved PQN is one learner, its population's leader
        excluded += ["update_interrupt", "_population", *POPULATION_ARGUMENTS]
        return [*super()._excluded_save_params(), *excluded]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []
