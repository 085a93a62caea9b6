"""Syncing into the checkout on the login node (a real sshd on 127.0.0.1): a folder that is not
one of ours is never written, a failed setup.sh or a transfer cut off is said and never taken
for a complete sync."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpc.remote import sync
from hpc.remote.ssh import Connection, RemoteError
from hpc.remote.sync import local_tree, push, send
from hpc.synced_checkout import FOLDER, MARKER, SETUP
from tests.hpc.remote.conftest import DEST, Laptop


def dry_run(laptop: Laptop, checkout: Path) -> subprocess.CompletedProcess:
    return laptop.python("-m", "hpc.launch", "--remote", DEST, "--remote_dir", str(checkout), "--cluster", "local",
                         "--job_name", "x", "--time_limit", "5", "--dry_run")


def test_a_folder_that_is_not_a_checkout_of_ours_is_left_untouched(laptop: Laptop, tmp_path: Path):
    home_like = tmp_path / "home"
    home_like.mkdir()
    (home_like / "notes.txt").write_text("mine\n")
    (home_like / ".env").write_text("KEPT=1\n")
    result = dry_run(laptop, home_like)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert (f"--remote_dir {home_like} on {DEST} is not a checkout that --remote keeps (it holds 'notes.txt' "
            f"and no {FOLDER}/): pass a new or empty folder") in result.stderr
    assert sorted(p.name for p in home_like.iterdir()) == [".env", "notes.txt"]

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    result = dry_run(laptop, a_file)
    assert result.returncode == 2 and f"--remote_dir {a_file} on {DEST} is a file, not a folder" in result.stderr


def test_a_failing_setup_sh_is_said_with_what_to_do_and_not_recorded_as_done(laptop: Laptop, tmp_path: Path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".venv").write_text("not a venv\n")  # setup.sh cannot make its venv here
    result = dry_run(laptop, checkout)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"hpc.launch: error: bash setup.sh failed in {DEST}:{checkout} (exit 1; its messages "
                           "are above): fix what it says there")
    assert "[setup] ERROR: could not create" in result.stderr and "Traceback" not in result.stderr
    assert (checkout / MARKER).exists() and not (checkout / SETUP).exists()  # synced; set up: not yet


def test_a_transfer_cut_off_leaves_the_checkout_marked_incomplete_and_the_next_sync_completes_it(
        laptop: Laptop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    checkout = tmp_path / "checkout"
    for name, value in laptop.env().items():
        monkeypatch.setenv(name, value)
    local = local_tree(laptop.repo, uncommitted=False)
    archive = subprocess.run(["git", "-C", str(laptop.repo), "archive", "--format=tar.gz", local.tree],
                             capture_output=True, check=True).stdout
    conn = Connection.to(DEST)
    conn.open()
    try:
        with pytest.raises(RemoteError, match=r"the sync into .* failed \(.*\); the checkout there is marked "
                                              r"incomplete: run the command again"):
            cut_off = tmp_path / "half.tar.gz"
            cut_off.write_bytes(archive[: len(archive) // 2])
            with cut_off.open("rb") as stream:
                send(conn, str(checkout), local, stream)
        assert (checkout / FOLDER).is_dir() and not (checkout / MARKER).exists()
        assert not list((checkout / FOLDER).glob("incoming.*"))  # the partial archive is cleaned away
        assert not (checkout / "hpc").exists()  # nothing of it was moved into the checkout
        # The next sync (each command syncs a checkout without the marker) completes it.
        push(conn, str(checkout), local)
        assert (checkout / MARKER).exists() and (checkout / "hpc" / "launch.py").read_text() == \
            (laptop.repo / "hpc" / "launch.py").read_text()
    finally:
        conn.close()


def test_a_probe_word_of_no_folder_kind_is_an_error_never_a_folder_to_write_into():
    assert sync.folder_kind("foreign", "h:/x") is sync.FolderKind.FOREIGN
    with pytest.raises(RemoteError, match="cannot look into h:/x: the probe answered 'shared', not one of new, ours"):
        sync.folder_kind("shared", "h:/x")
