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

import sys
import time
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.utils import safe_mean
from torch.nn import functional as F

from sb3_snake.acceleration.optimizations import ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import TrainingDiverged, UsageError
from sb3_snake.common.schedules import averaging_rate, half_life_factor, scale_learning_rate
from sb3_snake.dqn import save_format
from sb3_snake.dqn.save_schema import PQN_HYPERPARAMETERS
from sb3_snake.dqn.symmetry import SymmetryAugmentation
from sb3_snake.dqn.targets import fatal_move_values, shaping_rewards
from sb3_snake.envs.action_masks import action_masks, is_snake_board, random_safe_actions
from sb3_snake.envs.rules import DEATH_REWARD
from sb3_snake.pqn.policies import PQN_POLICY_ALIASES, PQNPolicy
from sb3_snake.pqn.returns import lambda_returns
from sb3_snake.pqn.transitions import step_games

SelfPQN = TypeVar("SelfPQN", bound="PQN")
#: The options that read the env's own Snake boards and rules (refused elsewhere, and under VecNormalize).
READS_SNAKE_RULES = ("food_shaping", "safe_exploration", "fatal_move_targets", "stall_as_death")


class Rollout(NamedTuple):
    """What one iteration learns from, flattened over steps and games; with ``fatal_move_targets``,
    also which moves of each board die at once (``(N, A)`` bool) and their known value (``(N,)``)."""

    observations: torch.Tensor
    actions: torch.Tensor
    returns: torch.Tensor
    fatal_moves: torch.Tensor | None = None
    fatal_values: torch.Tensor | None = None


