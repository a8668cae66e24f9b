"""``CompiledUpdate``: SnakeDQN's whole gradient step compiled as one graph, for the CPU.

An eager update of this policy calls about a thousand operators (the sampled batch's
conversion, two forward passes, the loss, backward, clipping, Adam), and on a CPU most of its
time is dispatch and small kernels rather than the matrix products. Compiling the two Q-networks
alone leaves the loss, the backward pass's bookkeeping, clipping and Adam eager, and SB3's
observation preprocessing (a NumPy test of the space) breaks each network's graph, so it gains
little. This module compiles the update itself, ``torch.compile(fullgraph=True)`` over one function:

- **Gradients inside the graph**: ``torch.func.grad_and_value`` of the Huber loss with respect
  to the online network's parameters (``functional_call``), so the backward pass is traced too.
  The target network's values and Double DQN's choice are taken under ``no_grad`` as the eager
  :class:`~sb3_snake.dqn.update.step.UpdateStep` takes them.
- **Clipping** as ``torch.nn.utils.clip_grad_norm_`` computes it (the norm of the parameters'
  norms, ``max_norm / (norm + 1e-6)`` capped at 1).
- **Adam as ``torch.optim.Adam`` computes it, on the optimizer's own state**: ``exp_avg``,
  ``exp_avg_sq`` and ``step`` are the tensors in ``optimizer.state``, updated in place, as are
  the parameters. Saving, loading, SB3's target-network copies and an eager step in between
  see the same tensors. The learning rate is a tensor filled before each call, so a rate that
  changes (a schedule, ``learning_rate_half_life``) recompiles nothing. Adam is written out here
  rather than traced from ``optimizer.step()``: LeanRL's shape, ``torch.compile`` over an update
  function that calls ``loss.backward()`` and ``optimizer.step()``, breaks the graph at the
  backward pass and runs the optimizer as a graph of its own, and measured slower than this
  one graph on a CPU at batch 128, with fused and with capturable Adam alike (foreach Adam did
  not trace at all); the eager step was slower still.
- **A pure function of its tensors**: both networks' parameters and Adam's state are arguments,
  and the networks run through ``functional_call``. The graph therefore depends on their shapes
  and dtypes only, never on which tensors they are, which lets it be compiled on copies while
  training goes on (below) and then run on the model's own tensors with no new compile.
- **The forward context** of the optimization layer around the call: the SDPA kernel
  restriction, and bf16 autocast when active, under which the graph is traced (autocast
  entered inside a ``grad_and_value`` failed to trace on torch 2.13). Everything outside the
  networks is elementwise or a reduction, which autocast leaves in float32, and Q-values leave
  the networks as float32, as in the eager step.

What it does not take (:func:`~sb3_snake.dqn.update.compile.unsupported_reason`): optimizers
other than plain Adam, parameter groups other than one, observations that SB3 would preprocess
beyond ``float()``; those compile the networks instead. A compile that fails (at the first
call, which compiles) sets :attr:`~UpdateStep.failure`, and the call's steps run eagerly.

**Compiling in the background** (:meth:`CompiledUpdate.compile_in_background`). A cold compile of
this graph takes tens of seconds on a small CPU, and a first call that compiles stops training
for all of them. Instead, a thread makes that first call on *copies* of the parameters and
Adam's state, with real sampled batches, while the caller goes on training eagerly; the model's
own tensors are not touched until the compile is done (:attr:`CompiledUpdate.compiling`), and
the next call of the compiled function finds the graph ready under the same guards. The thread
competes with training for the GIL and the cores, so eager steps run slower meanwhile, but they
never stop. What the thread cannot share with training is held fixed for it: the SDPA kernel
choice, process-wide flags that the eager forward passes set and restore, is held by the
caller from the start to the end of the compile; autocast and grad mode are per thread; and the
thread count the graph is compiled for (:attr:`CompiledUpdate.threads`, the count when the
compile starts) is the compiling thread's own. Torch's intra-op count is per thread under
OpenMP (a thread takes the process's count when it first computes), so training may use fewer
threads while the compile runs, leaving it a core, and go back to this count when the compiled
update takes over: dynamo guards on the count, and another would compile the graph again.
Setting a count also resets process-wide state (torch's oneDNN computation cache, the pthreadpool's
size), so the two threads never set one at once: :meth:`~CompiledUpdate.compile_in_background`
returns only once the thread has set its own, and training lowers its count after that. (That
holds between one model's training and its compile; trials of ``sb3-snake tune --n-jobs`` that
train in threads of one process set their counts independently.)
The GIL is the other thing they share: a thread that wants it waits for the switch interval
(5 ms by default) while the other runs Python, and an eager step asks for it back after each of its
many small operators, so beside the compiler's tracing one step could take seconds. While the
compile runs the interval is :data:`SWITCH_INTERVAL` (restored after), which keeps every eager
step short at the price of a slightly longer compile. One hazard is process-wide and not a flag:
an FX symbolic trace patches ``nn.Module.__call__`` for as long as it runs, and a module called
from another thread meanwhile is routed into the tracer (a training run failed so, "module is
not installed as a submodule"). The compile's own traces (``make_fx``) pass foreign calls
through unchanged; the one plain symbolic trace inductor makes, of a dummy graph it then caches,
is made here before the thread starts (:func:`_trace_inductor_dummy_graph`).

**Several gradient steps per call** (:attr:`CompiledUpdate.steps_per_call`). Each call of a
compiled function pays for its guards and inductor's Python wrapper before any kernel runs, and
each eagerly sampled and augmented batch pays for dispatch; at a small batch that is a large
share of a step. :meth:`CompiledUpdate.run` therefore samples the batches of several steps at
once (one draw of ``steps * batch_size`` rows: independent uniform draws either way), augments
them at once, and runs them as one graph in which the steps follow each other, each reading the
parameters and Adam's state the one before wrote; the target network is the same for all of
them, as it is for the steps of one eager ``train`` call. How many steps a graph holds is fixed
by its first call, at most :data:`MAX_STEPS_PER_CALL` (the graph, and its compile, grow with
it), as the largest count up to that which divides the first call's (:func:`steps_per_call_for`),
and read from the batches' shapes inside the graph. A later call of ``n`` steps makes
``n // steps_per_call`` compiled calls, and the rest of a count that is not a multiple runs
eagerly rather than compile a second graph. ``sb3-snake train``'s counts are multiples: a fixed
number of steps per update (four at its defaults), half as many in its early phase, in which
a compile that falls there (``--compile-after 0``) fixes the smaller count. Because a call's
batches are drawn at once, a seeded run that compiles draws other batches than one that does not.

On CUDA the gradient step is captured as a CUDA graph instead (:mod:`sb3_snake.dqn.update.captured`),
which removes the launch overhead this removes on the CPU.
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn
from torch.func import functional_call, grad_and_value
from torch.nn.attention import sdpa_kernel

from sb3_snake.dqn.targets import td_targets
from sb3_snake.dqn.update import background
from sb3_snake.dqn.update.compile import compile_failure
from sb3_snake.dqn.update.step import UpdateStep

if TYPE_CHECKING:
    from stable_baselines3 import DQN

    from sb3_snake.acceleration.optimizations import ActiveOptimizations


#: Seconds between the GIL's hand-overs while a background compile runs (Python's default: 0.005).
SWITCH_INTERVAL = 0.0001
#: The most gradient steps one compiled call runs (see the module docstring).
MAX_STEPS_PER_CALL = 4


class _QValues(nn.Module):
    """A Q-network's forward pass without its context and SB3's preprocessing (observations
    become float32 as ``preprocess_obs`` makes a non-image ``Box`` one): what dynamo can trace."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.network.features_extractor(observations.float())
        return self.network.q_values(features).float()


