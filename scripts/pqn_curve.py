"""PQN's learning curve per env step: ``sb3-snake train --algo pqn``'s game and PQN (its defaults,
as ``build_env`` and ``TrainConfig.pqn_kwargs`` make them, changed by ``--kw``), one thread, 200
greedy games from standard starts (``evaluate(model, 200, seed=0)``) every ``--eval-every`` env
steps, off the clock, beside the mean score of the last 100 exploring games from standard starts.
The greedy games are the averaged network's, as PQN plays; ``--trained`` plays them again with the
trained network's weights, for a comparison within one run.
The arms of docs/benchmarks.md, "PQN's levers per env step".

python scripts/pqn_curve.py --seed 1 --env-steps 5000000 --kw '{"n_minibatches": 32}' --out arm.json
"""

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from stable_baselines3.common.callbacks import BaseCallback, CallbackList

from sb3_snake import PQN, TrainConfig
from sb3_snake.training.callbacks import EpisodeBudget, EpisodeRecord
from sb3_snake.training.evaluation import evaluate
from sb3_snake.training.run import build_env

parser = argparse.ArgumentParser()
parser.add_argument("--board", type=int, default=10)
parser.add_argument("--env-steps", type=int, default=5_000_000)
parser.add_argument("--eval-every", type=int, default=1_000_000)
parser.add_argument("--eval-games", type=int, default=200)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--policy", default="MlpPolicy")
parser.add_argument("--envs", type=int, default=TrainConfig(algo="pqn").n_envs)
parser.add_argument("--kw", default="{}", help="other PQN arguments, as JSON")
parser.add_argument("--game", default="{}", help="other TrainConfig options (reachable, long_starts...), as JSON")
parser.add_argument("--trained", action="store_true", help="also play the greedy games with the trained weights")
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.set_num_threads(1)
game = TrainConfig(algo="pqn", board_size=args.board, seed=args.seed, n_envs=args.envs, **json.loads(args.game))
env = build_env(game)
kwargs = {**game.pqn_kwargs(), **json.loads(args.kw)}
model = PQN(args.policy, env, device="cpu", **kwargs)
log = []


class Curve(BaseCallback):
    """Plays the greedy games at each checkpoint, off the clock, and stops at the budget."""

    def __init__(self):
        super().__init__()
        self.due, self.seconds, self.since = args.eval_every, 0.0, time.perf_counter()

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.due:
            self.seconds += time.perf_counter() - self.since
            result = evaluate(self.model, args.eval_games, seed=0)
            returns = [info["r"] for info in self.model.ep_info_buffer]
            row = {
                "env_steps": self.num_timesteps,
                "seconds": round(self.seconds, 1),
                "greedy": result["mean_score"],
                "wins": result["win_rate"],
                "max": result["max_score"],
                "ends": result["ends"],  # won, truncated, walled in, died with a way out
                "exploring_return": sum(returns) / max(1, len(returns)),
                "exploring_score": record.mean_score_last(100),  # train's exploring mean
            }
            if args.trained:
                row["trained"] = greedy_games_of_the_trained_network(self.model)
            log.append(row)
            print(json.dumps(row), flush=True)
            system = {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__}
            report = {"args": vars(args), "kwargs": kwargs, "system": system, "log": log}
            Path(args.out).write_text(json.dumps(report, indent=1))
            self.due += args.eval_every
            self.since = time.perf_counter()
        return self.num_timesteps < args.env_steps


def greedy_games_of_the_trained_network(model: PQN) -> dict:
    """The checkpoint's greedy games played with the trained weights in the averaged network's place."""
    averaged = {name: tensor.clone() for name, tensor in model.policy.q_net_average.state_dict().items()}
    model.policy.q_net_average.load_state_dict(model.q_net.state_dict())
    result = evaluate(model, args.eval_games, seed=0)
    model.policy.q_net_average.load_state_dict(averaged)
    return {key: result[key] for key in ("mean_score", "win_rate", "max_score", "ends")}


record = EpisodeRecord()  # the exploring games, recorded as sb3-snake train records them
model.learn(10**12, callback=CallbackList([EpisodeBudget(None, record, time.perf_counter()), Curve()]))
