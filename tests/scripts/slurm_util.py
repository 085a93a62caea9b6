"""Helpers for the bash-helper tests: run a script, submit plain jobs, wait for
accounting, and stand-in Slurm commands for tests that must not need a cluster.
Each test uses its own job-name prefix so concurrent tests on the same cluster
never see (or cancel) each other's jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
SLURM_TOOLS = {"sacct", "squeue", "sinfo", "scancel", "scontrol", "sbatch", "srun", "salloc", "sacctmgr",
               "sstat", "sprio", "sshare", "sreport", "sdiag", "strigger", "sattach", "sbcast", "scrontab"}


def unique_prefix(tag: str) -> str:
    """A job-name prefix no other test run uses."""
    return f"t{tag}{uuid.uuid4().hex[:8]}"


def run_script(name: str, *args: str, env: dict[str, str] | None = None, input: str | None = None,
               timeout: float = 60, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    """Run scripts/<name> with bash, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["bash", str(SCRIPTS / name), *args], capture_output=True, text=True,
                          env=full_env, input=input, timeout=timeout, cwd=cwd)


def sbatch(*args: str) -> str:
    """Submit with --parsable and return the job id."""
    result = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def sacct_row(job_id: str, fields: str = "State,ExitCode,AllocTRES,JobName") -> dict[str, str]:
    """The allocation's accounting record (empty until slurmdbd has it)."""
    result = subprocess.run(["sacct", "-X", "-n", "-P", "--delimiter=\x1f", "-j", job_id, "-o", fields],
                            capture_output=True, text=True, timeout=30)
    lines = [line for line in result.stdout.split("\n") if "\x1f" in line]
    if not lines:
        return {}
    row = dict(zip(fields.split(","), lines[-1].split("\x1f")))
    if "State" in row:
        row["State"] = row["State"].split()[0]  # "CANCELLED by 0" -> CANCELLED
    return row


def wait_final(job_ids: list[str], timeout: float = 180) -> dict[str, dict[str, str]]:
    """Wait until accounting has every job in a final state (and its real name:
    right after the start sacct may briefly call a job 'allocation'). The
    cluster is shared, so a job may wait for a node a while."""
    deadline = time.monotonic() + timeout
    rows: dict[str, dict[str, str]] = {}
    while time.monotonic() < deadline:
        rows = {job: sacct_row(job) for job in job_ids}
        if all(row.get("State") in FINAL_STATES and row.get("JobName") != "allocation" for row in rows.values()):
            return rows
        time.sleep(0.5)
    raise AssertionError(f"jobs did not finish within {timeout}s: {rows}")


def wait_running(job_ids: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%T"],
                             capture_output=True, text=True, timeout=30).stdout
        states = out.split()
        if len(states) == len(job_ids) and all(s == "RUNNING" for s in states):
            return
        time.sleep(0.3)
    raise AssertionError(f"jobs {job_ids} not all running within {timeout}s: {states}")


def cancel(job_ids: list[str]) -> None:
    """Cancel only these jobs (ours); already finished ones are fine."""
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30)


# --- without a cluster ---------------------------------------------------------------------


def bin_without_slurm(directory: Path) -> Path:
    """A directory of links to every command in /usr/local/bin, /usr/bin and
    /bin except the Slurm client commands: a PATH of a machine without Slurm."""
    directory.mkdir(parents=True, exist_ok=True)
    for system_dir in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(system_dir):
            continue
        for name in os.listdir(system_dir):
            if name not in SLURM_TOOLS and not (directory / name).exists():
                (directory / name).symlink_to(os.path.join(system_dir, name))
    return directory


# A stand-in Slurm command. Every call is appended to $FAKE_SLURM_LOG as a JSON
# list. squeue prints $FAKE_SLURM_DIR/jobs.json through its -o format (%i, %T,
# ... are keys of each job); sacct answers -j queries from states.json ({id:
# state}, or {id: {field: value}} or a list of those, one per run of a requeued
# job), one row per run with the -o fields (JobID, State, the rest from the dict
# or empty), and prints nothing otherwise; other commands just succeed.
_FAKE_TOOL = textwrap.dedent("""\
    #!{python}
    import json, os, re, sys
    name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
    base = os.environ["FAKE_SLURM_DIR"]
    with open(os.path.join(base, "calls.jsonl"), "a") as log:
        log.write(json.dumps([name, *args]) + "\\n")
    def load(file, default):
        path = os.path.join(base, file)
        return json.load(open(path)) if os.path.exists(path) else default
    if name == "squeue":
        fmt = args[args.index("-o") + 1]
        for job in load("jobs.json", []):
            sys.stdout.write(re.sub("%([a-zA-Z])", lambda m: str(job.get(m.group(1), "")), fmt) + "\\n")
    elif name == "sacct" and "-j" in args:
        states = load("states.json", {{}})
        fields = args[args.index("-o") + 1].split(",") if "-o" in args else ["JobID", "State"]
        for job in args[args.index("-j") + 1].split(","):
            runs = states.get(job, [])
            for run in runs if isinstance(runs, list) else [runs]:
                run = run if isinstance(run, dict) else {{"State": run}}
                values = {{"JobID": job, **run}}
                sys.stdout.write("\\x1f".join(str(values.get(f, "")) for f in fields) + "\\n")
    """)


def fake_slurm(directory: Path, jobs: list[dict] | None = None, states: dict[str, str] | None = None,
               tools: tuple[str, ...] = ("squeue", "sacct", "scontrol", "scancel")) -> dict[str, str]:
    """A PATH with stand-ins for `tools` and no real Slurm; returns the env to run with.
    Calls land in <directory>/calls.jsonl (see calls())."""
    bin_dir = bin_without_slurm(directory / "bin")
    for tool in tools:
        (bin_dir / tool).write_text(_FAKE_TOOL.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    (directory / "jobs.json").write_text(json.dumps(jobs or []))
    (directory / "states.json").write_text(json.dumps(states or {}))
    return {"PATH": str(bin_dir), "FAKE_SLURM_DIR": str(directory)}


def calls(directory: Path) -> list[list[str]]:
    """The fake Slurm commands run so far, each as [name, *args]."""
    log = directory / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