class CompiledUpdate(UpdateStep):
    """The gradient steps of ``model`` (a :class:`~sb3_snake.SnakeDQN`), several to a compiled call.

    :param model: the model; its update must be supported (:func:`~sb3_snake.dqn.update.compile.unsupported_reason`).
    :param active: the optimizations in effect (compile mode, bf16, SDPA kernels).
    """

    decision = "compile"
    label = "torch.compile"

    def __init__(self, model: DQN, active: ActiveOptimizations):
        super().__init__(model)
        self.sdpa_backends = active.sdpa_backends
        self.device_type, self.bf16 = model.device.type, active.bf16.active
        self.online, self.target = _QValues(model.q_net), _QValues(model.q_net_target)
        self.names, self.parameters = _named_parameters(self.online)
        self.target_names, self.target_parameters = _named_parameters(self.target)
        self.buffers = dict(self.online.named_buffers())
        self.target_buffers = dict(self.target.named_buffers())
        self.optimizer = model.policy.optimizer
        self.group = self.optimizer.param_groups[0]
        self.learning_rate = torch.zeros((), device=model.device)
        self.state: tuple[list[torch.Tensor], ...] = ()  #: Adam's exp_avg, exp_avg_sq and step, per parameter
        self.calls = 0  #: calls of the compiled function (the first one compiles, unless the background did)
        #: Gradient steps per compiled call, fixed by the first (0: none yet).
        self.steps_per_call = 0
        self.threads = 0  #: torch's thread count the background compile compiled for (0: none started)
        self._background: threading.Thread | None = None
        #: What a background compile holds until it ends: the SDPA kernel choice and the GIL's switch interval.
        self._held = ExitStack()
        self.function = torch.compile(self._updates, fullgraph=True, dynamic=False, mode=active.settings.compile_mode)

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` updates, :attr:`steps_per_call` to a compiled call, each call's
        batches sampled and augmented at once; the rest of the count eagerly (see the module
        docstring). Their mean loss, not read."""
        if self.failure:
            return super().run(gradient_steps, batch_size)
        per_call = self.steps_per_call = self.steps_per_call or steps_per_call_for(gradient_steps)
        calls, rest = divmod(gradient_steps, per_call)
        total = sum(self.update(self.sample(per_call, batch_size), per_call) * per_call for _ in range(calls))
        if rest:  # eagerly, rather than compile a second graph for them
            total = total + self._eager(self.sample(rest, batch_size), rest) * rest
        return total / gradient_steps

    def update(self, data: ReplayBufferSamples, steps: int = 1) -> torch.Tensor:
        """``steps`` compiled updates whose batches lie one after another in ``data``; their mean
        loss. Eagerly once the first call (the compile) failed."""
        if self.failure:
            return self._eager(data, steps)
        try:
            loss = self.compiled_update(data, steps)
        except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
            if self.calls:  # it compiled and ran before: not a compile failure
                raise
            self.failure = compile_failure(error)
            return self._eager(data, steps)
        self.calls += 1
        return loss

    def compiled_update(self, data: ReplayBufferSamples, steps: int = 1) -> torch.Tensor:
        """One call of the compiled function on ``steps`` batches, in the forward context, on the
        model's parameters and Adam's state tensors."""
        self.learning_rate.fill_(self.group["lr"])
        self.state = self.state or self._adam_state()
        tensors = (self.parameters, self.target_parameters, *self.state)
        with sdpa_kernel(self.sdpa_backends), torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            return self.function(_split(data, steps), self.learning_rate, *tensors)

    def compile_in_background(self, data: ReplayBufferSamples, steps: int = 1) -> None:
        """Start compiling in a thread, by one call on copies of the parameters and of Adam's
        state with the ``steps`` batches of ``data`` (see the module docstring), which fixes
        :attr:`steps_per_call`; the caller trains on meanwhile and asks :attr:`compiling`, then
        :meth:`finish_background`, before calling :meth:`run`. Returns once the thread has set its
        thread count, so that the caller may then set its own."""
        self.steps_per_call = steps
        copies = (
            [_copy(parameter) for parameter in self.parameters],
            [_copy(parameter) for parameter in self.target_parameters],
            *self._fresh_adam_state(),
        )
        learning_rate = torch.full((), self.group["lr"], device=self.learning_rate.device)
        self.threads = torch.get_num_threads()
        _trace_inductor_dummy_graph()
        self._held.enter_context(sdpa_kernel(self.sdpa_backends))
        self._held.callback(sys.setswitchinterval, sys.getswitchinterval())
        sys.setswitchinterval(SWITCH_INTERVAL)
        counted = threading.Event()
        self._background = threading.Thread(
            target=self._background_compile,
            args=(counted, _split(data, steps), learning_rate, copies),
            name="sb3-snake-compile",
            daemon=True,
        )
        background.register(self._background)
        self._background.start()
        # Setting a thread count is not only per thread: it also resets process-wide pools and
        # caches (oneDNN's, pthreadpool's). The caller may lower its own count next, so it
        # waits until the thread has set its own, rather than both setting one at once.
        counted.wait()

    @property
    def compiling(self) -> bool:
        """Whether a background compile is still running."""
        return self._background is not None and self._background.is_alive()

    def finish_background(self) -> None:
        """After a background compile: wait for its thread and release what it held. Its
        failure, if it failed, is :attr:`~UpdateStep.failure`."""
        if self._background is not None:
            self._background.join()
            self._background = None
        self._held.close()

    def abandon(self) -> None:
        """Leave a background compile to finish on its own, unused, and release what it held
        now (training has stopped; see :meth:`~sb3_snake.dqn.update.choice.UpdateChoice.close`)."""
        self._background = None
        self._held.close()

    def _background_compile(self, counted: threading.Event, *arguments: object) -> None:
        """The compiling thread: its own thread count first (``counted`` says it is set), then the
        compile. A count it cannot set fails the compile, as a compile error does: the graph would
        be compiled for another count."""
        try:
            try:
                # This thread's own count, whatever training sets meanwhile. Asking first makes torch
                # take the process's count for this thread now (once per thread), not later over this one.
                torch.get_num_threads()
                torch.set_num_threads(self.threads)
            except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
                self.failure = compile_failure(error)
                return
            counted.set()
            self._compile_on_copies(*arguments)
        finally:
            counted.set()
            background.unregister(threading.current_thread())

    def _compile_on_copies(self, data: ReplayBufferSamples, learning_rate: torch.Tensor, copies: tuple) -> None:
        try:
            with torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
                self.function(data, learning_rate, *copies)
        except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
            self.failure = compile_failure(error)

    def reload(self) -> bool:
        self.state = ()  # loading gives the optimizer new state tensors: read them again
        return True

    def _adam_state(self) -> tuple[list[torch.Tensor], ...]:
        """Adam's state tensors of every parameter, created as ``torch.optim.Adam`` creates them."""
        for parameter in self.parameters:
            if not self.optimizer.state[parameter]:
                self.optimizer.state[parameter].update(_new_adam_state(parameter))
        states = [self.optimizer.state[parameter] for parameter in self.parameters]
        return tuple([state[name] for state in states] for name in ADAM_STATE)

    def _fresh_adam_state(self) -> tuple[list[torch.Tensor], ...]:
        """Copies of Adam's state tensors of every parameter, or new ones as ``torch.optim.Adam``
        creates them where it has none yet; the optimizer's own state is left as it is."""
        states = [self.optimizer.state.get(parameter) or _new_adam_state(parameter) for parameter in self.parameters]
        return tuple([state[name].clone() for state in states] for name in ADAM_STATE)

    def _eager(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        """The eager updates of the ``steps`` batches of ``data``, one after another; their mean loss."""
        batches = _split(data, steps)
        loss = torch.stack([super(CompiledUpdate, self).update(_batch(batches, k)) for k in range(steps)]).mean()
        background.zero_grad(self.optimizer)  # the compiled steps keep their gradients inside the graph
        return loss

    def _loss(
        self, parameters: list[torch.Tensor], target_parameters: list[torch.Tensor], data: ReplayBufferSamples
    ) -> torch.Tensor:
        model = self.model
        weights = {**dict(zip(self.names, parameters, strict=True)), **self.buffers}
        target_weights = {**dict(zip(self.target_names, target_parameters, strict=True)), **self.target_buffers}

        def online(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.online, weights, (observations,))

        def target(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.target, target_weights, (observations,))

        chooser = online if model.double_dqn else None
        target_q_values = td_targets(data, target, chooser, model.gamma, model.food_shaping)
        return F.smooth_l1_loss(online(data.observations).gather(1, data.actions.long()), target_q_values)

    def _updates(
        self, batches: ReplayBufferSamples, learning_rate: torch.Tensor, *tensors: list[torch.Tensor]
    ) -> torch.Tensor:
        """The compiled function: one update per batch of ``batches`` (each field shaped
        ``(steps, batch_size, ...)``), in order; their mean loss."""
        steps = batches.observations.shape[0]
        return torch.stack([self._update(_batch(batches, k), learning_rate, *tensors) for k in range(steps)]).mean()

    def _update(
        self,
        data: ReplayBufferSamples,
        learning_rate: torch.Tensor,
        parameters: list[torch.Tensor],
        target_parameters: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> torch.Tensor:
        detached = [parameter.detach() for parameter in parameters]
        gradients, loss = grad_and_value(self._loss)(detached, target_parameters, data)
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(gradients)))
        gradients = torch._foreach_mul(gradients, (self.model.max_grad_norm / (norm + 1e-6)).clamp(max=1.0))
        beta1, beta2 = self.group["betas"]
        with torch.no_grad():
            torch._foreach_add_(steps, 1)
            torch._foreach_lerp_(exp_avgs, gradients, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, gradients, gradients, 1 - beta2)
            step = steps[0]  # every parameter has taken the same steps
            step_size = learning_rate / (1 - beta1**step)
            denominators = torch._foreach_div(torch._foreach_sqrt(exp_avg_sqs), (1 - beta2**step).sqrt())
            torch._foreach_add_(denominators, self.group["eps"])
            updates = torch._foreach_div(exp_avgs, denominators)
            torch._foreach_mul_(updates, -step_size)
            torch._foreach_add_(parameters, updates)
        return loss.detach()


#: Adam's state per parameter, in the order the compiled update takes it.
ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")


def _new_adam_state(parameter: torch.Tensor) -> dict[str, torch.Tensor]:
    """Adam's state of a parameter that has taken no step, as ``torch.optim.Adam`` creates it."""
    return {
        "step": torch.zeros((), dtype=torch.float32, device=parameter.device),
        "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format),
    }


def steps_per_call_for(gradient_steps: int) -> int:
    """The gradient steps a compiled call holds when the first call asks for ``gradient_steps``:
    the largest count up to :data:`MAX_STEPS_PER_CALL` that divides it, so that calls of the same
    count run compiled whole."""
    return max(steps for steps in range(1, MAX_STEPS_PER_CALL + 1) if gradient_steps % steps == 0)


def _split(data: ReplayBufferSamples, steps: int) -> ReplayBufferSamples:
    """``data`` (``steps`` batches one after another) with each field shaped ``(steps, batch_size, ...)``."""
    return ReplayBufferSamples(*(None if field is None else field.unflatten(0, (steps, -1)) for field in data))


def _batch(batches: ReplayBufferSamples, k: int) -> ReplayBufferSamples:
    """The ``k``-th batch of :func:`_split`'s ``batches``."""
    return ReplayBufferSamples(*(None if field is None else field[k] for field in batches))


def _named_parameters(module: nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """``module``'s parameter names and parameters, in the same order."""
    named = list(module.named_parameters())
    return [name for name, _ in named], [parameter for _, parameter in named]


def _copy(parameter: torch.Tensor) -> torch.Tensor:
    """A copy of a parameter that the compiled graph's guards cannot tell from it."""
    copy = parameter.detach().clone()
    if isinstance(parameter, nn.Parameter):
        return nn.Parameter(copy, requires_grad=parameter.requires_grad)
    return copy


def _trace_inductor_dummy_graph() -> None:
    """Make inductor's one plain FX symbolic trace (a dummy graph for its loop bodies, traced on
    first use and cached for the process) in this thread, before a compile in another thread
    would make it while this one calls modules (see the module docstring). A torch without it
    has nothing to make."""
    try:
        from torch._inductor.loop_body import InterpreterShim

        InterpreterShim._dummy_gm()
    except (ImportError, AttributeError):
        pass
