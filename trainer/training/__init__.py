"""Training: the command (train), the loop and its concerns (stop_request, environment, backend,
rollouts, progress, boundary, exits), one training step, validation, preflight, the config."""
