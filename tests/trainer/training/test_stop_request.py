"""The trainer's stop request keeps its signals (trainer.training.stop_request.StopRequest.reclaim).

On an H200 in gpu_mode dedicated, where ART runs Unsloth inside the trainer's process, a
SIGUSR1 after step 2 was never seen and the run trained to its end (the GPU proof's
dedicated stage). Before each step the trainer takes its handlers back and unblocks them.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Iterator

import pytest

from trainer.training.stop_request import STOP_SIGNALS, StopRequest


@pytest.fixture
def saved_signals() -> Iterator[None]:
    """Whatever the test does to the stop signals is undone after it."""
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_handler_taken_by_a_library_is_taken_back_and_the_signal_is_seen(saved_signals, caplog) -> None:
    stop = StopRequest().install()
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # what a library loaded in the process might do
    with caplog.at_level(logging.WARNING, logger="trainer"):
        stop.reclaim()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert wait_until(lambda: stop.requested) and stop.signal_name == "SIGUSR1"
    assert "SIGUSR1's handler was <Handlers.SIG_IGN: 1>, not the trainer's: installed again" in caplog.text


def test_a_blocked_stop_signal_is_unblocked_and_said_so(saved_signals, caplog) -> None:
    stop = StopRequest().install()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    with caplog.at_level(logging.WARNING, logger="trainer"):
        stop.reclaim()
    assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert "SIGUSR1 blocked in the trainer's thread: unblocked" in caplog.text


def test_handlers_never_installed_are_not_installed_by_reclaim(saved_signals) -> None:
    before = signal.getsignal(signal.SIGTERM)
    StopRequest().reclaim()
    assert signal.getsignal(signal.SIGTERM) is before


def test_untouched_handlers_are_reclaimed_silently(saved_signals, caplog) -> None:
    stop = StopRequest().install()
    with caplog.at_level(logging.WARNING, logger="trainer"):
        stop.reclaim()
    assert caplog.text == ""
