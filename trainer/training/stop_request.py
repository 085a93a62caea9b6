"""Stop requests: SIGUSR1 (the job's warning before its time limit) or SIGTERM mean "stop at
the next safe point".

``StopRequest`` is installed first thing in ``main``; it records the request, says so on stdout at
once, and wakes the event loop, so rollouts in flight can be abandoned while a step being trained
is finished and saved (docs/design.md, exit codes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from types import FrameType

log = logging.getLogger("trainer")

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class StopRequest:
    """Remembers that SIGUSR1/SIGTERM asked us to stop, and wakes the event loop.

    Installed with ``signal.signal`` as the very first thing in ``main``, so a
    signal during imports or setup is recorded instead of killing the process
    (SIGUSR1's default action). We do not use ``loop.add_signal_handler``:
    closing the loop resets the signals to their defaults, and a late second
    signal would then kill us. The handler records the request, says so on
    stdout at once (a raw write: a handler may interrupt a logging call, and
    the loop may be busy in a blocking save), and wakes the loop through
    ``call_soon_threadsafe`` (its self-pipe), as asyncio's own signal handling does.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._installed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def install(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        self._installed = True
        return self

    def reclaim(self) -> None:
        """Install the handlers again if something took them, and unblock the signals in this
        thread. Seen on an H200 in gpu_mode dedicated, where ART runs Unsloth in the trainer's
        own process: a SIGUSR1 after step 2 was never seen and the run trained to its end,
        while Python still listed the trainer's handler (likely a library's C-level sigaction
        over CPython's, which Python cannot see and ``signal.signal`` puts back; with this
        called before each step, the next run's SIGUSR1 was seen). And ART's ServiceLifecycle
        wraps SIGTERM in a handler that shuts ART's services down before calling ours, which
        would kill the step being trained that a stop promises to finish (ART's atexit
        cleanup stays)."""
        if not self._installed:
            return
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current != self._on_signal:
                log.warning("%s's handler was %r, not the trainer's: installed again", sig.name, current)
            signal.signal(sig, self._on_signal)
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS) & set(STOP_SIGNALS)
        if blocked:
            log.warning("%s blocked in the trainer's thread: unblocked", ", ".join(signal.Signals(s).name for s in blocked))

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, name: str) -> None:
        """Ask for a stop (what the signal handler does; tests may call it from any thread)."""
        if self.signal_name is None:
            self.signal_name = name
            _say(f"got {name}: stopping at the next safe point (a step being trained is finished and saved)")
        else:
            _say(f"got {name}: already stopping ({self.signal_name}); a checkpoint being saved is not cut short")
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # loop closing: the flag alone is enough then
                loop.call_soon_threadsafe(event.set)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running loop, so a signal can interrupt the rollouts of a step."""
        self._event = asyncio.Event()
        self._loop = loop
        if self.requested:
            self._event.set()

    def detach(self) -> None:
        self._loop = None
        self._event = None

    async def wait(self) -> None:
        await self.event.wait()

    @property
    def event(self) -> asyncio.Event:
        """Set when a stop is requested (valid between attach() and detach())."""
        assert self._event is not None, "attach() first"
        return self._event

    def ignore_from_now_on(self) -> None:
        """Once the exit code is decided, ignore further stop signals. Python resets
        signals that have a Python handler to their default at interpreter exit, so
        a signal during teardown would otherwise kill us and turn 75 into "killed
        by signal"; ignored signals stay ignored."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _say(message: str) -> None:
    """One log line written straight to stdout's file descriptor (safe in a signal handler)."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [trainer] {message}\n"
    with contextlib.suppress(OSError):
        os.write(sys.stdout.fileno(), line.encode())