class PQN(BaseAlgorithm):
    """Parallelised Q-Network: epsilon-greedy rollouts of many games, Q(lambda) targets, no
    replay buffer, no target network.

    The defaults, measured on 10x10 Snake (docs/benchmarks.md, "PQN"), are the paper's MinAtar
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
    :param n_minibatches: minibatches per pass; each is ``n_steps * n_envs / n_minibatches`` samples.
    :param gamma: the discount.
    :param q_lambda: lambda of the Q(lambda) targets (0: one-step targets; 1: returns to the
        rollout's end).
    :param exploration_initial_eps: epsilon at the start.
    :param exploration_final_eps: epsilon after ``exploration_steps``.
    :param exploration_steps: env steps (all games together) over which epsilon falls linearly
        (each game draws its own exploration every move); short, as PQN learns only from the
        games it plays (docs/benchmarks.md, "PQN's exploration").
    :param max_grad_norm: the gradients' norm is clipped to this.
    :param food_shaping: scale of potential-based reward shaping towards the food in the
        targets (:mod:`sb3_snake.dqn.targets`; 0: off); needs Snake boards.
    :param safe_exploration: draw exploration's random moves among the moves that do not die at
        once (:mod:`sb3_snake.envs.action_masks`); needs Snake boards.
    :param fatal_move_targets: in every minibatch, also fit the Q-values of the moves that die at
        once to their known value (:func:`~sb3_snake.dqn.targets.fatal_move_values`), which safe
        exploration never plays and the bootstrap's max reads; needs Snake boards.
    :param stall_as_death: a game truncated by the env (on Snake, the stall limit) counts in the
        targets as lost: no bootstrap from its last board, and a death's reward; the env's rewards
        and scores stay the rules'. Needs Snake boards.
    :param symmetry_augmentation: fit each sample under a random symmetry of the board
        (:mod:`sb3_snake.dqn.symmetry`; egocentric: itself or its mirror image); needs square
        Snake boards.
    :param averaging_half_life: the greedy policy (``predict``, evaluations, the saved model)
        plays an exponential moving average of the trained weights, which halves the weight of
        the past every this many env steps (0: it plays the trained weights); the rollouts act
        with the trained ones (:class:`~sb3_snake.pqn.policies.PQNPolicy`).
    :param learning_rate_half_life: the learning rate (SB3's, from its schedule) halves every
        this many env steps (0: it does not), in eighths of a half-life, as SnakeDQN's does
        (:func:`~sb3_snake.common.schedules.half_life_factor`, without an early phase).
    :param optimizations: the run's settings (``.env``, flags). PQN reads their thread count;
        it trains in float32, eagerly, so bf16, the attention kernel, the compile and CUDA
        graphs are reported requested but not active, with the reason
        (``model.active_optimizations``: :meth:`ActiveOptimizations.decide_eager`), as a run's
        summary and W&B record them.
    Every other argument is SB3's ``BaseAlgorithm``'s.
    """

    policy_aliases = PQN_POLICY_ALIASES
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
        self.optimizations = optimizations if optimizations is not None else OptimizationSettings()
        self.active_optimizations: ActiveOptimizations | None = None
        self._augmentation: SymmetryAugmentation | None = None
        self._n_updates = 0
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        problem = self._first_problem()
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
        self.active_optimizations = ActiveOptimizations.decide_eager(self.optimizations, self.device, "PQN")
        self._augmentation = None
        if self.symmetry_augmentation:
            *_, height, width = self.observation_space.shape
            if height != width:
                raise UsageError(f"symmetry_augmentation needs a square board, got {height}x{width}; turn it off")
            egocentric = self.action_space.n == 3
            self._augmentation = SymmetryAugmentation(width, self.device, egocentric=egocentric)

    def _first_problem(self) -> str:
        samples = self.n_steps * self.n_envs if isinstance(self.n_steps, int) and self.n_envs else None
        checks = [
            (_whole(self.n_steps, 1), f"n_steps must be a positive integer, got {self.n_steps!r}"),
            (_whole(self.n_epochs, 1), f"n_epochs must be a positive integer, got {self.n_epochs!r}"),
            (
                _whole(self.n_minibatches, 1) and (samples is None or self.n_minibatches <= samples),
                f"n_minibatches must be from 1 to the rollout's {samples} samples (n_steps * n_envs), "
                f"got {self.n_minibatches!r}",
            ),
            (0 <= self.gamma <= 1, f"gamma must be from 0 to 1, got {self.gamma}"),
            (0 <= self.q_lambda <= 1, f"q_lambda must be from 0 to 1, got {self.q_lambda}"),
            (
                0 <= self.exploration_final_eps <= 1 and 0 <= self.exploration_initial_eps <= 1,
                "exploration_initial_eps and exploration_final_eps must be from 0 to 1, got "
                f"{self.exploration_initial_eps} and {self.exploration_final_eps}",
            ),
            (_whole(self.exploration_steps, 0), f"exploration_steps must be 0 or more, got {self.exploration_steps!r}"),
            (self.max_grad_norm > 0, f"max_grad_norm must be positive, got {self.max_grad_norm}"),
            *(
                (_whole(getattr(self, name), 0), f"{name} must be 0 or more env steps, got {getattr(self, name)!r}")
                for name in ("averaging_half_life", "learning_rate_half_life")
            ),
        ]
        return next((message for ok, message in checks if not ok), "")

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
        iteration = 0
        while self.num_timesteps < total_timesteps:
            rollout = self.collect_rollout(callback)
            if rollout is None:
                break
            iteration += 1
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
            if log_interval is not None and iteration % log_interval == 0:
                self.dump_logs()
            self.train(rollout)
            self.policy.update_average(averaging_rate(self.n_steps * self.n_envs, self.averaging_half_life))
        callback.on_training_end()
        return self

    def collect_rollout(self, callback: BaseCallback) -> Rollout | None:
        """``n_steps`` moves of every game, epsilon-greedy, and their Q(lambda) targets; None
        when a callback stopped training. The Q-values that choose each move also bootstrap the
        move before it: one forward pass per move (and one for the games that just ended)."""
        assert self.env is not None
        self.policy.set_training_mode(False)
        callback.on_rollout_start()
        obs = torch.as_tensor(self._last_obs, device=self.device)
        observations, actions, rewards, bootstraps, cuts, fatal_moves = [], [], [], [], [], []
        reads_moves, egocentric = self.safe_exploration or self.fatal_move_targets, self.action_space.n == 3
        with torch.no_grad():
            q_values = self.q_net(obs)
            for _ in range(self.n_steps):
                self.exploration_rate = self.epsilon(self.num_timesteps)
                safe = action_masks(obs, egocentric) if reads_moves else None
                action = self.explore(obs, q_values, safe)
                step = step_games(self.env, action, self.device)
                self.num_timesteps += self.env.num_envs
                callback.update_locals({"actions": action, "new_obs": step.observations, **step._asdict()})
                if not callback.on_step():
                    self._last_obs = step.observations
                    return None
                self._update_info_buffer(step.infos, step.dones)
                next_q_values = self.q_net(step.observations)
                best = next_q_values.max(dim=1).values
                boards = step.observations
                if len(step.final_indices):
                    final_best = self.q_net(step.final_observations).max(dim=1).values
                    best = best.index_copy(0, step.final_indices, final_best)
                    boards = boards.index_copy(0, step.final_indices, step.final_observations)
                reward, terminated, cut = step.rewards.float(), step.terminated, step.terminated | step.truncated
                if self.stall_as_death:  # lost: a death's reward, and no bootstrap from the last board
                    reward, terminated = reward + DEATH_REWARD * step.truncated.float(), cut
                if self.food_shaping:
                    reward = reward + shaping_rewards(self.food_shaping, self.gamma, obs, boards, terminated)
                observations.append(obs)
                actions.append(action)
                rewards.append(reward)
                bootstraps.append(best.masked_fill(terminated, 0.0))
                cuts.append(cut)
                if self.fatal_move_targets:
                    fatal_moves.append(~safe)
                obs, q_values = step.observations, next_q_values
        self._last_obs = obs
        callback.on_rollout_end()
        returns = lambda_returns(
            torch.stack(rewards), torch.stack(bootstraps), torch.stack(cuts), self.gamma, self.q_lambda
        )
        played = torch.cat(observations)
        fatal = torch.cat(fatal_moves) if self.fatal_move_targets else None
        fatal_values = fatal_move_values(self.food_shaping, played) if self.fatal_move_targets else None
        return Rollout(played, torch.cat(actions), returns.flatten(), fatal, fatal_values)

    def train(self, rollout: Rollout) -> None:
        """``n_epochs`` passes of ``n_minibatches`` shuffled minibatches of squared TD error
        against the rollout's targets (and, with ``fatal_move_targets``, of every fatal move's
        Q-value against its known value), the gradients clipped to ``max_grad_norm``."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses = []
        for _ in range(self.n_epochs):
            order = torch.randperm(len(rollout.returns), device=self.device)
            for batch in order.chunk(self.n_minibatches):
                observations, actions, moved = rollout.observations[batch], rollout.actions[batch], None
                if self._augmentation is not None:  # the targets are the same under every symmetry
                    symmetries = self._augmentation.draw(len(batch))
                    observations = self._augmentation.transform(observations, symmetries)
                    moved = self._augmentation.actions[symmetries]  # (B, A): where each move went
                    actions = moved.gather(1, actions[:, None]).squeeze(1)
                q_values = self.q_net(observations)
                chosen = q_values.gather(1, actions[:, None]).squeeze(1)
                loss = 0.5 * F.mse_loss(chosen, rollout.returns[batch])
                if rollout.fatal_moves is not None:  # fatal moves to their known value, in the rollout's order
                    q_moves = q_values if moved is None else q_values.gather(1, moved)
                    errors = (q_moves - rollout.fatal_values[batch, None]).square() * rollout.fatal_moves[batch]
                    loss = loss + 0.5 * errors.sum(dim=1).mean()
                self.policy.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                losses.append(loss.detach())
        self._n_updates += self.n_epochs * self.n_minibatches
        loss = torch.stack(losses).mean().item()  # the one host read of an iteration
        TrainingDiverged.check(loss, self._n_updates, self.learning_rate)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)

    # ------------------------------------------------------------------ acting

    def epsilon(self, env_steps: int) -> float:
        """Exploration's probability after ``env_steps``: linear from the initial to the final
        epsilon over ``exploration_steps``, then the final one."""
        if env_steps >= self.exploration_steps:
            return self.exploration_final_eps
        fraction = env_steps / self.exploration_steps
        return self.exploration_initial_eps + fraction * (self.exploration_final_eps - self.exploration_initial_eps)

    def explore(
        self, observations: torch.Tensor, q_values: torch.Tensor, safe_moves: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each game's move: with probability ``exploration_rate`` a random one (among the moves
        that do not die at once, with ``safe_exploration``: ``safe_moves``, the boards'
        :func:`~sb3_snake.envs.action_masks.action_masks` where the caller has them), else the greedy one."""
        greedy = q_values.argmax(dim=1)
        if self.safe_exploration:
            if safe_moves is None:
                safe_moves = action_masks(observations, egocentric=self.action_space.n == 3)
            random = random_safe_actions(safe_moves)
        else:
            random = torch.randint(int(self.action_space.n), greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.exploration_rate
        return torch.where(explore, random.to(greedy.device), greedy)

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
            return self.policy.predict(observation, state, episode_start, deterministic)
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
        rate = scale_learning_rate(optimizers, half_life_factor(self.num_timesteps, self.learning_rate_half_life))
        if rate is not None:
            self.logger.record("train/learning_rate", rate)

    @property
    def batch_size(self) -> int:
        """Samples per gradient step: a rollout (``n_steps * n_envs``) over ``n_minibatches``
        (the last minibatch of a pass may be smaller by the remainder)."""
        return -(-self.n_steps * self.n_envs // self.n_minibatches)

    def optimizations_in_effect(self) -> ActiveOptimizations:
        """What is in effect now: ``active_optimizations`` (nothing PQN runs changes during training)."""
        return self.active_optimizations

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters this model trains with now, as plain JSON values."""
        values = {name: getattr(self, name) for name in PQN_HYPERPARAMETERS}
        if not isinstance(values["learning_rate"], (int, float)):
            values["learning_rate"] = float(self.lr_schedule(self._current_progress_remaining))
        return values

    def metadata(self) -> dict[str, Any]:
        """This model in plain JSON (:func:`sb3_snake.dqn.save_format.metadata`)."""
        return save_format.metadata(self)

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """SB3's ``save``, plus the plain-JSON description that ``sb3_snake.load_model`` reads
        without unpickling (:func:`~sb3_snake.dqn.save_format.write_metadata`)."""
        super().save(path, exclude=exclude, include=include)
        save_format.write_metadata(self, path)

    def _excluded_save_params(self) -> list[str]:
        excluded = ["q_net", "_augmentation", "optimizations", "active_optimizations"]
        return [*super()._excluded_save_params(), *excluded]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low
