"""hpc/run/monitor/status_cache.py with runs.py: what status.sh reads again when one run changes,
that a run that cannot be read is shown and named (rundirs.py: a ledger that loops, a closed folder),
and that a kept row is never stale, whatever path changed the run. Slurm's stand-ins
(tests/scripts/slurm_util.py) answer squeue and sacct and record each call."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from hpc.run import ledger
from hpc.run.monitor import runs, runs_table, status_cache
from hpc.run.monitor.rundirs import run_dirs
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import write_record
from tests.doubles.step_trainer import safetensors_bytes
from tests.scripts.slurm_util import calls, fake_slurm

STEP = {"step": 1, "started": "2026-11-01T00:00:00+00:00", "seconds": 10.0, "ended": "2026-11-01T00:00:10+00:00",
        "job_id": "5", "reward_mean": 0.5, "reward_spread": 0.2}
ENDED = {"State": "COMPLETED", "Submit": "2026-11-01T00:00:00", "Start": "2026-11-01T00:00:00",
         "End": "2026-11-01T00:10:00", "ElapsedRaw": "600", "NNodes": "1", "AllocTRES": "gres/gpu=1"}


@pytest.fixture
def slurm_stand_in(tmp_path, monkeypatch):
    """squeue and sacct stand-ins on PATH: jobs 5 and 6 ended in accounting, none queued."""
    env = fake_slurm(tmp_path / "fake", states={"5": ENDED, "6": ENDED})
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("FAKE_SLURM_DIR", env["FAKE_SLURM_DIR"])
    monkeypatch.setattr(status_cache, "RACY_NS", 0)  # files written a moment ago may be kept (one test sets it back)
    return tmp_path / "fake"


def finished_run(runs_dir: Path, name: str, job: str, steps: int = 3) -> RunDir:
    run = RunDir(runs_dir / name)
    write_record(run, "submit", job_id=job, time="2026-11-01T00:00:00+00:00")
    write_record(run, "job_start", job_id=job, step=0, restart_count=0, time="2026-11-01T00:00:00+00:00")
    for step in range(1, steps + 1):
        run.append_step({**STEP, "step": step, "job_id": job})
    run.write_progress({"step": steps, "total_steps": 10})
    return run


def status(runs_dir: Path, capsys) -> str:
    """One status.sh call's runs table (the queue part left out)."""
    assert runs_table.status_view(getpass.getuser(), runs_dir, "") == 0
    return capsys.readouterr().out.split("\n\n", 1)[1]


def asked(fake: Path) -> list[list[str]]:
    """The job ids of each sacct call so far, and forget the calls."""
    found = [c[c.index("-j") + 1].split(",") for c in calls(fake) if c[0] == "sacct"]
    (fake / "calls.jsonl").unlink(missing_ok=True)
    return found


@pytest.fixture
def read_runs(monkeypatch):
    """The runs whose files status.sh read, call by call (each run's step records)."""
    seen: list[str] = []
    original = runs.accounting.RunFiles.read

    def spy(run, records=None):
        seen.append(run.name)
        return original(run, records)

    monkeypatch.setattr(runs.accounting.RunFiles, "read", spy)
    return seen


def test_a_second_call_reads_no_unchanged_run_asks_sacct_nothing_and_shows_the_same_table(
        tmp_path, slurm_stand_in, capsys, read_runs):
    finished_run(tmp_path / "runs", "a", "5")
    finished_run(tmp_path / "runs", "b", "6")
    first = status(tmp_path / "runs", capsys)
    assert sorted(read_runs) == ["a", "b"] and asked(slurm_stand_in) == [["5", "6"]]
    read_runs.clear()
    assert status(tmp_path / "runs", capsys) == first
    assert read_runs == [] and asked(slurm_stand_in) == []


def test_a_step_appended_to_one_run_reads_that_run_alone_again(tmp_path, slurm_stand_in, capsys, read_runs):
    a = finished_run(tmp_path / "runs", "a", "5")
    finished_run(tmp_path / "runs", "b", "6")
    status(tmp_path / "runs", capsys)
    read_runs.clear()
    asked(slurm_stand_in)
    a.append_step({**STEP, "step": 4})
    a.write_progress({"step": 4, "total_steps": 10})
    table = status(tmp_path / "runs", capsys)
    assert read_runs == ["a"] and asked(slurm_stand_in) == [["5"]]
    assert "4/10" in next(line for line in table.splitlines() if line.startswith("a "))


def same_stat_times(path: Path, like: os.stat_result) -> None:
    os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))


