"""A population inside one PQN run (``--population K``): K learners on games of their own, in turn,
and at intervals the worst take the best one's weights with a perturbed learning rate and epsilon
(population-based training, Jaderberg et al., 2017), ranked by a greedy evaluation on a few games.

A run's outcome on Snake is a coin flip (a run wins, or stalls a few food short); a population
spends its env steps on several flips at once and lets the members that stall take over a winner's
weights. Each :class:`Member` is one PQN learner: its policy (with its averaged network and Adam), its
games, its step machinery and its own learning rate and epsilon; the model shows one member at a
time (:meth:`Population.playing`), so PQN's rollout and update are the same code for one learner or
K. Between turns the model shows the leader, the best at the last ranking: what ``predict``, the
evaluations and the saved file play. Design notes: docs/design-notes.md, "sb3_snake/pqn/population.py".
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from stable_baselines3.common.utils import FloatSchedule

from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv
from sb3_snake.pqn.gradient_step import PQNUpdate
from sb3_snake.q_learning.averaging import q_networks
from sb3_snake.update.compile import Phase
from sb3_snake.update.steps import CompiledSteps, StepChoice

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm as PQN  # a PQN (which imports this module)

#: PQN's arguments for its population: a saved PQN is one learner (the leader), so its file holds none.
POPULATION_ARGUMENTS = ("population", "population_interval", "population_games")
#: What a member holds that the model shows while the member plays (the model's attributes).
MEMBER_STATE = (
    "policy",
    "q_net",
    "env",
    "_last_obs",
    "step_choice",
    "learning_rate",
    "lr_schedule",
    "exploration_final_eps",
    "_n_updates",
)
#: A perturbed learning rate or epsilon is the best member's times one of these (Ray Tune's PBT).
PERTURBATIONS = (0.8, 1.2)
#: Members' games are seeded this far apart (member 0 plays the model's own env).
MEMBER_SEED_STRIDE = 1_000_003
#: Seeds of the ranking games, apart from the members' games (64 strides at most) and the evaluations'.
RANKING_SEED_OFFSET = 3_000_000_019


@dataclass
class Member:
    """One learner of the population: the model's attributes of :data:`MEMBER_STATE` while it
    does not play, and its score at the last ranking (None before the first)."""

    index: int
    state: dict[str, Any]
    score: float | None = None
    env_steps: int = 0  #: env steps of its own games played, before its turn now

    @property
    def policy(self) -> Any:
        return self.state["policy"]


@dataclass
class Population:
    """The members of one PQN run and their rankings.

    :param members: the learners; member 0 holds the model's own policy and games.
    :param interval: each member's env steps between rankings.
    :param games: greedy games from standard starts that rank the members.
    :param seed: seeds the members' perturbations and the ranking games (None: drawn).
    """

    members: list[Member]
    interval: int
    games: int
    seed: int | None
    shown: int = 0  #: the member whose state the model holds
    leader: int = 0  #: the best member at the last ranking (member 0 before the first)
    rankings: int = 0
    next_ranking: int = 0  #: a member's env steps at which the next ranking is due
    exploits: list[dict[str, Any]] = field(default_factory=list)  #: who took whose weights, when
    turn_start: int = 0  #: the model's env steps when the shown member's turn began
    sharing: set[int] = field(default_factory=set)  #: members given member 0's compiled update

    def __post_init__(self) -> None:
        self.next_ranking = self.interval
        self._random = random.Random(self.seed)

    @classmethod
    def build(cls, model: PQN, size: int, interval: int, games: int) -> Population:
        """``size`` members for ``model``: itself, and ``size - 1`` new policies (drawn from torch's
        seeded generator after the model's own) on copies of its games seeded apart, each with its
        own gradient steps, built while the model shows it (they run member 0's compile)."""
        population = cls([Member(0, shown_state(model))], interval, games, model.seed)
        for index in range(1, size):
            policy = model.policy_class(
                model.observation_space, model.action_space, model.lr_schedule, **model.policy_kwargs
            ).to(model.device)
            for network in q_networks(policy):
                network.forward_context = model.active_optimizations.forward_context
            seed = None if model.seed is None else model.seed + MEMBER_SEED_STRIDE * index
            env = model.env.copy(seed=seed)
            state = shown_state(model) | {"policy": policy, "q_net": policy.q_net, "env": env, "_n_updates": 0}
            state["_last_obs"] = env.reset_tensors()
            population.members.append(Member(index, state))
            population.show(model, index)
            model.step_choice = StepChoice(PQNUpdate(model))
            model.step_choice.compile.phase = Phase.OFF  # the run compiles once, member 0's (share_compiled)
        population.show(model, 0)
        return population

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def leading_policy(self) -> Any:
        """The leader's policy, which plays greedily (``predict``) whichever member plays now."""
        return self.members[self.leader].policy

    # ------------------------------------------------------------------ showing a member

    def show(self, model: PQN, index: int) -> None:
        """Keep the shown member's state, and give the model member ``index``'s."""
        if index == self.shown:
            return
        self.keep(model)
        self.shown = index
        self.restore(model)

    @contextmanager
    def playing(self, model: PQN, index: int) -> Iterator[None]:
        """The model shows member ``index`` inside, and the leader after; the env steps played
        inside count as the member's own."""
        self.show(model, index)
        self.share_compiled(model)
        self.turn_start = model.num_timesteps
        try:
            yield
        finally:
            self.members[index].env_steps += model.num_timesteps - self.turn_start
            self.turn_start = model.num_timesteps
            self.show(model, self.leader)

    @contextmanager
    def leading(self, model: PQN) -> Iterator[None]:
        """The model shows the leader inside (to save it, mid-turn too), then the member it showed."""
        shown = self.shown
        self.show(model, self.leader)
        try:
            yield
        finally:
            self.show(model, shown)

    def share_compiled(self, model: PQN) -> None:
        """The shown member runs member 0's compiled update on its own tensors, once member 0 has
        one: the members' networks and steps have one shape, so the run compiles once (the
        compiled function takes the parameters and Adam's state as arguments)."""
        compiled = self.members[0].state["step_choice"].current if self.shown else None
        choice = model.step_choice
        if isinstance(compiled, CompiledSteps) and self.shown not in self.sharing:
            self.sharing.add(self.shown)  # once: a member whose call fails trains eagerly, as any
            update = choice.update
            choice.current = CompiledSteps(
                update,
                update.graph(),
                compiled.function,
                compiled.steps_per_call,
                compiled.batch_size,
                compiled.threads,
            )

    def own_steps(self, total: int) -> int:
        """The env steps of the shown member's own games, with ``total`` the model's now."""
        return self.members[self.shown].env_steps + total - self.turn_start

    def keep(self, model: PQN) -> None:
        """Store what the model shows as its member's state (before reading members' states)."""
        self.members[self.shown].state = shown_state(model)

    def restore(self, model: PQN) -> None:
        """Give the model the shown member's stored state again (after changing it there)."""
        for name, value in self.members[self.shown].state.items():
            setattr(model, name, value)

    @property
    def step_choices(self) -> list[Any]:
        """Every member's gradient steps, member 0's (which compiles) first: a member's stays the
        one built for it, so its stored state names it whether or not it is shown."""
        return [member.state["step_choice"] for member in self.members]

    # ------------------------------------------------------------------ ranking and exploiting

    def due(self, member_steps: int) -> bool:
        return self.size > 1 and member_steps >= self.next_ranking

    def stale(self, member_steps: int) -> bool:
        """Whether the members trained since the last ranking (at the end of ``learn``)."""
        return self.size > 1 and member_steps > self.next_ranking - self.interval

    def rank(self, model: PQN, member_steps: int) -> None:
        """Score every member greedily on the same games, make the best the leader, and let the
        worst quarter (at least one; only those behind the best) take its weights and Adam state
        with a perturbed learning rate and final epsilon."""
        self.keep(model)
        seed = self._random.randrange(2**31) if self.seed is None else self.seed + RANKING_SEED_OFFSET + self.rankings
        for member in self.members:  # the same games for every member
            member.score = greedy_mean_score(member.policy, model.env.copy(self.games, seed, long_starts=0.0))
        self.rankings += 1
        self.next_ranking = member_steps + self.interval
        order = sorted(self.members, key=lambda member: member.score, reverse=True)
        best = order[0]
        for worst in order[::-1][: max(1, self.size // 4)]:
            if worst.score < best.score:
                self.exploit(best, worst, member_steps)
        self.leader = best.index
        self.restore(model)  # the exploits may have changed the shown member
        self.show(model, self.leader)
        model.logger.record("population/leader", self.leader)
        model.logger.record("population/best_score", best.score)
        model.logger.record("population/exploits", len(self.exploits))

    def recover(self, model: PQN, index: int, member_steps: int) -> bool:
        """Member ``index``, shown, diverged: unless it is the leader (False: the run stops, as a
        single learner's does), it takes the leader's weights and Adam state, at 0.8 times the
        leader's learning rate, and trains on."""
        if index == self.leader:
            return False
        self.keep(model)
        leader, member = self.members[self.leader], self.members[index]
        self.exploit(leader, member, member_steps, factors=(PERTURBATIONS[0],))
        self.exploits[-1]["diverged"] = True
        self.restore(model)
        return True

    def exploit(
        self, best: Member, worst: Member, member_steps: int, factors: tuple[float, ...] = PERTURBATIONS
    ) -> None:
        """``worst`` takes ``best``'s weights (trained and averaged) and Adam's state, copied into
        its own tensors (a compiled or captured step keeps reading them), and ``best``'s learning
        rate and final epsilon, each times one of ``factors``."""
        copy_learner(best.policy, worst.policy)
        learning_rate = best.state["learning_rate"]
        if isinstance(learning_rate, (int, float)):
            learning_rate = learning_rate * self._random.choice(factors)
            worst.state["learning_rate"] = learning_rate
            worst.state["lr_schedule"] = FloatSchedule(learning_rate)
        epsilon = min(1.0, best.state["exploration_final_eps"] * self._random.choice(factors))
        worst.state["exploration_final_eps"] = epsilon
        self.exploits.append(
            {"env_steps_each": member_steps, "from": best.index, "to": worst.index, "learning_rate": learning_rate}
            | {"exploration_final_eps": epsilon, "scores": (best.score, worst.score)}
        )


def shown_state(model: PQN) -> dict[str, Any]:
    """The model's attributes that make up the member it shows (:data:`MEMBER_STATE`)."""
    return {name: getattr(model, name) for name in MEMBER_STATE}


def copy_learner(source: Any, target: Any) -> None:
    """``target`` policy becomes ``source``: its parameters and buffers, and its optimizer's state,
    copied into ``target``'s own tensors where it has them."""
    target.load_state_dict(source.state_dict())  # copies into the existing tensors
    copy_optimizer_state(source.optimizer, target.optimizer)


def copy_optimizer_state(source: torch.optim.Optimizer, target: torch.optim.Optimizer) -> None:
    """Each parameter's state of ``source`` (Adam's step and moments) into ``target``'s state of
    the parameter in the same place, in place where ``target`` has it (its tensors' addresses do
    not change), else as a copy."""
    pairs = zip(source.param_groups, target.param_groups, strict=True)
    for group_source, group_target in pairs:
        for parameter_source, parameter_target in zip(group_source["params"], group_target["params"], strict=True):
            state_source = source.state.get(parameter_source, {})
            state_target = target.state[parameter_target]
            for name, value in state_source.items():
                held = state_target.get(name)
                if isinstance(value, torch.Tensor) and isinstance(held, torch.Tensor) and held.shape == value.shape:
                    held.copy_(value)
                else:
                    state_target[name] = value.clone() if isinstance(value, torch.Tensor) else value


@torch.no_grad()
def greedy_mean_score(policy: Any, env: BatchedSnakeVecEnv) -> float:
    """The mean score of one greedy game of ``policy`` (its averaged network, as ``predict``
    plays) on each of ``env``'s games."""
    observations = env.reset_tensors()
    scores = torch.full((env.num_envs,), -1.0, device=env.device)
    while (scores < 0).any():
        actions = policy._predict(observations.to(policy.device), deterministic=True)
        step = env.step_tensors(actions.to(env.device))
        if len(step.final_indices):
            unscored = scores[step.final_indices] < 0
            indices = step.final_indices[unscored]
            scores[indices] = step.final_scores[unscored].float()
        observations = step.observations
    return float(scores.mean())
