"""The project's commands as the proof runs them: each as a job runs it (the environment of
``Work.env``, from the repository's root), its output in ``logs/<name>.log``; a long one in a
process of its own that gets SIGUSR1 (the job's stop warning) once its condition holds."""

from __future__ import annotations

import math
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from hpc.job.workload_env import REPO_DIR
from trainer.polling import poll_until
from trainer.proof.workspace import PYTHON, ProofFailed, Work


def command(work: Work, name: str, args: list[str], timeout: float = 600, **env: str) -> str:
    """Run ``python -m``-style ``args`` to the end, its output in logs/<name>.log; the output."""
    log = work.log(name)
    with log.open("w") as out:
        result = subprocess.run([PYTHON, *args], cwd=REPO_DIR, env=work.env(**env), stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout)
    output = log.read_text()
    if result.returncode != 0:
        raise ProofFailed(f"{' '.join(args[:3])} exited {result.returncode}: {last_lines(output)}")
    return output


def last_lines(output: str, count: int = 3) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip() and "it/s]" not in line]
    return " | ".join(lines[-count:])[-600:]


@dataclass
class Process:
    """A command of the proof in a process of its own, its output in logs/<name>.log; once
    ``until`` holds it gets SIGUSR1 (the job's stop warning)."""

    work: Work
    name: str
    argv: list[str]
    until: Callable[[], bool] | None = None
    env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _began: float = 0.0
    _signalled: bool = False

    def start(self) -> "Process":
        self._began = time.monotonic()
        with self.work.log(self.name).open("w") as out:
            self._process = subprocess.Popen([PYTHON, *self.argv], cwd=REPO_DIR, env=self.work.env(**self.env),
                                             stdout=out, stderr=subprocess.STDOUT)
        return self

    def running(self, timeout: float) -> bool:
        """Still running? Sends SIGUSR1 once ``until`` holds; kills it past ``timeout`` seconds."""
        assert self._process is not None
        if self._process.poll() is not None:
            return False
        if time.monotonic() - self._began > timeout:
            self.kill()
            raise ProofFailed(f"{self.name}: still running after {timeout:.0f} s (log {self.work.log(self.name)})")
        if self.until is not None and not self._signalled and self.until():
            self._process.send_signal(signal.SIGUSR1)
            self._signalled = True
        return True

    @property
    def began(self) -> float:
        """When it started (time.monotonic)."""
        return self._began

    def ended(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def kill(self) -> None:
        """Kill it if it still runs (a stage that failed leaves nothing behind)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def result(self) -> tuple[int, str, float]:
        """(exit code, its log, seconds) once it ended."""
        assert self._process is not None and self._process.returncode is not None
        return self._process.returncode, self.work.log(self.name).read_text(), time.monotonic() - self._began


def run_together(processes: list[Process], timeout: float = 900) -> list[tuple[int, str, float]]:
    """Start every process, wait for all of them (each signalled by its own ``until``)."""
    return run_when_ready(processes, [lambda: True] * len(processes), timeout)


def run_when_ready(processes: list[Process], ready: list[Callable[[], bool]], timeout: float = 900,
                   most_wait: float = 600) -> list[tuple[int, str, float]]:
    """As ``run_together``, but each process starts once its ``ready`` holds, or after ``most_wait``
    seconds whatever it says: a vLLM sizes its KV cache from what it sees allocated on its GPU while
    it starts, so one starting beside another vLLM that is starting on the same GPU can find no
    memory left for its cache (docs/training.md). ``timeout`` counts from the call for all."""
    began = time.monotonic()
    waiting = set(range(len(processes)))

    def all_ended() -> bool:
        for index in sorted(waiting):
            if ready[index]() or time.monotonic() - began > most_wait:
                processes[index].start()
                waiting.discard(index)
        started = [process for index, process in enumerate(processes) if index not in waiting]
        return not any([process.running(timeout - (process.began - began)) for process in started]) and not waiting

    try:
        poll_until(all_ended, math.inf, interval=0.5)  # a process past its timeout raises ProofFailed
    finally:
        for process in processes:
            process.kill()
    return [process.result() for process in processes]


def trainer_process(work: Work, name: str, overrides: list[str], until: Callable[[], bool] | None = None,
                    config: str = "smoke", **env: str) -> Process:
    """trainer.train with ``--config config`` (the proof's small runs: smoke) and ``overrides``, as a job runs it."""
    return Process(work, name, ["-m", "trainer.train", "--config", config, *overrides], until, dict(env))


def trainer(work: Work, name: str, overrides: list[str], until: Callable[[], bool] | None = None,
            timeout: float = 900, **env: str) -> tuple[int, str, float]:
    """trainer.train to its end: (exit code, its log, seconds)."""
    return run_together([trainer_process(work, name, overrides, until, **env)], timeout)[0]


def after_steps(work: Work, count: int) -> Callable[[], bool]:
    """A stop condition: the run has ``count`` more steps than it has now."""
    before = len(work.run.read_steps())
    return lambda: len(work.run.read_steps()) >= before + count


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    """Until ``condition`` holds; ProofFailed after ``timeout`` seconds."""
    if not poll_until(condition, timeout):
        raise ProofFailed(f"still waiting after {timeout:.0f} s")
