"""The launcher's side of resubmission with resume, without Slurm: where a run
stands in the dry run, finished and failed runs, --restart and --chain
(sbatch is replaced by a recording fake; the real thing is in
test_resubmission_slurm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc.launcher import launch, single_run
from hpc.run import checkpoints as ck
from hpc.run import ownership
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines, write_record
from tests.doubles.step_trainer import safetensors_bytes


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def art(tmp_path: Path) -> Path:
    """ART_PATH outside the run directory, as on a cluster (scratch)."""
    return tmp_path / "scratch" / "art"


@pytest.fixture
def run(runs: Path) -> RunDir:
    return RunDir(runs / "r1")


@pytest.fixture
def model(art: Path) -> Path:
    return ck.model_dir(art, "email_agent", "r1")  # agent_008.yaml's project; the run name is the job name


@pytest.fixture
def sbatch(monkeypatch) -> list[str | None]:
    """A Slurm that accepts everything: records each submission's dependency, answers 1001, 1002..."""
    dependencies: list[str | None] = []

    def submit(script: Path, dependency: str | None = None) -> str:
        assert script.is_file()
        dependencies.append(dependency)
        return str(1000 + len(dependencies))

    monkeypatch.setattr(single_run.slurm, "sbatch_path", lambda: None)  # no --test-only in the dry run
    monkeypatch.setattr(single_run.slurm, "require_sbatch", lambda: "/usr/bin/sbatch")
    monkeypatch.setattr(single_run.slurm, "submit", submit)
    monkeypatch.setattr(single_run.slurm, "active_jobs", lambda ids, expected=(): {})
    return dependencies


def args(runs: Path, art: Path, *extra: str) -> list[str]:
    return ["--cluster", "local", "--job_name", "r1", "--time_limit", "30", "--runs_dir", str(runs),
            "--env", f"ART_PATH={art}", "--no_preflight", *extra]  # the preflight gate: tests/hpc/launcher/test_queue_preflight.py


def main(capsys, *argv: str) -> tuple[int, str, str]:
    code = launch.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def save(model: Path, step: int, whole: bool = True) -> None:
    folder = ck.step_dir(model, step)
    folder.mkdir(parents=True)
    (folder / ck.ADAPTER_CONFIG).write_text("{}")
    blob = safetensors_bytes(step)
    (folder / ck.ADAPTER_WEIGHTS).write_bytes(blob if whole else blob[:20])


def tree(path: Path) -> list[str]:
    """Every path under ``path`` except the run's lock file (taking the lock creates it)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.name != ".lock")


def test_dry_run_says_which_complete_step_the_run_resumes_from_and_changes_nothing(capsys, runs, art, run, model,
                                                                                   sbatch):
    for step in (0, 211, 212):
        save(model, step)
    save(model, 213, whole=False)  # a job killed while saving: the job will move it aside, the preview does not
    run.write_progress({"step": 213, "total_steps": 628})
    before = tree(art) + tree(runs)
    code, out, _ = main(capsys, *args(runs, art), "--dry_run")
    assert code == 0
    assert "run state:    will resume from step 212 of 628" in out
    assert f"checkpoints:  {model / 'checkpoints'}" in out
    assert tree(art) + tree(runs) == before and sbatch == []


def test_dry_run_of_a_finished_run_says_nothing_would_be_submitted(capsys, runs, art, run, sbatch):
    run.mark_done(628, 628)
    code, out, _ = main(capsys, *args(runs, art), "--dry_run")
    assert code == 0 and "run state:    finished at step 628; nothing to submit (use --restart for a new run)" in out


def test_dry_run_of_a_failed_run_shows_the_reason_and_the_log(capsys, runs, art, run, sbatch):
    run.mark_failed("2 failed job(s) in a row without progress", log_tail="/runs/r1/logs/r1-7.err")
    code, out, _ = main(capsys, *args(runs, art), "--dry_run")
    assert code == 0
    assert "previously marked failed: 2 failed job(s) in a row without progress; log: /runs/r1/logs/r1-7.err" in out


def test_dry_run_with_restart_says_the_old_run_would_be_moved_aside(capsys, runs, art, run, model, sbatch):
    save(model, 5)
    run.mark_done(5, 5)
    code, out, _ = main(capsys, *args(runs, art), "--dry_run", "--restart")
    assert code == 0 and "run state:    --restart: new run from step 0" in out
    assert run.done_file.exists() and ck.latest_complete(model).step == 5


def test_launching_a_finished_run_submits_and_writes_nothing(capsys, runs, art, run, sbatch):
    run.mark_done(628, 628)
    before = tree(runs)
    code, out, _ = main(capsys, *args(runs, art))
    assert code == 0 and "run r1 finished at step 628: nothing submitted (use --restart" in out
    assert sbatch == [] and tree(runs) == before


def test_restart_moves_the_run_and_its_checkpoints_aside_and_submits_a_new_run(capsys, runs, art, run, model, sbatch):
    save(model, 9)
    run.mark_done(9, 9)
    code, out, _ = main(capsys, *args(runs, art), "--restart")
    assert code == 0, out
    assert sbatch == [None]
    (old_run,) = [p for p in runs.iterdir() if p.name.startswith("r1.")]
    (old_model,) = [p for p in model.parent.iterdir() if p.name.startswith(f"{model.name}.")]
    assert (old_run / "done.json").exists() and ck.latest_complete(old_model).step == 9  # kept, not deleted
    assert not run.done_file.exists() and ck.list_checkpoints(model) == []
    assert ownership.owner_of(model)["run_dir"] == str(run.path.resolve()), "the new run owns the new folder"
    assert [r["event"] for r in ledger_lines(run)] == ["submit"]
    assert f"moved {run.path} aside" in out and f"moved {model} aside" in out


def test_restart_of_a_run_with_an_active_job_is_refused_and_moves_nothing(capsys, runs, art, run, model, sbatch,
                                                                          monkeypatch):
    save(model, 3)
    write_record(run, "submit", job_id="77")
    monkeypatch.setattr(single_run.slurm, "active_jobs", lambda ids, expected=(): {"77": "RUNNING"} if "77" in ids else {})
    before = tree(runs) + tree(art)
    code, _, err = main(capsys, *args(runs, art), "--restart")
    assert code == 2 and "already has active job(s) 77 (RUNNING)" in err and len(err.strip().splitlines()) == 1
    assert tree(runs) + tree(art) == before and sbatch == []


def test_chain_pre_submits_n_jobs_each_after_the_previous_one(capsys, runs, art, run, sbatch):
    code, out, _ = main(capsys, *args(runs, art), "--chain", "3")
    assert code == 0
    assert sbatch == [None, "afterany:1001", "afterany:1002"]
    ledger = ledger_lines(run)
    assert [(r["event"], r["job_id"], r.get("after")) for r in ledger] == [
        ("submit", "1001", None), ("chain", "1002", "1001"), ("chain", "1003", "1002")]
    assert "submitted job 1001 -> 1002 -> 1003" in out and "chain continuation" in out
    (script,) = run.scripts_dir.iterdir()
    assert "--mode chain" in script.read_text()


def test_a_new_launch_of_a_failed_run_clears_the_mark_and_keeps_it(capsys, runs, art, run, sbatch):
    run.mark_failed("broken", log_tail="/x.err")
    code, _, _ = main(capsys, *args(runs, art))
    assert code == 0 and sbatch == [None] and not run.failed_file.exists()
    (kept,) = run.path.glob("failed.*.json")
    assert json.loads(kept.read_text())["reason"] == "broken"
