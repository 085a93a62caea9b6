"""hpc.slurm.calls: how each command is run (its environment, its failures as one line), and the
calls against the project's real local Slurm."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hpc.slurm import calls
from hpc.slurm.states import QUEUED, JobState
from tests.scripts.slurm_util import cancel, unique_prefix


def test_a_job_asks_without_its_own_slurm_variables_but_keeps_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("HPC_RUN_DIR", "/r")
    env = calls.command_env(in_job=True)
    assert "SLURM_JOB_ID" not in env and env["SLURM_CONF"] == "/etc/slurm/slurm.conf" and env["HPC_RUN_DIR"] == "/r"
    assert calls.command_env()["SLURM_JOB_ID"] == "5", "the login side keeps its environment"


def test_every_command_prints_standard_times_in_utc_whatever_the_users_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    for in_job in (False, True):
        env = calls.command_env(in_job)
        assert (env["SLURM_TIME_FORMAT"], env["TZ"]) == ("standard", "UTC0")


def fake_tool(directory: Path, name: str, body: str) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


def test_a_missing_slow_or_failing_command_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(calls.SlurmMissing, match="^'squeue' not found: the Slurm client commands are not installed"):
        calls.queue(user="alice")
    fake_tool(tmp_path, "sacct", "exec /bin/sleep 5")
    with pytest.raises(calls.SlurmTimeout, match=r"^'sacct' did not answer within 1 s \(is the Slurm controller up\?\)$"):
        calls.job_runs(["5"], timeout=1)
    fake_tool(tmp_path, "sacct", "echo 'sacct: error: Problem talking to the database' >&2; exit 1")
    with pytest.raises(calls.SlurmFailed, match="^sacct failed: sacct: error: Problem talking to the database$"):
        calls.job_runs(["5"])


def test_a_job_that_left_the_queue_is_not_in_it_rather_than_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = (Path(__file__).parents[2] / "fixtures/slurm/22.05.8/squeue_one_job_gone.stderr").read_text().strip()
    monkeypatch.setenv("PATH", str(tmp_path))
    fake_tool(tmp_path, "squeue", f"echo '{stderr}' >&2; exit 1")
    assert calls.queue_states(["5"]) == {}
    fake_tool(tmp_path, "squeue", "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1")
    with pytest.raises(calls.SlurmFailed, match="Unable to contact"):
        calls.queue_states(["5"])


def test_only_ids_slurm_can_parse_are_asked_about_once_each() -> None:
    assert calls.slurm_ids(["12", "local", "3", "12", "", "7_2", "8+1", "x_1"]) == ["3", "12", "7_2", "8+1"]
    assert calls.queue([]) == [] and calls.job_runs(["local"]) == []


def test_the_commands_are_the_documented_ones() -> None:
    assert calls.sbatch_command(Path("/r/s.sbatch"), "afterany:5", ("--gres=gpu:2",)) == [
        "sbatch", "--parsable", "--gres=gpu:2", "--dependency=afterany:5", "/r/s.sbatch"]
    assert calls.runs_argv(["3", "12"])[:3] == ["sacct", "-X", "-D"] and "3,12" in calls.runs_argv(["3", "12"])


# -- the real Slurm -------------------------------------------------------------------------------------


@pytest.mark.slurm
def test_submit_see_show_cancel_and_account_a_real_job(slurm: None, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    name = unique_prefix("calls") + " with space"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=2\n#SBATCH -J '{name}'\n#SBATCH -o /dev/null\nsleep 120\n")
    assert calls.test_only(script.read_text()).ok
    job = calls.submit(script)
    try:
        deadline = time.monotonic() + 60
        while calls.queue_states([job]).get(job) != JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.5)
        (queued,) = calls.queue([job])
        assert queued.state is JobState.RUNNING and queued.name == name and queued.limit_seconds == 120
        shown = calls.show_job(job)
        assert shown is not None and shown.restarts == 0 and shown.end_time is not None
        assert shown.fields["JobName"] == name
        calls.cancel([job])
        while calls.queue_states([job]).get(job) in QUEUED and time.monotonic() < deadline:
            time.sleep(0.5)
        assert calls.queue_states([job]) == {}
        while not [r for r in calls.job_runs([job]) if r.state is JobState.CANCELLED] and time.monotonic() < deadline:
            time.sleep(0.5)
        (row,) = calls.job_runs([job])
        assert row.state is JobState.CANCELLED and row.start is not None and row.end is not None
    finally:
        cancel([job])


@pytest.mark.slurm
def test_slurm_refusing_a_job_is_one_line_with_its_reason(slurm: None, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\n#SBATCH --gres=gpu:9\ntrue\n")
    answer = calls.test_only(script.read_text())
    assert not answer.ok and "node configuration is not available" in answer.message
    with pytest.raises(calls.SlurmFailed, match=r"^sbatch of .*job.sh failed \(exit 1\): .*configuration"):
        calls.submit(script)
    assert calls.show_job("4000000") is None


# an argument list that starts with a Slurm command (not an index such as filters["sbatch"])
SLURM_ARGV = re.compile(r"""(?<![\w\])])\[\s*["'](sbatch|squeue|sacct|scontrol|scancel|sinfo)["']""")


def test_no_python_outside_hpc_slurm_runs_a_slurm_command() -> None:
    """One place calls Slurm (docs/design.md, "The Slurm layer"): the launcher, the job's hooks,
    the trainer, the monitor and the benches all go through hpc/slurm/calls.py."""
    repo = Path(__file__).resolve().parents[3]
    sources = [path for folder in ("hpc", "trainer", "bench") for path in (repo / folder).rglob("*.py")
               if "slurm" not in path.relative_to(repo).parts[1:2]] + list((repo / "scripts").glob("*.py"))
    found = [f"{path.relative_to(repo)}: {match.group(0)}" for path in sources
             for match in SLURM_ARGV.finditer(path.read_text())]
    assert found == []