def test_an_edit_in_place_of_the_same_size_and_time_is_seen(tmp_path, slurm_stand_in, capsys):
    a = finished_run(tmp_path / "runs", "a", "5")
    a.progress_file.write_text(json.dumps({"step": 3, "total_steps": 10}))
    before = a.progress_file.stat()
    status(tmp_path / "runs", capsys)
    with open(a.progress_file, "r+") as handle:  # the same inode, the same size, the time set back
        handle.write(json.dumps({"step": 7, "total_steps": 10}))
    same_stat_times(a.progress_file, before)
    assert a.progress_file.stat().st_size == before.st_size
    assert "7/10" in status(tmp_path / "runs", capsys)


def test_a_file_replaced_by_a_rename_or_a_copy_of_the_run_is_seen(tmp_path, slurm_stand_in, capsys):
    a = finished_run(tmp_path / "runs", "a", "5")
    status(tmp_path / "runs", capsys)
    replacement = tmp_path / "progress.json"
    replacement.write_text(json.dumps({"step": 8, "total_steps": 10}))
    os.replace(replacement, a.progress_file)  # what a trainer does, and an unpacked copy of the run
    assert "8/10" in status(tmp_path / "runs", capsys)
    os.rename(a.path, tmp_path / "aside")  # the run moved away and another put in its place, same name
    finished_run(tmp_path / "runs", "a", "6", steps=2)
    RunDir(tmp_path / "runs" / "a").write_progress({"step": 2, "total_steps": 5})
    assert "2/5" in status(tmp_path / "runs", capsys)


def test_a_run_with_a_job_in_the_queue_is_read_every_call(tmp_path, slurm_stand_in, capsys, read_runs):
    finished_run(tmp_path / "runs", "a", "5")
    (slurm_stand_in / "jobs.json").write_text(json.dumps([{"i": "5", "T": "RUNNING", "j": "a"}]))
    status(tmp_path / "runs", capsys)
    status(tmp_path / "runs", capsys)
    assert read_runs == ["a", "a"]


def test_a_record_written_in_the_same_moment_as_the_reading_is_not_kept(tmp_path, slurm_stand_in, capsys, read_runs,
                                                                         monkeypatch):
    monkeypatch.setattr(status_cache, "RACY_NS", 60 * 10**9)  # every file here was written within the minute
    finished_run(tmp_path / "runs", "a", "5")
    status(tmp_path / "runs", capsys)
    status(tmp_path / "runs", capsys)
    assert read_runs == ["a", "a"]


def test_a_checkpoint_completed_since_the_last_call_shows_in_a_kept_row(tmp_path, slurm_stand_in, capsys, read_runs):
    a = finished_run(tmp_path / "runs", "a", "5")
    model = tmp_path / "art" / "models" / "a"
    a.write_model_record({"model_dir": str(model)})

    def save(step: int, whole: bool = True) -> None:
        folder = ck.step_dir(model, step)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ck.ADAPTER_CONFIG).write_text(json.dumps({"r": 8}))
        (folder / ck.ADAPTER_WEIGHTS).write_bytes(safetensors_bytes(step)[:None if whole else 20])

    save(1)
    save(2, whole=False)  # being written
    assert runs.HEADERS.index("CKPT") == 4
    row = next(line for line in status(tmp_path / "runs", capsys).splitlines() if line.startswith("a "))
    assert row.split()[4] == "1"
    save(2)  # the same folder, its weights now whole: checkpoints/ itself did not change
    row = next(line for line in status(tmp_path / "runs", capsys).splitlines() if line.startswith("a "))
    assert row.split()[4] == "2" and read_runs == ["a"]


def test_a_cache_folder_others_can_write_is_not_trusted(tmp_path, slurm_stand_in, capsys, read_runs):
    finished_run(tmp_path / "runs", "a", "5")
    status(tmp_path / "runs", capsys)
    status_cache.cache_root().chmod(0o777)
    table = status(tmp_path / "runs", capsys)
    assert read_runs == ["a", "a"] and "status cache not used" in table and "every run was read" in table
    status_cache.cache_root().chmod(0o700)
    kept = status_cache.cache_root() / status_cache.file_name(tmp_path / "runs")
    kept.chmod(0o666)
    assert "status cache not used" in status(tmp_path / "runs", capsys) and read_runs == ["a", "a", "a"]


def test_the_cache_is_the_users_alone_and_names_no_secret(tmp_path, slurm_stand_in, capsys):
    finished_run(tmp_path / "runs", "a", "5")
    status(tmp_path / "runs", capsys)
    root = status_cache.cache_root()
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    kept = root / status_cache.file_name(tmp_path / "runs")
    assert oct(kept.stat().st_mode & 0o777) == "0o600" and kept.stat().st_uid == os.geteuid()
    assert json.loads(kept.read_text())["runs"]["a"]["cells"][0] == "a"


