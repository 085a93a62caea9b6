"""``python -m hpc.run move`` from a laptop against a real login node (sshd on 127.0.0.1): the run
bundled in one checkout's runs directory, carried part by part through the laptop and unbundled in
another's, over one login; a failed unbundling takes the run back where it was."""

from __future__ import annotations

import json
from pathlib import Path

from hpc.remote.sync import local_tree
from hpc.run import ledger
from hpc.run.checkpoints import list_checkpoints, model_dir
from hpc.run.rundir import RunDir
from hpc.synced_checkout import SETUP
from tests.hpc.remote.conftest import DEST, Laptop, checkout_with_venv
from tests.hpc.run.test_bundle import PROJECT, make_run
from tests.hpc.sshd_helpers import Sshd

NAME = "agent_008"


def ready_checkout(folder: Path, laptop: Laptop) -> Path:
    """A checkout there whose setup is this tree's (its .venv sees this run's packages): setup.sh
    is not run again (test_commands.py runs it for real)."""
    checkout = checkout_with_venv(folder)
    (checkout / SETUP).parent.mkdir()
    (checkout / SETUP).write_text(local_tree(laptop.repo, False).setup_key + "\n")
    return checkout


def move(laptop: Laptop, tmp_path: Path, *extra: str):
    places = {name: tmp_path / name for name in ("runs_a", "runs_b", "art_b")}
    return laptop.python("-m", "hpc.run", "move", NAME, "--from", DEST, "--to", DEST,
                         "--from_dir", str(ready_checkout(tmp_path / "cluster_a", laptop)),
                         "--to_dir", str(ready_checkout(tmp_path / "cluster_b", laptop)),
                         "--from_runs_dir", str(places["runs_a"]), "--to_runs_dir", str(places["runs_b"]),
                         "--to_cluster", "local", "--to_env", f"ART_PATH={places['art_b']}", *extra)


def test_a_run_moves_between_two_checkouts_through_the_laptop_with_progress_and_one_login(
        laptop: Laptop, login_node: Sshd, tmp_path: Path) -> None:
    source = make_run(tmp_path / "runs_a", tmp_path / "art_a", name=NAME, big=3 * 1024 * 1024)
    logins = login_node.logins()

    moved = move(laptop, tmp_path, "--part_mib", "1")

    assert moved.returncode == 0, moved.stderr
    assert "carried part 1 of" in moved.stderr and f"moved from {DEST} to {DEST}" in moved.stderr
    arrived = RunDir(tmp_path / "runs_b" / NAME)
    folder = model_dir(tmp_path / "art_b", PROJECT, NAME)
    assert [c.step for c in list_checkpoints(folder)] == [3, 5]
    assert arrived.read_model_record()["model_dir"] == str(folder)
    record = ledger.moved_away(ledger.read(source))
    assert record is not None and record.step == 5 and DEST in record.to
    assert login_node.logins() - logins == 1  # the same DEST twice: one login
    assert not list((tmp_path / "cluster_a").glob(".hpc-move/*")) and not list((tmp_path / "cluster_b").glob(".hpc-move/*"))


def test_a_move_whose_unbundling_fails_takes_the_run_back_where_it_was(laptop: Laptop, tmp_path: Path) -> None:
    source = make_run(tmp_path / "runs_a", tmp_path / "art_a", name=NAME)
    (tmp_path / "runs_b" / NAME).mkdir(parents=True)  # the name is taken there

    moved = move(laptop, tmp_path)

    assert moved.returncode == 2, moved.stderr
    assert "already in" in moved.stderr and "taken back" in moved.stderr
    assert ledger.moved_away(ledger.read(source)) is None
    assert [e["event"] for e in map(json.loads, source.ledger.read_text().splitlines())][-2:] == ["moved", "reclaimed"]
    assert list((tmp_path / "runs_b" / NAME).iterdir()) == []
