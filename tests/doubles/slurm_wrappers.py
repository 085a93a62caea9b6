"""Slurm answering badly, as a real cluster's does for moments: wrappers first on PATH.

``install(folder)`` writes ``squeue``, ``sacct``, ``sbatch``, ``scontrol`` and ``scancel`` scripts into
``folder/bin`` that run the real command unless ``$HPC_FAULT_DIR/<command>`` says otherwise; a test or
the drill (bench/slurm_answer_drill.py) switches faults on and off by writing those files while
the run goes. The launch gets ``PATH`` and ``HPC_FAULT_DIR`` (``Faults.env``), and sbatch's default
``--export=ALL`` carries both into the jobs and into every job their hooks submit, so the jobs' own
hooks meet the same faults. A fault file holds one mode:

- ``empty``: print nothing, exit 0 (squeue, sacct, ``scontrol show``: "no such job");
- ``fail``: "Socket timed out on send/recv operation", exit 1; ``fail:N``: that N more times, then pass;
- ``fail-requeue`` (scontrol): only ``scontrol requeue`` fails;
- ``hide:ID,ID`` (sacct): the real answer without these jobs' lines (accounting lagging behind).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

FAULT_DIR = "HPC_FAULT_DIR"  # the wrappers' folder of faults, in the jobs' environment too

COMMANDS = ("squeue", "sacct", "sbatch", "scontrol", "scancel")

WRAPPER = r"""#!/bin/bash
# {name}, as a cluster's Slurm answers for a moment: tests/doubles/slurm_wrappers.py
real={real}
ctl="${{HPC_FAULT_DIR:-/nonexistent}}/{name}"
mode=$(cat "$ctl" 2>/dev/null || true)
fail() {{ echo "{name}: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1; }}
case $mode in
  empty) [[ {name} == scontrol && ${{1:-}} != show ]] || exit 0 ;;
  fail) fail ;;
  fail:*) n=${{mode#fail:}}; if ((n > 0)); then echo "fail:$((n - 1))" > "$ctl.$$" && mv "$ctl.$$" "$ctl"; fail; fi ;;
  fail-requeue) [[ ${{1:-}} != requeue ]] || fail ;;
  hide:*) hidden=${{mode#hide:}}; out=$("$real" "$@") || exit $?
    grep -v -E "^(${{hidden//,/|}})([^0-9]|$)" <<<"$out" || true; exit 0 ;;
esac
exec "$real" "$@"
"""


@dataclass(frozen=True)
class Faults:
    """One run's faults: its folder of mode files, and the environment that reaches its jobs."""

    folder: Path
    bin: Path

    def set(self, command: str, mode: str) -> None:
        temporary = self.folder / f".{command}.tmp"
        temporary.write_text(mode + "\n")
        os.replace(temporary, self.folder / command)

    def clear(self, command: str) -> None:
        (self.folder / command).unlink(missing_ok=True)

    def mode(self, command: str) -> str:
        path = self.folder / command
        return path.read_text().strip() if path.exists() else ""

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        return {**env, "PATH": f"{self.bin}:{env.get('PATH', '')}", FAULT_DIR: str(self.folder)}


def install(folder: Path) -> Faults:
    """The wrappers in ``folder/bin``, their mode files in ``folder/faults`` (none: every command real)."""
    bin_dir, faults = folder / "bin", folder / "faults"
    bin_dir.mkdir(parents=True, exist_ok=True)
    faults.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = shutil.which(name, path=os.environ.get("PATH", "").replace(str(bin_dir), ""))
        if real is None:
            raise RuntimeError(f"{name} is not on PATH: the wrappers need the real Slurm behind them")
        script = bin_dir / name
        script.write_text(WRAPPER.format(name=name, real=real))
        script.chmod(0o755)
    return Faults(faults, bin_dir)
