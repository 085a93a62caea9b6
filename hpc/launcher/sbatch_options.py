"""--sbatch_arg: extra #SBATCH lines, refused where they would undo what the launcher sets."""

from __future__ import annotations

from hpc.errors import UsageError


# sbatch options the launcher or job control sets itself: an --sbatch_arg may not undo them.
# Long name -> (short form, what to use instead).
MANAGED_SBATCH_OPTIONS = {
    "time": ("t", "--time_limit"),
    "job-name": ("J", "--job_name"),
    "nodes": ("N", "--num_nodes"),
    "gres": (None, "--gpus_per_node"),
    "gpus": ("G", "--gpus_per_node"),
    "gpus-per-node": (None, "--gpus_per_node"),
    "cpus-per-task": ("c", "--cpus_per_task"),
    "ntasks-per-node": (None, "nothing: one task per node runs the job script"),
    "partition": ("p", "--partition"),
    "account": ("A", "--account"),
    "qos": ("q", "--qos"),
    "mem": (None, "--mem"),
    "constraint": ("C", "--constraint"),
    "output": ("o", "nothing: the logs go to <run dir>/logs, where every helper looks"),
    "error": ("e", "nothing: the logs go to <run dir>/logs, where every helper looks"),
    "open-mode": (None, "nothing: logs are appended across requeues"),
    "signal": (None, "--signal_grace"),
    "dependency": ("d", "--chain, or nothing: job control chains the run's jobs"),
    "array": ("a", "one launch per run (array jobs would share one run directory)"),
    "requeue": (None, "--continuation"),
    "no-requeue": (None, "--continuation"),
}
_SHORT = {short: long for long, (short, _) in MANAGED_SBATCH_OPTIONS.items() if short}


def check_sbatch_args(lines: list[str]) -> list[str]:
    for line in lines:
        if not line.startswith("-") or any(ch in line for ch in "\r\n\0"):
            raise UsageError(
                f"invalid --sbatch_arg {line!r}: expected one sbatch option such as --mail-type=END "
                "(starting with '-', on one line)"
            )
        managed = managed_option(line)
        if managed:
            word = line.split()[0].split("=")[0]
            raise UsageError(f"--sbatch_arg {word if word.startswith('--') else word[:2]!r} is set by the launcher; use "
                             f"{MANAGED_SBATCH_OPTIONS[managed][1]} instead")
    return lines


def managed_option(line: str) -> str | None:
    """The long name of a launcher-managed sbatch option ``line`` sets, if any
    (``--time=1``, ``--time 1``, ``-t 1``, ``-t1``, and unambiguous prefixes like ``--tim``)."""
    word = line.split()[0]
    if word.startswith("--"):
        name = word[2:].split("=")[0]
        return next((long for long in MANAGED_SBATCH_OPTIONS if long == name), None) or _prefix_of(name)
    return _SHORT.get(word[1:2])


def _prefix_of(name: str) -> str | None:
    """sbatch accepts unambiguous abbreviations of long options (getopt_long)."""
    if len(name) < 3:
        return None
    matches = [long for long in MANAGED_SBATCH_OPTIONS if long.startswith(name)]
    return matches[0] if len(matches) == 1 else None
