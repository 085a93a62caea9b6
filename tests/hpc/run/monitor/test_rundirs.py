"""hpc/run/monitor/rundirs.py: which run directories the helpers list."""

from __future__ import annotations

from hpc.run.monitor.rundirs import run_dirs
from hpc.run.rundir import RunDir, SweepDir
from tests.doubles.ledger_lines import write_record


def test_runs_moved_aside_by_restart_are_listed_only_by_name(tmp_path):
    for name in ("r1", "r1.20261122T101010Z", "r.2"):
        write_record(RunDir(tmp_path / name), "submit", job_id="1")
    (tmp_path / "not-a-run").mkdir()
    assert [r.name for r in run_dirs(tmp_path)] == ["r.2", "r1"]
    assert [r.name for r in run_dirs(tmp_path, "r1.20261122T101010Z")] == ["r1.20261122T101010Z"]


def test_a_sweeps_name_lists_its_runs(tmp_path):
    SweepDir(tmp_path / "sw").write_record({"sweep": "sw", "runs": [{"name": "sw.seed=1"}, {"name": "sw.seed=2"}]})
    for name in ("sw.seed=1", "sw.seed=2", "sw.seed=3", "other"):
        write_record(RunDir(tmp_path / name), "submit", job_id="1")
    assert [r.name for r in run_dirs(tmp_path, "sw")] == ["sw.seed=1", "sw.seed=2"]
    assert "sw" not in [r.name for r in run_dirs(tmp_path)]  # the sweep's own folder is no run


def test_a_run_being_unbundled_is_not_listed_before_it_is_renamed_into_place(tmp_path):
    from hpc.run.monitor.rundirs import run_dirs

    for name in ("agent_008", ".unbundle-agent_009-0a1b2c3d4e5f"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ledger.jsonl").write_text("")
    assert [run.name for run in run_dirs(tmp_path)] == ["agent_008"]
