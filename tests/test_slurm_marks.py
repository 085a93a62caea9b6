"""`pytest -m "not slurm"` (the quick run, README) leaves out every test of the local Slurm: tests/conftest.py
marks ``slurm`` each test that asks for the ``slurm`` fixture, marked or not, and runs them in the one group."""

from __future__ import annotations

import pytest

from tests.conftest import SERIAL_GROUP, pytest_collection_modifyitems


class Item:
    """What the hook reads of a collected test: its id, fixtures and marks."""

    def __init__(self, nodeid: str, fixturenames: tuple[str, ...], marks: tuple[str, ...] = ()) -> None:
        self.nodeid, self.fixturenames, self.marks = nodeid, fixturenames, [getattr(pytest.mark, m) for m in marks]

    def get_closest_marker(self, name: str) -> pytest.MarkDecorator | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark)


def test_a_test_asking_for_the_slurm_fixture_is_marked_slurm_and_runs_in_the_slurm_group() -> None:
    unmarked = Item("tests/x/test_a.py::test_queues", ("tmp_path", "slurm"))
    plain = Item("tests/x/test_a.py::test_parses", ("tmp_path",))
    items = [plain, unmarked]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]  # the hook reads no config
    assert unmarked.get_closest_marker("slurm") is not None
    assert unmarked.get_closest_marker("xdist_group").args == (SERIAL_GROUP,)
    assert plain.get_closest_marker("slurm") is None and items == [unmarked, plain]


def test_a_marked_test_keeps_its_one_mark() -> None:
    marked = Item("tests/x/test_b.py::test_submits", ("slurm",), ("slurm",))
    pytest_collection_modifyitems(None, [marked])  # type: ignore[arg-type]
    assert [mark.name for mark in marked.marks] == ["slurm", "xdist_group"]
