"""Numbers typed by people are read in ASCII digits only: the one rule every side applies.

Python's ``int()``, ``float()`` and ``str.isdigit()`` also take any Unicode digit (``٣``,
``３``, ``𝟑``) and underscores between digits (``1_0``); sbatch, bash and Slurm take only
0-9, so such a value would pass the launcher's check and fail at submission or in the job.
A time limit, a flag, a dotenv setting, a --train_arg or a sweep value is read here.
Stdlib only: the launcher, the run directory and the trainer all import it.
"""

from __future__ import annotations

import re

COUNT = re.compile(r"[0-9]+")
INTEGER = re.compile(r"[+-]?[0-9]+")
DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_count(text: str) -> bool:
    """``text`` is a whole number >= 0 written in 0-9 (no sign, no spaces)."""
    return COUNT.fullmatch(text) is not None


def ascii_int(text: str) -> int:
    """``text`` (spaces around it allowed) as an int; ValueError unless it is [+-]0-9."""
    if not INTEGER.fullmatch(text.strip()):
        raise ValueError(f"not a whole number in digits 0-9: {text!r}")
    return int(text)


def ascii_float(text: str) -> float:
    """``text`` (spaces around it allowed) as a float; ValueError unless it is a decimal
    number in 0-9 (``2e-5``, ``.5``, ``-1.0``: no inf, nan or underscores)."""
    if not DECIMAL.fullmatch(text.strip()):
        raise ValueError(f"not a number in digits 0-9: {text!r}")
    return float(text)