# -- runs that cannot be read are shown, named unreadable -------------------------------


def test_a_ledger_that_is_a_link_loop_is_shown_unreadable(tmp_path, slurm_stand_in, capsys):
    run = RunDir(tmp_path / "runs" / "looped")
    run.path.mkdir(parents=True)
    os.symlink("ledger.jsonl", run.ledger)  # a link to itself
    finished_run(tmp_path / "runs", "fine", "5")
    table = status(tmp_path / "runs", capsys)
    row = next(line for line in table.splitlines() if line.startswith("looped "))
    assert "UNREADABLE" in row
    assert "looped: 1 unreadable record(s) skipped: ledger.jsonl: a link, not followed" in table
    assert [r.name for r in run_dirs(tmp_path / "runs")] == ["fine", "looped"]


def rows_as_another_user(runs_dir: Path) -> dict[str, list[str]]:
    """The runs view's rows (and what each run's readers skipped) as seen by a user who is not the
    folders' owner: a child of this process, made nobody when the tests run as root (whom no mode stops)."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is the parent's to check
        code = 1
        try:
            os.close(reader)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            views = runs.run_views(run_dirs(runs_dir), runs.SlurmAnswers({}), status_cache.StatusCache(None))
            os.write(writer, json.dumps([[str(c) for c in v.row()] + [v.run_dir.unreadable_line()]
                                         for v in views]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as handle:
        data = handle.read()
    assert os.waitpid(child, 0)[1] == 0, data
    return {row[0]: row for row in json.loads(data)}


def test_a_run_folder_this_user_cannot_enter_is_shown_unreadable(tmp_path):
    base = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    closed = RunDir(base / "closed")
    try:
        base.chmod(0o755)
        write_record(closed, "submit", job_id="5")
        closed.path.chmod(0o700 if os.geteuid() == 0 else 0)
        RunDir(base / "open").write_progress({"step": 1, "total_steps": 2})
        rows = rows_as_another_user(base)
        assert rows["closed"][-2] == "UNREADABLE: the run folder cannot be read (below)"
        assert rows["closed"][-1] == "1 unreadable record(s) skipped: .: the run folder cannot be read: Permission denied"
        assert rows["open"][3] == "1/2"
    finally:
        closed.path.chmod(0o700)
        subprocess.run(["rm", "-rf", str(base)], check=True)


def test_kept_rows_survive_a_ledger_read_by_a_newer_release(tmp_path, slurm_stand_in, capsys):
    """A file this code cannot take (another version's) is read as none, not a crash."""
    finished_run(tmp_path / "runs", "a", "5")
    status(tmp_path / "runs", capsys)
    kept = status_cache.cache_root() / status_cache.file_name(tmp_path / "runs")
    kept.write_text(json.dumps({"version": 99, "runs": {"a": {"sig": 1}}}))
    assert "3/10" in status(tmp_path / "runs", capsys)
    kept.write_text("{torn")
    assert "3/10" in status(tmp_path / "runs", capsys)
    assert ledger.job_ids(ledger.read(RunDir(tmp_path / "runs" / "a"))) == ["5"]


def test_when_squeue_does_not_answer_kept_rows_stand_and_the_table_says_so(tmp_path, slurm_stand_in, capsys,
                                                                           read_runs):
    finished_run(tmp_path / "runs", "a", "5")
    first = status(tmp_path / "runs", capsys)
    squeue = slurm_stand_in / "bin" / "squeue"
    squeue.write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
    with pytest.raises(runs_table.Failure, match="squeue failed"):
        runs_table.status_view(getpass.getuser(), tmp_path / "runs", "")
    out = capsys.readouterr().out
    assert "UNKNOWN (squeue failed" in out and "SLURM QUEUE UNKNOWN" in out
    assert first.splitlines()[1:] == out.split("\n\n", 1)[1].splitlines()[2:] and read_runs == ["a"]


def test_a_run_removed_from_the_runs_directory_is_forgotten(tmp_path, slurm_stand_in, capsys):
    finished_run(tmp_path / "runs", "a", "5")
    finished_run(tmp_path / "runs", "b", "6")
    status(tmp_path / "runs", capsys)
    kept = status_cache.cache_root() / status_cache.file_name(tmp_path / "runs")
    assert sorted(json.loads(kept.read_text())["runs"]) == ["a", "b"]
    os.rename(tmp_path / "runs" / "b", tmp_path / "b")
    table = status(tmp_path / "runs", capsys)
    assert sorted(json.loads(kept.read_text())["runs"]) == ["a"] and "\nb " not in table
