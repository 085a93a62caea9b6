"""Evaluation: the engine (a model on a split, judged) and `python -m trainer.eval`."""
