"""PQN's training speed: env steps per second of ``sb3-snake train --algo pqn``'s game and PQN (its
defaults, changed by ``--kw``), one thread, after ``--warm-up`` env steps, over ``--env-steps``
more; one JSON line. Run arms one after another, in turn, on a machine with nothing else busy
(docs/benchmarks.md, "PQN's fused Adam").

python scripts/pqn_speed.py --kw '{"policy_kwargs": {"optimizer_kwargs": {"fused": false}}}'
"""

import argparse
import json
import platform
import time

import torch

from sb3_snake import PQN, TrainConfig
from sb3_snake.training.run import build_env

parser = argparse.ArgumentParser()
parser.add_argument("--board", type=int, default=10)
parser.add_argument("--warm-up", type=int, default=100_000)
parser.add_argument("--env-steps", type=int, default=400_000)
parser.add_argument("--policy", default="MlpPolicy")
parser.add_argument("--kw", default="{}", help="other PQN arguments, as JSON")
args = parser.parse_args()

torch.set_num_threads(1)
game = TrainConfig(algo="pqn", board_size=args.board, seed=1)
model = PQN(args.policy, build_env(game), device="cpu", **{**game.pqn_kwargs(), **json.loads(args.kw)})
model.learn(args.warm_up)
warmed_up, start = model.num_timesteps, time.perf_counter()  # whole rollouts: past --warm-up
model.learn(args.env_steps, reset_num_timesteps=False)
seconds = time.perf_counter() - start
row = {"kw": json.loads(args.kw), "policy": args.policy, "env_steps": model.num_timesteps - warmed_up}
row |= {"seconds": round(seconds, 2), "env_steps_per_s": round(row["env_steps"] / seconds)}
print(json.dumps(row | {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__}))
