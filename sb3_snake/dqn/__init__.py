"""The DQN: ``SnakeDQN`` (``snake_dqn``), its policies (``policies``) and attention extractor,
replay buffers, the rollout loop on tensors (``rollout``), TD targets and reward shaping
(``targets``), symmetry augmentation, the save format of both learners' files (``save_format``)
and what a file may hold (``save_schema``), and the gradient step (``update``)."""
