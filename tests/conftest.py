"""Shared fixtures. The `slurm` fixture is the gate for tests that need the
project's local Slurm (scripts/local_slurm.sh up): it skips on a contributor's
machine without Slurm, but fails under CI=true, where a missing Slurm is a bug.
The `pypi` fixture gates the tests that read PyPI's metadata the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Workloads run by test jobs (tests.doubles.*) are imported from the repo root.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _slurm_problem() -> str | None:
    """Why Slurm is not usable here, or None when a node is up."""
    for tool in ("sbatch", "sinfo", "squeue", "sacct"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not on the PATH"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo timed out (is slurmctld running?)"
    usable = {"idle", "mixed", "allocated", "completing"}
    if states.returncode != 0 or not usable & {s.strip("*~#!%$@^-") for s in states.stdout.split()}:
        return f"no usable Slurm node (sinfo: {(states.stdout + states.stderr).strip()!r})"
    return None


SERIAL_GROUP = "local-slurm"
# Real Ray heads outside Slurm: their ports and processes stay apart from the Slurm jobs' Ray
SERIAL_FILES = ("tests/hpc/job/test_ray_cluster.py",)


def needs_slurm(item: pytest.Item) -> bool:
    """Marked ``slurm``, or asking for the ``slurm`` fixture (the gate): either way it needs the local Slurm."""
    return item.get_closest_marker("slurm") is not None or "slurm" in getattr(item, "fixturenames", ())


def runs_in_series(item: pytest.Item) -> bool:
    return needs_slurm(item) or item.nodeid.startswith(SERIAL_FILES)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group into each test's id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that use the one local Slurm share its two nodes, so under pytest-xdist (pyproject's
    ``-n 2 --dist loadgroup``) they run one after another on one worker, and first: they take longest
    (~16 of the suite's 27 minutes, mostly Slurm's own clocks: time limits, node timeouts, requeue
    holds), while the other worker runs everything else beside them (~11 minutes). A test asking for the
    ``slurm`` fixture is marked ``slurm`` too, so ``pytest -m "not slurm"`` runs the quick rest alone."""
    for item in items:
        if needs_slurm(item) and item.get_closest_marker("slurm") is None:
            item.add_marker(pytest.mark.slurm)  # so that `-m "not slurm"` leaves out every test of the local Slurm
    serial = [item for item in items if runs_in_series(item)]
    for item in serial:
        item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
    items[:] = serial + [item for item in items if not runs_in_series(item)]


@pytest.fixture(autouse=True)
def user_cache_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """status.sh keeps its rows in the user's cache folder (hpc/run/monitor/status_cache.py): a
    test's go to its session's temporary folder, never to the home of whoever runs the tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(scope="session")
def slurm() -> None:
    problem = _slurm_problem()
    if problem is None:
        return
    message = f"Slurm needed: {problem}; start it with: bash scripts/local_slurm.sh up"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pypi() -> None:
    """The gate for tests that read PyPI (metadata, never a large download): they skip on a
    machine without it, but fail under CI=true, which reaches PyPI."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10)
        return
    except OSError as error:
        problem = f"PyPI is not reachable ({error})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem}; CI reaches it")
    pytest.skip(problem)


@pytest.fixture(autouse=True)
def cluster_login_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """$WORK (TACC) and $PROJECT (JSC, set by jutil) as a login node has them: the dotenv
    files put ART's vLLM runtime there. A test about a missing variable unsets its own."""
    base = tmp_path_factory.getbasetemp()
    for name in ("WORK", "PROJECT"):
        if name not in os.environ:
            monkeypatch.setenv(name, str(base / name.lower()))


@pytest.fixture(scope="session")
def inbox_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic inboxes (trainer.data make-inboxes: 40 train, 10 held-out) staged by ``prepare``."""
    from trainer.staging.data import prepare
    from trainer.staging.synthetic_inbox import generate, write

    root = tmp_path_factory.mktemp("inboxes")
    emails, questions = write(generate(seed=3, train_inboxes=40, heldout_inboxes=10), root / "source")
    prepare(root / "data", str(emails), str(questions), show_progress=False)
    return root / "data"


@pytest.fixture(scope="session")
def inbox_model(tmp_path_factory: pytest.TempPathFactory, inbox_data_dir: Path) -> Path:
    """A `tiny` made model (random weights) with its tokenizer trained on those inboxes' emails."""
    from trainer.data import main as data_main

    out = tmp_path_factory.mktemp("inbox-model") / "model"
    assert data_main(["make-model", str(out), "--size", "tiny", "--data_dir", str(inbox_data_dir)]) == 0
    return out
