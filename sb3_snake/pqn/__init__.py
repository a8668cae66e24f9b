"""PQN: Q-learning over many parallel games without a replay buffer or a target network
(Gallici et al., 2024): ``PQN`` (``pqn``), its LayerNorm Q-network policies (``policies``) and
the Q(lambda) returns it learns from (``returns``)."""

from sb3_snake.pqn.policies import PQNAttentionPolicy, PQNCnnPolicy, PQNPolicy, SnakeCnnExtractor
from sb3_snake.pqn.pqn import PQN

__all__ = ["PQN", "PQNAttentionPolicy", "PQNCnnPolicy", "PQNPolicy", "SnakeCnnExtractor"]
