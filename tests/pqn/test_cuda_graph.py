"""PQN's minibatch steps captured as one CUDA graph (``sb3_snake.pqn.gradient_step.CapturedMinibatches``):
what the graph replays is what eager steps do on the same minibatches, a new rollout is copied in,
a new learning rate captures again, and whole runs train with it. CUDA only: skipped without a GPU.
On the CPU the CUDA graph is off with its reason (tested in test_optimization_layer.py)."""

import copy

import pytest
import torch
from stable_baselines3.common.logger import Logger

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.pqn import PQN
from sb3_snake.pqn.gradient_step import CapturedMinibatches
from sb3_snake.update.capture import WARMUP_STEPS
from tests.conftest import cuda

pytestmark = cuda
GRAPHED = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)


def gpu_pqn(settings=GRAPHED, policy="MlpPolicy", **kwargs):
    env = BatchedSnakeVecEnv(16, board_size=6, seed=0, egocentric=True, device="cuda")
    options = {"safe_exploration": True, "fatal_move_targets": True, "stall_as_death": True, "food_shaping": 1.0}
    model = PQN(
        policy, env, n_steps=8, n_minibatches=4, seed=0, device="cuda", optimizations=settings, **options, **kwargs
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    model._setup_learn(128, None)
    return model


@pytest.mark.parametrize("augment", [False, True], ids=["plain", "symmetries"])
def test_the_captured_minibatch_step_replays_what_eager_steps_do(augment):
    graphed = gpu_pqn(symmetry_augmentation=augment)
    assert graphed.active_optimizations.cuda_graph.active, graphed.active_optimizations.cuda_graph.reason
    eager = copy.deepcopy(graphed)
    rollout = graphed.collect_rollout(graphed._init_callback(None))
    order = torch.randperm(len(rollout.returns), device="cuda").view(-1, graphed.batch_size)
    for model in (graphed, eager) if augment else ():
        model._augmentation.generator.manual_seed(7)
    for model in (graphed, eager):
        model.step_choice.update.start_pass(rollout, order)
    graphed.step_choice.run(graphed.n_minibatches, graphed.batch_size)
    captured = graphed.step_choice.current
    assert isinstance(captured, CapturedMinibatches) and not captured.failure
    assert (captured.eager_steps, captured.replays) == (WARMUP_STEPS, graphed.n_minibatches - WARMUP_STEPS)
    for _ in range(graphed.n_minibatches):  # the same minibatches, one eager step each
        batch = eager.step_choice.update.sample(1, eager.batch_size)
        eager.step_choice.update.gradient_step(batch)
    learning_rate = graphed.policy.optimizer.param_groups[0]["lr"]
    for mine, theirs in zip(graphed.q_net.parameters(), eager.q_net.parameters(), strict=True):
        # Adam moves a weight at most about one learning rate per step.
        torch.testing.assert_close(mine, theirs, rtol=0, atol=2 * graphed.n_minibatches * learning_rate)


def test_a_new_rollout_is_copied_in_and_a_new_learning_rate_captures_again():
    model = gpu_pqn()
    model.learn(3 * 128)  # three rollouts: each copied into the graph's tensors
    captured = model.step_choice.current
    assert isinstance(captured, CapturedMinibatches) and captured.replays == 3 * 2 * 4 - WARMUP_STEPS
    first = captured.graph
    model.lr_schedule = lambda _progress_remaining: 1e-3
    model.learn(128, reset_num_timesteps=False)
    assert captured.graph is not first and captured.learning_rates == (1e-3,)
    assert all(parameter.isfinite().all() for parameter in model.q_net.parameters())


@pytest.mark.parametrize("policy", ["MlpPolicy", "CnnPolicy", "AttentionPolicy"])
def test_every_pqn_network_trains_captured_with_bf16(policy):
    settings = OptimizationSettings(use_bf16=True, use_flash_attention=False, use_torch_compile=False, num_threads=1)
    model = gpu_pqn(settings, policy)
    model.learn(2 * 128)
    assert model.active_optimizations.bf16.active and isinstance(model.step_choice.current, CapturedMinibatches)
    assert all(parameter.isfinite().all() for parameter in model.q_net.parameters())
