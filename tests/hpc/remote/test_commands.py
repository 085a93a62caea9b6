"""A session from a laptop against a real login node (sshd on 127.0.0.1) and the local Slurm:
the same commands with --remote, their output and exit codes back, one login for all of them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from hpc.synced_checkout import MARKER, SETUP, parse_marker
from tests.hpc.remote.conftest import DEST, Laptop, checkout_with_venv, commit, head
from tests.hpc.sshd_helpers import Sshd
from tests.scripts.slurm_util import cancel, unique_prefix, wait_final

# The step double trains 2 steps of a second each: a real job that runs and finishes in seconds.
SMOKE = ("--cluster", "local", "--time_limit", "3", "--config", "smoke", "--entrypoint", "tests.doubles.step_trainer",
         "--gpus_per_node", "0", "--cpus_per_task", "1", "--train_arg", "steps=2", "--train_arg", "step_seconds=1")


def submitted_job(stdout: str) -> str:
    match = re.search(r"submitted job (\d+) on local", stdout)
    assert match, stdout
    return match.group(1)


@pytest.mark.slurm
def test_a_session_from_the_laptop_syncs_launches_watches_and_brings_the_report_back_with_one_login(
        slurm, laptop: Laptop, login_node: Sshd, tmp_path: Path):
    checkout, runs, name = checkout_with_venv(tmp_path / "checkout"), tmp_path / "runs", unique_prefix("remote")
    where = ("--remote", DEST, "--remote_dir", str(checkout))
    logins_before = login_node.logins()

    # 1. A dry run: the first use syncs the committed tree, runs setup.sh there, then the command.
    dry = laptop.python("-m", "hpc.launch", *where, *SMOKE, "--job_name", name, "--runs_dir", str(runs), "--dry_run")
    assert dry.returncode == 0, dry.stderr
    assert "running bash setup.sh" in dry.stderr and "[setup] done" in dry.stderr
    assert re.search(r"sbatch --test-only: ok", dry.stdout) and not runs.exists()
    assert parse_marker((checkout / MARKER).read_text())["commit"] == head(laptop.repo)

    # 2. The launch: a real job, from the synced checkout, that runs and finishes.
    launched = laptop.python("-m", "hpc.launch", *where, *SMOKE, "--job_name", name, "--runs_dir", str(runs))
    assert launched.returncode == 0, launched.stderr
    assert "synced" not in launched.stderr and "setup.sh" not in launched.stderr  # nothing changed: neither again
    job = submitted_job(launched.stdout)
    try:
        assert wait_final([job], timeout=150)[job]["State"] == "COMPLETED"
    finally:
        cancel([job])
    ledger = [json.loads(line) for line in (runs / name / "ledger.jsonl").read_text().splitlines()]
    (submit,) = [record for record in ledger if record["event"] == "submit"]
    assert submit["git_commit"] == head(laptop.repo)  # the laptop's HEAD, though the checkout has no .git
    assert f"cd {checkout}\n" in Path(submit["script"]).read_text()  # the job ran from the synced checkout
    assert "--remote" not in " ".join(submit["argv"])

    # 3. status.sh shows it; hpc.accounting accounts for it.
    status = laptop.script("status.sh", *where, "--runs_dir", str(runs), "--run", name)
    assert status.returncode == 0, status.stderr
    (line,) = [line for line in status.stdout.splitlines() if line.startswith(f"{name} ")]
    assert line.split()[1:3] == [job, "COMPLETED"] and "2/2" in line and "finished" in line, status.stdout
    accounting = laptop.python("-m", "hpc.accounting", name, "--runs_dir", str(runs), *where)
    assert accounting.returncode == 0 and job in accounting.stdout, accounting.stderr

    # 4. The report is written there and comes back with its pictures.
    out = tmp_path / "report-here"
    report = laptop.python("-m", "hpc.report", name, "--runs_dir", str(runs), *where, "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert report.stdout.strip().splitlines()[-1] == str(out / "report.md")
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (out / "report.md").read_text())
    there = runs / name / "report"  # written on the cluster, as there, and brought back whole
    assert pictures and all((out / picture).read_bytes() == (there / picture).read_bytes() for picture in pictures)
    assert (out / "report.md").read_text() == (there / "report.md").read_text()

    # 5. The login node's own error comes back as it is, with its exit code.
    bad = laptop.python("-m", "hpc.launch", *where, "--job_name", name, "--time_limit", "soon", "--dry_run")
    assert bad.returncode == 2 and "soon" in bad.stderr and "Traceback" not in bad.stderr

    # 6. A new commit: synced again, a file it removed is gone, the checkout's .venv and runs stay.
    (laptop.repo / "docs" / "remote.md").unlink()
    new_head = commit(laptop.repo, "without docs/remote.md")
    again = laptop.python("-m", "hpc.accounting", name, "--runs_dir", str(runs), *where)
    assert again.returncode == 0 and "synced" in again.stderr and "setup.sh" not in again.stderr, again.stderr
    assert not (checkout / "docs" / "remote.md").exists() and (checkout / ".venv" / "bin" / "python").exists()
    assert parse_marker((checkout / MARKER).read_text())["commit"] == new_head and (checkout / SETUP).exists()

    # 7. Uncommitted changes go only when asked, and the ledger would say so.
    (laptop.repo / "README.md").write_text("A change not yet committed.\n")
    try:
        synced = laptop.python("-m", "hpc.accounting", name, "--runs_dir", str(runs), *where, "--remote_uncommitted")
        assert synced.returncode == 0, synced.stderr
        assert parse_marker((checkout / MARKER).read_text())["commit"] == f"{new_head}-dirty"
        assert (checkout / "README.md").read_text() == "A change not yet committed.\n"
    finally:
        subprocess.run(["git", "-C", str(laptop.repo), "checkout", "README.md"], check=True)

    # All of it through one login; then the connection is closed on request.
    assert login_node.logins() - logins_before == 1
    closed = laptop.close()
    assert closed.returncode == 0 and f"closed the connection to {DEST}" in closed.stdout
    assert laptop.close().stdout.strip() == f"no open connection to {DEST}"


def test_uncommitted_changes_are_refused_in_one_line_before_any_connection(laptop: Laptop, tmp_path: Path):
    readme = laptop.repo / "README.md"
    original = readme.read_text()
    readme.write_text(original + "\nA change not yet committed.\n")
    try:
        refused = laptop.python("-m", "hpc.launch", "--remote", DEST, "--remote_dir", str(tmp_path / "checkout"),
                                "--job_name", "x", "--time_limit", "5", "--dry_run")
    finally:
        readme.write_text(original)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "uncommitted changes (1 file(s), e.g. README.md): commit them, or add --remote_uncommitted" in refused.stderr
    assert not (tmp_path / "checkout").exists() and not (laptop.home / ".ssh" / "hpc-remote").exists()


def test_help_of_each_command_lists_the_remote_flags(laptop: Laptop):
    for argv in (["-m", "hpc.launch", "-h"], ["-m", "hpc.report", "-h"], ["-m", "hpc.accounting", "-h"]):
        shown = laptop.python(*argv)
        assert shown.returncode == 0 and "--remote DEST" in shown.stdout and "--remote_dir DIR" in shown.stdout
        assert shown.stdout.index("--remote DEST") > shown.stdout.index("usage:")  # after the command's own
    for script in ("status.sh", "scancelall.sh"):
        shown = laptop.script(script, "--help")
        assert shown.returncode == 0 and shown.stdout.startswith("Usage:") and "--remote DEST" in shown.stdout


@pytest.mark.parametrize("out", ["existing-file", "/dev/null", "existing-file/inside", ""])
def test_report_out_that_cannot_be_a_folder_is_refused_before_any_connection(tmp_path, monkeypatch, capsys, out):
    from hpc.remote.commands import run_command

    (tmp_path / "existing-file").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code = run_command("hpc.report", ["agent_008", "--remote", "nobody@unreachable.invalid", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hpc.report: error: bad --out") and err.count("\n") == 1, err
    assert (tmp_path / "existing-file").read_text() == "mine\n" and not (tmp_path / "home").exists()


def test_a_mistyped_remote_flag_is_refused_before_any_sync(tmp_path, monkeypatch, capsys):
    from hpc.remote.commands import run_command

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code = run_command("hpc.launch", ["--remote", "nobody@unreachable.invalid", "--remote_di", str(tmp_path / "d"),
                                      "--job_name", "x", "--time_limit", "5", "--dry_run"])
    assert code == 2 and "unknown remote flag '--remote_di'" in capsys.readouterr().err
    assert not (tmp_path / "home").exists() and not (tmp_path / "d").exists()
