"""The local Slurm's tests share one pytest-xdist group (tests/conftest.py): one worker runs them
one after another. pytest 9.2 with pytest-xdist 3.8 drops the group without a word (xdist writes
it into Node._nodeid, which pytest 9.2 does not read) and the Slurm tests run on both workers at
once, fighting over the two nodes; this test fails when that happens."""

from __future__ import annotations

import os

import pytest

from tests.conftest import SERIAL_GROUP

pytestmark = pytest.mark.slurm


def test_a_local_slurm_test_runs_in_the_one_xdist_group(slurm, request: pytest.FixtureRequest) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("one process (-n 0): no workers, no groups")
    assert request.node.nodeid.endswith(f"@{SERIAL_GROUP}"), request.node.nodeid
