"""Q(lambda) returns against their forward view: the lambda-weighted mean of n-step returns."""

import pytest
import torch

from sb3_snake.pqn.returns import lambda_returns


def forward_view(rewards, bootstraps, cut, gamma, lam):
    """G_t = (1 - lam) * sum_n lam^(n-1) G_t^(n) + lam^(m-1) G_t^(m), where the m-step return is
    the longest that stays within the game and the rollout (it ends at a cut or the last step)."""
    steps, games = rewards.shape
    returns = torch.zeros(steps, games, dtype=torch.float64)
    for game in range(games):
        for t in range(steps):
            end = t
            while end < steps - 1 and not cut[end, game]:
                end += 1
            m = end - t + 1

            def n_step(n, t=t, game=game):
                discounted = sum(gamma**k * rewards[t + k, game] for k in range(n))
                return discounted + gamma**n * bootstraps[t + n - 1, game]

            mixed = sum((1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, m))
            returns[t, game] = mixed + lam ** (m - 1) * n_step(m)
    return returns


@pytest.mark.parametrize("lam", [0.0, 0.65, 1.0])
def test_the_backward_recursion_is_the_forward_view(lam):
    generator = torch.Generator().manual_seed(3)
    rewards = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    bootstraps = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    cut = torch.rand(7, 5, generator=generator) < 0.25
    expected = forward_view(rewards, bootstraps, cut, 0.9, lam)
    torch.testing.assert_close(lambda_returns(rewards, bootstraps, cut, 0.9, lam), expected)


def test_lambda_zero_gives_one_step_targets_and_one_the_discounted_rewards_to_the_cut():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    bootstraps = torch.tensor([[10.0], [20.0], [30.0]])
    cut = torch.tensor([[False], [True], [False]])
    one_step = lambda_returns(rewards, bootstraps, cut, 0.5, 0.0)
    torch.testing.assert_close(one_step, rewards + 0.5 * bootstraps)
    full = lambda_returns(rewards, bootstraps, cut, 0.5, 1.0)
    # the first two steps are one game, cut at the second; the third bootstraps at the rollout's end
    torch.testing.assert_close(full, torch.tensor([[1.0 + 0.5 * (2.0 + 0.5 * 20.0)], [2.0 + 0.5 * 20.0], [18.0]]))
