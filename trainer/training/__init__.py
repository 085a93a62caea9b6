"""Training: the loop, one training step, validation, preflight, the config."""
