"""Env steps/s of ``sb3-snake train``'s learner with the optimization layer, against the same learner
eager in float32: two models of one config in one process, their timed windows alternating.

Both models are built for the same config and seed; each learns a warm-up that is not timed (the
layer's compile, adopted at its first gradient step, included, and reported apart), then ``repeats``
windows of ``window_steps`` env steps each, the two in turn (which one goes first alternates), at
the same thread count. The figure is each one's median window, and the speed-up their ratio (also
per pair of windows). Beside it: the gradient step's FLOPs per env step, counted by
``FlopCounterMode`` on the eager model, the GFLOP/s the layer's training reaches, and the matmul
ceiling of the step's own products (:mod:`sb3_snake.benchmark.matmul`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any

import torch
from stable_baselines3.common.logger import Logger
from torch.utils.flop_counter import FlopCounterMode

from sb3_snake.acceleration.optimizations import torch_threads
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import products_ceiling, record_products
from sb3_snake.common.system import system_info
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import build_model

#: What the layer is measured against: float32, PyTorch's attention kernel, eager.
EAGER_FP32 = {"use_bf16": False, "use_flash_attention": False, "sdpa_backend": "auto", "use_torch_compile": False}


def eager_fp32(settings: OptimizationSettings) -> OptimizationSettings:
    """``settings`` with every optimization of the step off: the eager float32 step."""
    return settings.resolved(dict(EAGER_FP32), dict.fromkeys(EAGER_FP32, "eager float32 baseline"))


def with_layer(settings: OptimizationSettings) -> OptimizationSettings:
    """``settings`` with a compile asked for made at the first gradient step, which waits for it."""
    return replace(settings, compile_after=0, compile_in_background=False)


def measure_layer_speedup(
    config: TrainConfig,
    settings: OptimizationSettings,
    threads: int,
    warmup_steps: int = 100_000,
    window_steps: int = 200_000,
    repeats: int = 5,
    progress: Any = lambda line: None,
) -> dict[str, Any]:
    """The learner of ``config`` trained with ``settings`` (resolved, no ``auto``) against itself
    eager in float32, in alternating timed windows; JSON-ready."""
    arms = {"eager_fp32": eager_fp32(settings), "layer": with_layer(settings)}
    with torch_threads(threads):
        models, warmups = {}, {}
        for name, arm in arms.items():
            model = build_model(config, arm)
            model.set_logger(Logger(folder=None, output_formats=[]))
            started = time.perf_counter()
            model.learn(warmup_steps)
            warmups[name] = time.perf_counter() - started
            models[name] = model
            progress(f"{name}: warmed up in {warmups[name]:.0f} s ({model.num_timesteps:,} env steps)")
        rates: dict[str, list[float]] = {name: [] for name in arms}
        for repeat in range(repeats):
            for name in list(arms) if repeat % 2 == 0 else list(arms)[::-1]:
                model, before = models[name], models[name].num_timesteps
                started = time.perf_counter()
                model.learn(window_steps, reset_num_timesteps=False)
                rates[name].append((model.num_timesteps - before) / (time.perf_counter() - started))
            progress(f"window {repeat + 1}: " + ", ".join(f"{n} {r[-1]:,.0f} env steps/s" for n, r in rates.items()))
        flops = flops_per_env_step(models["eager_fp32"])
        ceiling = step_ceiling(models["eager_fp32"], models["layer"].active_optimizations.bf16.active)
    median = {name: statistics.median(values) for name, values in rates.items()}
    layer = models["layer"]
    return {
        "config": {
            "algo": config.algo,
            "policy": config.policy,
            "n_envs": config.n_envs,
            "board_size": config.board_size,
        },
        "threads": threads,
        "warmup_env_steps": warmup_steps,
        "window_env_steps": window_steps,
        "repeats": repeats,
        "warmup_seconds": warmups,
        "env_steps_per_second": {name: {"median": median[name], "windows": rates[name]} for name in rates},
        "speedup": median["layer"] / median["eager_fp32"],
        "paired_speedups": [b / a for a, b in zip(rates["eager_fp32"], rates["layer"], strict=True)],
        "active": {name: models[name].optimizations_in_effect().as_dict() for name in models},
        "gradient_flops_per_env_step": flops,
        "layer_gflops": median["layer"] * flops / 1e9,
        "matmul_ceiling_gflops": ceiling,
        "matmul_ceiling_fraction": median["layer"] * flops / 1e9 / ceiling if ceiling else None,
        "compile": layer.compile_state.in_effect(layer._n_updates).reason,
        "system": system_info(),
    }


def _gradient_steps_per_env_step(model: Any) -> float:
    """Gradient steps one env step pays for: PQN's epochs over its minibatches of a rollout,
    SnakeDQN's gradient steps per update over the env steps between updates."""
    if hasattr(model, "n_minibatches"):
        return model.n_epochs * model.n_minibatches / (model.n_steps * model.n_envs)
    return model.gradient_steps / (model.train_freq.frequency * model.n_envs)


def one_step(model: Any) -> Any:
    """A call that runs one gradient step of ``model`` as its training runs it (its batch size)."""
    if hasattr(model, "n_minibatches"):  # PQN: a minibatch of a rollout of its own games
        rollout = model.collect_rollout(model._init_callback(None))

        def step() -> None:
            update = model.step_choice.update
            if update.order is None or update.taken >= len(update.order):
                order = torch.randperm(len(rollout.returns), device=model.device).view(-1, model.batch_size)
                update.start_pass(rollout, order)
            model.step_choice.run(1, model.batch_size)

        return step
    return lambda: model.train(gradient_steps=1, batch_size=model.batch_size)


def flops_per_env_step(model: Any) -> float:
    """FLOPs of the gradient steps one env step pays for, counted on one eager step of ``model``."""
    step = one_step(model)
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops() * _gradient_steps_per_env_step(model)


def step_ceiling(model: Any, bf16: bool) -> float:
    """GFLOP/s of the step's own matrix products replayed back to back (:func:`products_ceiling`)."""
    step = one_step(model)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)
    with context:
        products = record_products(step)
    return products_ceiling(products, model.device.type)
