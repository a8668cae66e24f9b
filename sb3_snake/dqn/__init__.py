"""The DQN: ``SnakeDQN`` (``snake_dqn``), its policies and attention extractor, replay buffers,
TD targets and reward shaping, symmetry augmentation, and the gradient step (``update``)."""
