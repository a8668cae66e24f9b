"""The networks both learners build on: the attention features extractor (``attention``), the
convolutional one (``cnn``) and the Q-network that runs them in the optimization layer's context
(``q_network``)."""

from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.networks.cnn import SnakeCnnExtractor
from sb3_snake.networks.q_network import SnakeQNetwork, with_fused_adam

__all__ = ["SnakeAttentionExtractor", "SnakeCnnExtractor", "SnakeQNetwork", "with_fused_adam"]
