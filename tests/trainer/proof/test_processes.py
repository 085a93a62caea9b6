"""The proof's commands in processes of their own, each stopped by SIGUSR1 once its own condition holds
(trainer/proof/processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.proof.processes import Process, run_together, run_when_ready
from trainer.proof.workspace import ProofFailed, Work

STOPPABLE = ("import signal, sys, time\n"
             "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(75))\n"
             "print('started', flush=True)\n"
             "time.sleep(60)\n")
WRITES_STARTED = ("import pathlib, sys, time\n"
                  "time.sleep(0.5)\n"
                  "pathlib.Path(sys.argv[1]).write_text(str(time.time()))\n")

def test_each_process_gets_sigusr1_once_its_own_condition_holds(tmp_path: Path) -> None:
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    work = Work(tmp_path)
    flag = tmp_path / "stop-first"

    def first_started_then_stop_it() -> bool:
        started = "started" in work.log("first").read_text()
        if started:
            flag.touch()
        return started

    first = Process(work, "first", [str(script)], until=flag.exists)
    second = Process(work, "second", [str(script)], until=first_started_then_stop_it)
    (code_a, log_a, _), (code_b, _, _) = run_together([first, second], timeout=60)
    assert (code_a, code_b) == (75, 75) and "started" in log_a


def test_a_process_past_its_time_is_killed_and_named(tmp_path: Path) -> None:
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    with pytest.raises(ProofFailed, match="slow: still running after 1 s"):
        run_together([Process(Work(tmp_path), "slow", [str(script)])], timeout=1)


def test_a_process_starts_only_once_its_condition_holds(tmp_path: Path) -> None:
    """vLLMs sharing a GPU must not start together: the second waits for the first's record."""
    script = tmp_path / "writes.py"
    script.write_text(WRITES_STARTED)
    work = Work(tmp_path)
    marks = [tmp_path / "first.mark", tmp_path / "second.mark"]
    first = Process(work, "first", [str(script), str(marks[0])])
    second = Process(work, "second", [str(script), str(marks[1])])
    results = run_when_ready([first, second], [lambda: True, marks[0].exists], timeout=60)
    assert [code for code, _, _ in results] == [0, 0]
    assert second.began >= first.began + 0.5 and float(marks[1].read_text()) > float(marks[0].read_text())


def test_a_process_whose_condition_never_holds_starts_after_the_longest_wait(tmp_path: Path) -> None:
    script = tmp_path / "writes.py"
    script.write_text(WRITES_STARTED)
    work = Work(tmp_path)
    never = Process(work, "never", [str(script), str(tmp_path / "never.mark")])
    [(code, _, _)] = run_when_ready([never], [lambda: False], timeout=60, most_wait=1)
    assert code == 0 and (tmp_path / "never.mark").is_file()
