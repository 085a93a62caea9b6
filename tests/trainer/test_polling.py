"""trainer/polling.py: the one wait loop: True as soon as the condition holds, False once the time
is up, the condition asked a last time at the end so that a late answer counts."""

from __future__ import annotations

import time

from trainer.polling import poll_until


def test_a_condition_that_comes_to_hold_ends_the_wait_at_once() -> None:
    asked = []
    began = time.monotonic()
    assert poll_until(lambda: asked.append(1) or len(asked) >= 3, timeout=10, interval=0.01)
    assert len(asked) == 3 and time.monotonic() - began < 5


def test_a_condition_that_never_holds_is_false_after_the_timeout() -> None:
    began = time.monotonic()
    assert not poll_until(lambda: False, timeout=0.2, interval=0.05)
    assert 0.2 <= time.monotonic() - began < 5


def test_the_condition_is_asked_once_more_when_the_time_is_up() -> None:
    answers = iter([False, True])
    assert poll_until(lambda: next(answers), timeout=0.05, interval=0.2)  # asked, slept past the time, asked again
