"""``torch.compile`` for one model: what it compiles, when, and how it went, in one object.

:class:`CompileState` holds the compile of a model from its decision to its outcome:

- **whether**: asked for and available (:func:`~sb3_snake.acceleration.optimizations.decide_compile`:
  on a CPU only, :func:`~sb3_snake.acceleration.optimizations.compile_unavailable` says why);
- **what**: the whole gradient step as one graph (:class:`~sb3_snake.dqn.update.graph.UpdateGraph`,
  :func:`decide_compiled_update`), where the update is bound by dispatching its many small
  operators; a model whose update it cannot compile (:func:`unsupported_reason`) is not
  compiled, with that reason;
- **when**: after ``compile_after`` gradient steps trained eagerly (0: at the first update);
- **where**: in a child process (:mod:`sb3_snake.dqn.update.child`), so that a crash of the
  compiler costs the compile, not the run: no trace or lowering happens in the training
  process. With ``background``, training goes on eagerly while the child compiles; without it,
  training waits for the child (the switch then falls at a fixed gradient step, so a seeded
  run repeats);
- **in two stages**, with ``background``: a graph of one gradient step first, the quickest to
  compile (the cold compile's time grows with the steps a graph holds), and once that runs, the
  graph of as many steps as a call makes (:attr:`CompileState.steps_wanted`), which runs faster
  per step; each is adopted as soon as it is loaded. A wider graph that fails leaves the first
  running. Without ``background`` training waits for the wider graph at once;
- **how it went**: compiled (how long the child took, whether the cache had it, how long the
  training process paused to load it), or failed with the reason (training goes on eagerly),
  or stopped with training.

It alone says so in words (:attr:`CompileState.planned`, :meth:`CompileState.in_effect`): the
model's ``active_optimizations``, the run's summary, the capability report and the threads
callback ask it. The networks themselves are never compiled (the child compiles a function of
their tensors), so models save and load the same with and without a compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space

from sb3_snake.acceleration.optimizations import Decision

if TYPE_CHECKING:
    from stable_baselines3 import DQN

#: The compile decision's reason when :class:`~sb3_snake.dqn.update.compiled.CompiledSteps` is what runs.
WHOLE_UPDATE = "the whole update as one graph: forward, backward, clipping and Adam"


def unsupported_reason(model: DQN) -> str:
    """Why ``model``'s update cannot be compiled whole, or ``""`` when it can."""
    optimizer = model.policy.optimizer
    if type(optimizer) is not torch.optim.Adam:
        return f"the whole update is compiled for Adam only, not {type(optimizer).__name__}"
    if len(optimizer.param_groups) != 1:
        return "the whole update is compiled for one parameter group only"
    group = optimizer.param_groups[0]
    if {id(p) for p in group["params"]} != {id(p) for p in model.q_net.parameters()}:
        return "the whole update is compiled for an optimizer of exactly the online network's parameters"
    for option in ("amsgrad", "maximize", "differentiable", "weight_decay"):
        if group.get(option):
            return f"the whole update is not compiled with Adam's {option}"
    space = model.observation_space
    if not isinstance(space, spaces.Box) or (model.policy.normalize_images and is_image_space(space)):
        return "the whole update is compiled for observations that need only float(), not images or dicts"
    return ""


#: A module's hooks, by the attribute that holds them, and how a reason names each kind.
_HOOK_KINDS = {
    "_forward_pre_hooks": "forward pre-hook",
    "_forward_hooks": "forward hook",
    "_backward_pre_hooks": "backward pre-hook",
    "_backward_hooks": "backward hook",
}


def network_hooks(model: DQN) -> list[str]:
    """The hooks registered on the modules of ``model``'s Q-networks, each named with its module
    (``forward hook <lambda> on q_net.q_net.0``): a compiled update runs in code traced in
    another process, which never calls them, so a compile with any of them is declined."""
    found = []
    for network_name, network in (("q_net", model.q_net), ("q_net_target", model.q_net_target)):
        for name, module in network.named_modules():
            for attribute, kind in _HOOK_KINDS.items():
                for hook in getattr(module, attribute, {}).values():
                    where = f"{network_name}.{name}" if name else network_name
                    found.append(f"{kind} {getattr(hook, '__name__', type(hook).__name__)} on {where}")
    return found


def decide_compiled_update(unsupported: str) -> Decision:
    """Whether an active compile can compile the model's whole gradient step: unless the model is
    one it cannot compile (``unsupported``, its reason; nothing is compiled then)."""
    if unsupported:
        return Decision.off(unsupported)
    return Decision.on(WHOLE_UPDATE)


#: The most characters of an error's message a compile failure keeps (a guard's report runs to a few hundred).
FAILURE_CHARACTERS = 2000


def compile_failure(error: BaseException, what: str = "compile failed") -> str:
    """A failed compile as the compile decision's reason, ``what`` first: one line holding the
    whole message (its lines joined, white space folded), so that it says why, not only where."""
    message = " ".join(str(error).split())
    if len(message) > FAILURE_CHARACTERS:
        message = message[: FAILURE_CHARACTERS - 3] + "..."
    return f"{what}: {type(error).__name__}: {message}"


