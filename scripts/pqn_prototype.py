"""A research prototype of PQN (Gallici et al. 2024) on sb3-snake's batched games, not part of the
package: is a learner of many games, Q(lambda) targets and a LayerNorm network, without replay
buffer or target network, worth building in (issue "win the game", lever 5)? Rollouts of
``--steps`` moves of ``--envs`` games, lambda-returns bootstrapped from the rollout's own
Q-values, ``--epochs`` passes of ``--minibatches`` minibatches (2 gradient samples per env step
by default), epsilon-greedy decayed over ``--eps-steps``, sb3-snake train's game (egocentric, a
stall growth of 4, a share of long starts, the food shaping). One thread. Greedy evaluations of
200 games from standard starts every ``--eval-every`` env steps, not counted as training time.

python scripts/pqn_prototype.py --board 10 --minutes 10 --seed 1 --out pqn.json
"""

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from torch import nn

from sb3_snake.dqn.targets import shaping_rewards
from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv

parser = argparse.ArgumentParser()
parser.add_argument("--board", type=int, default=6)
parser.add_argument("--minutes", type=float, default=8)
parser.add_argument("--env-steps", type=int, default=0)
parser.add_argument("--envs", type=int, default=128)
parser.add_argument("--steps", type=int, default=32)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--minibatches", type=int, default=4)
parser.add_argument("--lr", type=float, default=5e-4)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--lam", type=float, default=0.65)
parser.add_argument("--eps-end", type=float, default=0.02)
parser.add_argument("--eps-steps", type=int, default=200_000)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--shaping", type=float, default=1.0)
parser.add_argument("--long-starts", type=float, default=0.2)
parser.add_argument("--eval-every", type=int, default=1_000_000)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--eval-games", type=int, default=200)
parser.add_argument("--out", default="")
args = parser.parse_args()

torch.set_num_threads(1)
torch.manual_seed(args.seed)
options = dict(board_size=args.board, stall_growth=4, egocentric=True)
env = BatchedSnakeVecEnv(args.envs, seed=args.seed, long_starts=args.long_starts, **options)
obs = env.reset_tensors()
inputs, actions_n = obs[0].numel(), env.action_space.n


def layer(a, b):
    return [nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU()]


q = nn.Sequential(
    nn.Flatten(), *layer(inputs, args.width), *layer(args.width, args.width), nn.Linear(args.width, actions_n)
)
optimizer = torch.optim.Adam(q.parameters(), lr=args.lr)


def greedy_eval(games=200, seed=1000):
    """Mean score and wins of one game per env, greedy, standard starts."""
    e = BatchedSnakeVecEnv(games, seed=seed, long_starts=0.0, **options)
    o = e.reset_tensors()
    done = torch.zeros(games, dtype=torch.bool)
    scores = torch.zeros(games)
    wins = torch.zeros(games, dtype=torch.bool)
    with torch.no_grad():
        while not done.all():
            step = e.step_tensors(q(o.float()).argmax(1))
            first = ~done[step.final_indices]
            idx = step.final_indices[first]
            scores[idx] = step.final_scores[first].float()
            wins[idx] = step.final_successes[first]
            done[idx] = True
            o = step.observations
    return scores.mean().item(), wins.float().mean().item()


log, env_steps, started, next_eval = [], 0, time.perf_counter(), 0
explore_scores = []
while True:
    elapsed = time.perf_counter() - started
    if env_steps >= next_eval:
        score, wins = greedy_eval(args.eval_games)
        explore = sum(explore_scores[-100:]) / max(1, len(explore_scores[-100:]))
        row = {
            "env_steps": env_steps,
            "seconds": round(elapsed, 1),
            "greedy": score,
            "wins": wins,
            "exploring": explore,
        }
        log.append(row)
        print(json.dumps(row), flush=True)
        next_eval += args.eval_every
        started += time.perf_counter() - started - elapsed  # evaluations are not training time
        elapsed = time.perf_counter() - started
    if (args.env_steps and env_steps >= args.env_steps) or (not args.env_steps and elapsed > args.minutes * 60):
        break
    T, E = args.steps, args.envs
    b_obs, b_act, b_rew, b_cut, b_boot = [], [], [], [], []
    with torch.no_grad():
        for _ in range(T):
            eps = max(args.eps_end, 1.0 - (1.0 - args.eps_end) * env_steps / args.eps_steps)
            x = obs.float()
            greedy = q(x).argmax(1)
            random = torch.randint(actions_n, (E,))
            act = torch.where(torch.rand(E) < eps, random, greedy)
            step = env.step_tensors(act)
            nxt = step.observations.clone()
            nxt[step.final_indices] = step.final_observations
            r = step.rewards
            if args.shaping:
                r = r + shaping_rewards(args.shaping, args.gamma, obs, nxt, step.terminated)
            boot = q(nxt.float()).max(1).values * (~step.terminated).float()
            b_obs.append(obs)
            b_act.append(act)
            b_rew.append(r)
            b_cut.append(step.terminated | step.truncated)
            b_boot.append(boot)
            explore_scores += step.final_scores.tolist()
            obs = step.observations
            env_steps += E
        returns = torch.empty(T, E)
        following = b_boot[-1]
        for t in reversed(range(T)):
            # the lambda-return: the next step's own return mixed with its Q-value, cut where a game ended
            blend = (1 - args.lam) * b_boot[t] + args.lam * following
            mixed = b_boot[t] if t == T - 1 else torch.where(b_cut[t], b_boot[t], blend)
            returns[t] = b_rew[t] + args.gamma * mixed
            following = returns[t]
    X = torch.stack(b_obs).flatten(0, 1).float()
    A = torch.stack(b_act).flatten()
    R = returns.flatten()
    n = X.shape[0]
    for _ in range(args.epochs):
        order = torch.randperm(n)
        for chunk in order.chunk(args.minibatches):
            loss = 0.5 * (q(X[chunk]).gather(1, A[chunk, None]).squeeze(1) - R[chunk]).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(q.parameters(), 10.0)
            optimizer.step()
score, wins = greedy_eval(args.eval_games)
row = {
    "env_steps": env_steps,
    "seconds": round(time.perf_counter() - started, 1),
    "greedy": score,
    "wins": wins,
    "exploring": sum(explore_scores[-100:]) / max(1, len(explore_scores[-100:])),
    "final": True,
}
log.append(row)
print(json.dumps(row), flush=True)
if args.out:
    system = {
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    Path(args.out).write_text(json.dumps({"args": vars(args), "system": system, "log": log}, indent=1))
