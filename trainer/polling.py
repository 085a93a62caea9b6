"""Waiting for something another process does (a server answering, a file written, a process
ending): the one polling loop the package's waits share, so each says only what it waits for."""

from __future__ import annotations

import time
from typing import Callable


def poll_until(condition: Callable[[], bool], timeout: float, interval: float = 1.0) -> bool:
    """Ask ``condition`` every ``interval`` seconds until it holds (True) or ``timeout`` seconds
    have passed (False; it is asked once more at the end, so a late answer is not missed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()
