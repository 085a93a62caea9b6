"""The launcher refuses a run folder that is not the user's alone: a folder
someone else owns or can write, a link, an entry the job sources or runs that others can change,
a runs directory that is a file, a FIFO, /proc/self, or shared without the sticky bit. The dry run
and the launch both refuse, in one line with exit 2, writing nothing; what the launch makes is never
writable by group or others, whatever the umask. "Someone else" is uid 12345 (the tests run as root;
the rule compares owners with the process's effective uid). hpc/run/trust.py holds the rule."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

import pytest

from hpc.launcher import launch, single_run

NEIGHBOUR = 12345
SECRET = "sk-trust-0123456789abcdef"


@pytest.fixture(autouse=True)
def fake_sbatch(monkeypatch) -> list[Path]:
    """A Slurm that accepts every script (the launch's writes are what these tests look at)."""
    submitted: list[Path] = []

    def submit(script: Path, dependency: str | None = None) -> str:
        submitted.append(script)
        return str(1000 + len(submitted))

    monkeypatch.setattr(single_run.slurm, "sbatch_path", lambda: None)
    monkeypatch.setattr(single_run.slurm, "require_sbatch", lambda: "/usr/bin/sbatch")
    monkeypatch.setattr(single_run.slurm, "submit", submit)
    monkeypatch.setattr(single_run.slurm, "active_jobs", lambda *asked: {})
    return submitted


def launch_run(capsys, runs: Path, *extra: str, name: str = "nb2") -> tuple[int, str, str]:
    code = launch.main(["--cluster", "local", "--job_name", name, "--time_limit", "30", "--runs_dir", str(runs),
                        "--entrypoint", "tests.doubles.step_trainer", "--no_preflight",
                        f"--env=WANDB_API_KEY={SECRET}", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def tree(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    """Every path under ``root`` (links not followed): its owner, mode, size and bytes."""
    found = {}
    for path in [root, *root.rglob("*")] if os.path.lexists(root) else []:
        info = os.lstat(path)
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[str(path)] = (info.st_uid, info.st_mode, info.st_size, data)
    return found


def refused_both_ways(capsys, tmp_path: Path, runs: Path, fragment: str, name: str = "nb2") -> None:
    """The dry run and the launch refuse in one line, exit 2, and change nothing under tmp_path."""
    before = tree(tmp_path)
    for extra in (["--dry_run"], []):
        code, out, err = launch_run(capsys, runs, *extra, name=name)
        assert code == 2, out + err
        assert len(err.splitlines()) == 1 and err.startswith("hpc.launch: error: ") and fragment in err, err
        assert SECRET not in out + err and "Traceback" not in err
        assert tree(tmp_path) == before


def neighbours_folder(run: Path) -> None:
    run.mkdir(parents=True)
    os.chown(run, NEIGHBOUR, NEIGHBOUR)
    run.chmod(0o777)


def open_to_all(run: Path) -> None:
    run.mkdir(parents=True)
    run.chmod(0o777)


def group_writable(run: Path) -> None:
    run.mkdir(parents=True)
    run.chmod(0o775)


def a_link(run: Path) -> None:
    elsewhere = run.parent.parent / "elsewhere"
    elsewhere.mkdir()
    run.parent.mkdir(parents=True)
    run.symlink_to(elsewhere)


def ours_but_owned_by_neighbour(run: Path) -> None:
    run.mkdir(parents=True)
    os.chown(run, NEIGHBOUR, NEIGHBOUR)
    run.chmod(0o755)


SETUPS: dict[str, tuple[Callable[[Path], None], str]] = {
    "owned by someone else, mode 0777": (neighbours_folder, "owned by uid 12345"),
    "ours, mode 0777": (open_to_all, "writable by group and others (mode 0777)"),
    "ours, mode 0775": (group_writable, "writable by group (mode 0775)"),
    "a link to elsewhere": (a_link, "is a link"),
    "owned by someone else, mode 0755": (ours_but_owned_by_neighbour, "owned by uid 12345"),
}


@pytest.mark.parametrize("setup", SETUPS)
def test_a_run_folder_someone_else_can_change_is_refused_by_the_dry_run_and_the_launch(capsys, tmp_path, setup):
    runs = tmp_path / "runs"
    make, fragment = SETUPS[setup]
    make(runs / "nb2")
    refused_both_ways(capsys, tmp_path, runs, fragment)
    assert not list(tmp_path.glob("**/secrets.env")) and not list(tmp_path.glob("**/.lock"))


def plant(run: Path, entry: str, how: str) -> None:
    """A run launched before (ours, sound), then ``entry`` of it spoiled ``how``."""
    path = run / entry
    if how == "link":
        outside = run.parent.parent / "outside"
        outside.mkdir(exist_ok=True)
        (outside / "target").write_text("precious\n")
        if path.is_dir():
            path.rename(run / f"{entry}.moved")
        elif os.path.lexists(path):
            path.unlink()
        path.symlink_to(outside / "target" if "." in entry else outside)
    elif how == "fifo":
        path.unlink() if path.is_file() else None
        os.mkfifo(path)
    elif how == "folder":
        path.unlink() if path.is_file() else None
        path.mkdir()
    elif how == "neighbour's":
        os.chown(path, NEIGHBOUR, NEIGHBOUR)
    else:  # a mode
        path.chmod(int(how, 8))


@pytest.mark.parametrize("entry, how, fragment", [
    (".lock", "fifo", "is a FIFO, not a regular file"),
    (".lock", "folder", "is a folder, not a regular file"),
    (".lock", "link", "is a link"),
    ("secrets.env", "0666", "writable by group and others"),
    ("secrets.env", "0644", "readable by others (mode 0644)"),
    ("secrets.env", "neighbour's", "owned by uid 12345"),
    ("secrets.env", "link", "is a link"),
    ("scripts", "0777", "writable by group and others"),
    ("scripts", "link", "is a link"),
    ("logs", "link", "is a link"),
    ("logs", "0757", "writable by others"),
    ("art", "link", "is a link"),
    ("model.json", "link", "is a link"),
    ("ledger.jsonl", "0666", "writable by group and others"),
    ("ledger.jsonl", "fifo", "is a FIFO"),
])
def test_an_entry_the_job_sources_or_runs_that_others_can_change_is_refused(capsys, tmp_path, fake_sbatch, entry,
                                                                             how, fragment):
    runs = tmp_path / "runs"
    code, out, err = launch_run(capsys, runs)
    assert code == 0, err
    plant(runs / "nb2", entry, how)
    refused_both_ways(capsys, tmp_path, runs, f"{runs / 'nb2' / entry} ")
    assert fragment in launch_run(capsys, runs, "--dry_run")[2]
    assert len(fake_sbatch) == 1


@pytest.mark.parametrize("spoil, fragment", [
    (lambda runs: runs.write_text("a file\n"), "is a regular file, not a folder"),
    (lambda runs: os.mkfifo(runs), "is a FIFO, not a folder"),
    (lambda runs: (runs.mkdir(), runs.chmod(0o777)), "writable by group and others without the sticky bit"),
    (lambda runs: (runs.mkdir(), runs.chmod(0o775)), "writable by group without the sticky bit"),
    (lambda runs: (runs.mkdir(), os.chown(runs, NEIGHBOUR, NEIGHBOUR)), "owned by uid 12345, not by you or root"),
    (lambda runs: (runs.mkdir(), runs.chmod(0o555)), "not writable by you (mode 0555)"),
])
def test_a_runs_directory_that_is_no_folder_of_the_users_is_refused(capsys, tmp_path, spoil, fragment):
    runs = tmp_path / "runs"
    spoil(runs)
    refused_both_ways(capsys, tmp_path, runs, fragment)


@pytest.mark.parametrize("runs_dir, fragment", [
    ("/etc/passwd", "/etc/passwd is a regular file, not a folder"),
    ("/etc/passwd/runs", "/etc/passwd (where the runs directory /etc/passwd/runs would be made) is a regular file"),
    ("/proc/self", "not writable by you"),
    ("/dev/null", "is a device, not a folder"),
])
def test_a_runs_dir_flag_naming_a_system_file_is_refused(capsys, tmp_path, runs_dir, fragment):
    refused_both_ways(capsys, tmp_path, Path(runs_dir), fragment)


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_job_name_that_is_a_file_or_fifo_in_the_runs_directory_is_refused(capsys, tmp_path, kind):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "nb2").write_text("notes\n") if kind == "file" else os.mkfifo(runs / "nb2")
    refused_both_ways(capsys, tmp_path, runs, "is a regular file, not a folder" if kind == "file" else "is a FIFO")


def test_a_shared_runs_directory_with_the_sticky_bit_takes_a_run_folder_of_ours_not_a_neighbours(capsys, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o1777)  # like /tmp
    code, out, err = launch_run(capsys, runs, name="mine")
    assert code == 0, err
    neighbours_folder(runs / "theirs")
    (runs / "theirs").chmod(0o755)
    refused_both_ways(capsys, tmp_path, runs, "owned by uid 12345", name="theirs")


def test_what_a_launch_makes_is_never_writable_by_group_or_others_whatever_the_umask(capsys, tmp_path):
    runs = tmp_path / "deep" / "runs"
    old = os.umask(0)
    try:
        code, out, err = launch_run(capsys, runs)
    finally:
        os.umask(old)
    assert code == 0, err
    made = tree(tmp_path / "deep")
    assert made and all(not mode & 0o022 for _, mode, _, _ in made.values()), \
        {path: oct(mode) for path, (_, mode, _, _) in made.items() if mode & 0o022}
    assert stat.S_IMODE(os.stat(runs / "nb2" / "secrets.env").st_mode) == 0o600
    code, out, err = launch_run(capsys, runs, "--dry_run")  # and the next launch trusts what this one made
    assert code == 0, err


def test_a_sweep_folder_someone_else_can_write_is_refused(capsys, tmp_path):
    runs = tmp_path / "runs"
    open_to_all(runs / "sw")
    before = tree(tmp_path)
    for extra in (["--dry_run"], []):
        code, out, err = launch_run(capsys, runs, "--sweep", "seed=1,2", *extra, name="sw")
        assert code == 2 and "writable by group and others" in err and len(err.splitlines()) == 1, err
    assert tree(tmp_path) == before


@pytest.mark.parametrize("spoil, fragment", [
    (lambda model: model.chmod(0o777), "writable by group and others"),
    (lambda model: os.chown(model, NEIGHBOUR, NEIGHBOUR), "owned by uid 12345"),
    (lambda model: (model / "checkpoints").chmod(0o775), "checkpoints is writable by group"),
    (lambda model: (model.rename(model.with_name("elsewhere")), model.symlink_to(model.with_name("elsewhere"))),
     "is a link"),
])
def test_a_model_folder_outside_the_run_that_others_can_change_is_refused(capsys, tmp_path, spoil, fragment):
    runs, art = tmp_path / "runs", tmp_path / "scratch" / "art"
    model = art / "email_agent" / "models" / "nb2"  # agent_008's project; ART_PATH on scratch, as on a cluster
    (model / "checkpoints").mkdir(parents=True)
    spoil(model)
    before = tree(tmp_path)
    for extra in (["--dry_run"], []):
        code, out, err = launch_run(capsys, runs, f"--env=ART_PATH={art}", *extra)
        assert code == 2 and err.startswith("hpc.launch: error: the run's model folder: ") and fragment in err, err
        assert len(err.splitlines()) == 1
    assert tree(tmp_path) == before