@dataclass
class CompileState:
    """The compile of one model: asked for, what, when, and how it went.

    :param requested: the compile decision before anything was compiled: requested, and
        available on this machine (inactive, with the reason, when not).
    :param whole_update: :func:`decide_compiled_update` for the model: whether its update compiles
        (a compile asked for where it cannot is off, with its reason, from the start).
    :param after: gradient steps trained eagerly before compiling (0: at the first update).
    :param mode: the ``torch.compile`` mode.
    :param background: train on eagerly while the child compiles (else wait for it).
    """

    requested: Decision
    whole_update: Decision
    after: int = 0
    mode: str = "default"
    background: bool = False
    compiled: bool = False  #: the compiled update runs
    failure: str = ""  #: why compiling failed, if it did
    steps_per_call: int = 0  #: gradient steps per call of the compiled update in effect (0: none)
    steps_wanted: int = 0  #: the steps per call the compile aims at, fixed by the call it first starts at
    compiling_since: int | None = None  #: the gradient step the compile child started at, while it runs
    child_pid: int | None = None  #: the compile child's process id, while it runs
    stopped_since: int | None = None  #: the same, for a compile child stopped because training stopped
    outcome: str = ""  #: how the compile went, once it is in effect (where, how long, the pause to adopt it)

    @classmethod
    def for_model(
        cls, model: DQN, requested: Decision, compile_after: int, mode: str, background: bool = False
    ) -> CompileState:
        """The state of a model just built: a compile deferred by ``compile_after`` gradient steps
        counts from the model's own (a loaded model defers what is left, or compiles at its first update)."""
        whole = decide_compiled_update(unsupported_reason(model))
        after = compile_after if compile_after > model._n_updates else 0
        return cls(requested, whole, after, mode, background)

    def __post_init__(self) -> None:
        if self.requested.active and not self.whole_update.active and not self.failure:
            self.failure = self.whole_update.reason  # only the whole update is compiled

    @property
    def active(self) -> bool:
        """Whether something is compiled now (the threads callback asks: a compiled graph holds
        its thread count)."""
        return self.requested.active and self.compiled and not self.failure

    def due(self, n_updates: int) -> bool:
        """Whether to compile, or start the compile child, now, with ``n_updates`` gradient steps
        trained: the first compile from :attr:`after` on, the wider graph once the first runs."""
        if not self.requested.active or self.failure or self.compiling_since is not None:
            return False
        if self.compiled:
            return self.steps_per_call < self.steps_wanted
        return n_updates >= self.after

    def next_steps_per_call(self) -> int:
        """The gradient steps per call of the graph to compile next: one first, with ``background``."""
        return 1 if self.background and not self.compiled else self.steps_wanted

    def start_over(self, n_updates: int) -> None:
        """What was compiled is dropped (it baked in values that changed): nothing compiled, and
        the compile due again from ``n_updates``."""
        self.compiled, self.steps_per_call, self.outcome, self.stopped_since = False, 0, "", None
        self.after = n_updates

    def keep_first_graph(self, failure: str) -> None:
        """The wider graph failed (``failure``, one line): the graph in effect goes on, and is the last."""
        self.steps_wanted = self.steps_per_call
        self.outcome = f"{self.outcome}; the graph of more steps per call failed: {failure}"

    @property
    def planned(self) -> Decision:
        """The compile decision in words: what it compiles and from when, or why it is off."""
        if not self.requested.active:
            return self.requested
        if self.failure:
            return Decision.off(self.failure)
        when = f"after the first {self.after:,} gradient steps" if self.after else ""
        where = "in a child process while training goes on" if self.background else "in a child process"
        what = self.whole_update.reason
        return Decision.on(": ".join(part for part in (", ".join(p for p in (when, where) if p), what) if part))

    def in_effect(self, n_updates: int) -> Decision:
        """:attr:`planned`, except that a compile still waiting for its gradient step, still
        compiling, or stopped when training stopped before it ended, is not in effect; a compile
        in effect says how it went (a run's summary and the threads callback ask this)."""
        if not self.requested.active or self.failure:
            return self.planned
        if self.compiled:
            reason = "; ".join(part for part in (self.planned.reason, self.outcome, self.widening()) if part)
            return Decision.on(reason)
        if self.compiling_since is not None:
            since = f"compiling in a child process (pid {self.child_pid}) since gradient step {self.compiling_since:,}"
            return Decision.off(f"{since} ({n_updates:,} trained)")
        if self.stopped_since is not None:
            since = f"was compiling in a child process since gradient step {self.stopped_since:,}"
            return Decision.off(f"{since} when training stopped, and was stopped ({n_updates:,} trained)")
        return Decision.off(f"deferred to gradient step {self.after:,}, not reached ({n_updates:,} trained)")

    def widening(self) -> str:
        """The wider graph's compile, while it runs or once training stopped it (else ``""``)."""
        graph = f"a graph of {self.steps_wanted} gradient steps per call"
        if self.compiling_since is not None:
            where = f"in a child process (pid {self.child_pid})"
            return f"{graph} compiling {where} since gradient step {self.compiling_since:,}"
        if self.stopped_since is not None:
            since = f"since gradient step {self.stopped_since:,}"
            return f"{graph} was compiling {since} when training stopped, and was stopped"
        return ""
