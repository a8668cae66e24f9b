"""What every layer shares: user errors, the machine (``system``), safe file writes (``paths``),
and the one timing harness (``timing``). Nothing here knows about Snake or DQN."""
