"""The run directory and what reads it (checkpoints, ownership, accounting, report)."""
