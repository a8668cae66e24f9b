"""A training run and what surrounds it: config, hyperparameter files, resume, callbacks,
run folders, W&B tracking, greedy evaluation, plots, and hyperparameter search (``tuning``)."""
