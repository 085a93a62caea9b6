"""The job shell's waits under a stop signal (sbatch/_shell_hooks.sh.j2 ``hpc_gone``, sbatch/_job_control.sh.j2).

Slurm's TERM reaches the job shell and every process of the job at once. A child that dies of it
(the lease keeper) can die just as the shell's trap interrupts its ``wait``; bash then loses that
child's status, and a later ``wait`` on it blocks for as long as another child (the signal relay)
lives. A drill here: a shell shaped like job control, TERM sent to its whole process group, many
times at once; every one must reach its end. With ``wait`` on the keeper in place of ``hpc_gone``
about one in twenty hung on this machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TRIALS = 24


def hpc_gone() -> str:
    """The job script's own ``hpc_gone`` (plain bash in the template)."""
    found = re.search(r"^hpc_gone\(\) \{.*?^\}$", (REPO / "sbatch" / "_shell_hooks.sh.j2").read_text(), re.M | re.S)
    assert found is not None
    return found.group(0)


WORKLOAD = """import signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
open(sys.argv[1], "w").close()
while not stop:
    time.sleep(0.01)
time.sleep(0.2)
sys.exit(75)
"""


def job_shell(tmp_path: Path) -> Path:
    """Job control's shape: a workload that stops 0.2 s after TERM (exit 75), a keeper that dies of
    TERM at once, a relay-like child that outlives them, the wait loop, then the keeper polled away."""
    script, workload = tmp_path / "job.sh", tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    script.write_text(f"""{hpc_gone()}
trap 'kill -TERM "$workload" 2>/dev/null || true' TERM
{sys.executable} {workload} "$1" &
workload=$!
{sys.executable} -c 'import time; time.sleep(20)' &
keeper=$!
(trap '' TERM; exec sleep 20) &
relay=$!
rc=""
while :; do
  status=0
  wait "$workload" || status=$?
  if ((status == 127)) && [[ -n $rc ]]; then break; fi
  rc=$status
  ((status > 128)) && kill -0 "$workload" 2>/dev/null || break
done
kill "$keeper" 2>/dev/null || true
hpc_gone "$keeper" 5
echo "ended with $rc" > "$2"
kill -KILL "$relay"
""")
    return script


def test_a_job_shell_stopped_by_a_term_to_all_its_processes_reaches_its_end_every_time(tmp_path):
    script = job_shell(tmp_path)
    shells = []
    for trial in range(TRIALS):
        shells.append(subprocess.Popen(["bash", str(script), str(tmp_path / f"ready{trial}"), str(tmp_path / f"end{trial}")],
                                       stdout=subprocess.DEVNULL, start_new_session=True))
    for trial, shell in enumerate(shells):
        deadline = time.monotonic() + 30
        while not (tmp_path / f"ready{trial}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (tmp_path / f"ready{trial}").exists(), f"trial {trial}: the workload did not start"
        os.killpg(shell.pid, signal.SIGTERM)  # as Slurm's cancel: the shell and every process of the job
    ended = []
    for trial, shell in enumerate(shells):
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(timeout=10)
        end = tmp_path / f"end{trial}"
        ended.append(end.read_text().strip() if end.exists() else "hung")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert all(line in ("ended with 75", "ended with 143") for line in ended), ended
