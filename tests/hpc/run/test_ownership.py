"""Run integrity at launch (hpc/run/ownership.py, hpc/run/init_from.py): each run owns its model
folder, a launch never trains in another run's, --init_from copies a starting adapter, and
the ledger records the arguments without secrets. Slurm is stood in for (the real-Slurm
proof is tests/hpc/run/test_integrity_slurm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc.job import begin_hook
from hpc.job.exit_codes import EXIT_NOT_OURS
from hpc.run import checkpoints as ck
from hpc.run import ownership
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.hpc.launcher.test_launch_resume import main, save, sbatch, tree  # sbatch: a fixture


@pytest.fixture
def art(tmp_path: Path) -> Path:
    return tmp_path / "scratch" / "art"


def launch_args(runs: Path, art: Path, name: str, *extra: str) -> list[str]:
    return ["--cluster", "local", "--job_name", name, "--time_limit", "30", "--runs_dir", str(runs),
            "--env", f"ART_PATH={art}", "--no_preflight", *extra]  # the preflight gate: test_queue_preflight.py


def model_of(art: Path, name: str) -> Path:
    return ck.model_dir(art, "email_agent", name)


def test_two_job_names_with_one_art_path_get_two_folders_each_owned_by_its_run(capsys, tmp_path, art, sbatch):
    runs = tmp_path / "runs"
    for name in ("lr1", "lr2"):
        assert main(capsys, *launch_args(runs, art, name))[0] == 0
    for name in ("lr1", "lr2"):
        run = RunDir(runs / name)
        assert run.read_model_record()["model_dir"] == str(model_of(art, name).resolve())
        assert ownership.owner_of(model_of(art, name))["run_dir"] == str(run.path.resolve())


def test_the_same_job_name_under_another_runs_dir_is_refused_naming_both_runs(capsys, tmp_path, art, sbatch):
    assert main(capsys, *launch_args(tmp_path / "runs_a", art, "exp"))[0] == 0
    save(model_of(art, "exp"), 42)
    before = tree(art)
    code, _, err = main(capsys, *launch_args(tmp_path / "runs_b", art, "exp"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"belongs to run exp ({(tmp_path / 'runs_a' / 'exp').resolve()})" in err
    assert f"not to run exp ({tmp_path / 'runs_b' / 'exp'})" in err and "--init_from exp[:STEP]" in err
    assert tree(art) == before and not (tmp_path / "runs_b").exists() and sbatch == [None]


def test_a_run_whose_art_path_moved_is_told_where_its_checkpoints_are(capsys, tmp_path, art, sbatch):
    runs = tmp_path / "runs"
    assert main(capsys, *launch_args(runs, art, "exp"))[0] == 0
    code, _, err = main(capsys, *launch_args(runs, tmp_path / "elsewhere", "exp"), "--dry_run")
    assert code == 2 and f"run exp trains in {model_of(art, 'exp').resolve()}" in err and "ART_PATH" in err


def test_a_folder_from_before_ownership_records_is_adopted_and_the_dry_run_says_so(capsys, tmp_path, art, sbatch):
    save(model_of(art, "old"), 7)
    code, out, _ = main(capsys, *launch_args(tmp_path / "runs", art, "old"), "--dry_run")
    assert code == 0 and "(this run's own; adopting" in out and "will resume from step 7" in out
    assert main(capsys, *launch_args(tmp_path / "runs", art, "old"))[0] == 0
    assert ownership.owner_of(model_of(art, "old"))["job_name"] == "old"


def test_init_from_copies_the_adapter_as_step_0_of_the_new_runs_own_folder(capsys, tmp_path, art, sbatch):
    runs = tmp_path / "runs"
    assert main(capsys, *launch_args(runs, art, "base"))[0] == 0
    for step in (0, 1, 2):
        save(model_of(art, "base"), step)
    code, out, _ = main(capsys, *launch_args(runs, art, "tuned", "--init_from", "base:1"), "--dry_run")
    assert code == 0 and "will start from run base's step 1" in out and not (runs / "tuned").exists()
    assert main(capsys, *launch_args(runs, art, "tuned", "--init_from", "base:1"))[0] == 0
    copied = ck.step_dir(model_of(art, "tuned"), 0)
    assert (copied / ck.ADAPTER_WEIGHTS).read_bytes() == (ck.step_dir(model_of(art, "base"), 1)
                                                           / ck.ADAPTER_WEIGHTS).read_bytes()
    assert [c.step for c in ck.list_checkpoints(model_of(art, "base"))] == [0, 1, 2], "the source is only read"
    lineage = RunDir(runs / "tuned").read_model_record()["init_from"]
    assert (lineage["run"], lineage["step"]) == ("base", 1)


def test_init_from_a_checkpoint_others_may_write_copies_it_writable_by_the_owner_alone(capsys, tmp_path, art,
                                                                                       sbatch):
    runs = tmp_path / "runs"
    assert main(capsys, *launch_args(runs, art, "base"))[0] == 0
    source = save(model_of(art, "base"), 1) or ck.step_dir(model_of(art, "base"), 1)
    for path in [source, *source.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    assert main(capsys, *launch_args(runs, art, "tuned", "--init_from", "base:1"))[0] == 0
    copied = ck.step_dir(model_of(art, "tuned"), 0)
    modes = {str(p): oct(p.stat().st_mode & 0o777) for p in [copied, *copied.rglob("*")]}
    assert modes and not [p for p, mode in modes.items() if int(mode, 8) & 0o022], modes


@pytest.mark.parametrize("spec, fragment", [
    ("base:9", "run base has no complete checkpoint at step 9 (complete steps: 0, 2)"),
    ("nobody", "is not a run directory with checkpoints"),
    ("base:x", "expected RUN or RUN:STEP"),
])
def test_init_from_a_missing_or_incomplete_checkpoint_is_one_line(capsys, tmp_path, art, sbatch, spec, fragment):
    runs = tmp_path / "runs"
    assert main(capsys, *launch_args(runs, art, "base"))[0] == 0
    save(model_of(art, "base"), 0)
    save(model_of(art, "base"), 2)
    save(model_of(art, "base"), 9, whole=False)
    code, _, err = main(capsys, *launch_args(runs, art, "tuned", "--init_from", spec))
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (runs / "tuned").exists()


def test_init_from_into_a_run_that_has_checkpoints_needs_restart(capsys, tmp_path, art, sbatch):
    runs = tmp_path / "runs"
    for name in ("base", "tuned"):
        assert main(capsys, *launch_args(runs, art, name))[0] == 0
        save(model_of(art, name), 0)
    code, _, err = main(capsys, *launch_args(runs, art, "tuned", "--init_from", "base"))
    assert code == 2 and "already has checkpoints" in err and "--restart" in err
    assert main(capsys, *launch_args(runs, art, "tuned", "--init_from", "base", "--restart"))[0] == 0


def test_restart_never_moves_a_folder_another_existing_run_owns(capsys, tmp_path, art, sbatch):
    assert main(capsys, *launch_args(tmp_path / "a", art, "exp"))[0] == 0
    save(model_of(art, "exp"), 3)
    code, _, err = main(capsys, *launch_args(tmp_path / "b", art, "exp", "--restart"))
    assert code == 2 and "belongs to run exp" in err
    assert ck.latest_complete(model_of(art, "exp")).step == 3


def test_the_ledger_records_the_arguments_with_secret_values_starred(capsys, tmp_path, art, sbatch):
    runs = tmp_path / "runs"
    secret = "sk-live-0123456789"
    code, _, _ = main(capsys, *launch_args(runs, art, "s", "--env", f"GEMINI_API_KEY={secret}",
                                           f"--env=JUDGE_URL=https://u:{secret}@judge", "--env", "PLAIN=visible"))
    assert code == 0
    (record,) = ledger_lines(RunDir(runs / "s"))
    assert "--env" in record["argv"] and "GEMINI_API_KEY=***" in record["argv"]
    # a URL holding a password is a secret whatever its name (hpc/secret_names.py): starred whole
    assert "--env=JUDGE_URL=***" in record["argv"] and "PLAIN=visible" in record["argv"]
    assert secret not in (runs / "s" / "ledger.jsonl").read_text()


def test_the_jobs_begin_hook_refuses_a_folder_another_run_owns_and_marks_the_run_failed(tmp_path, capsys):
    model = tmp_path / "art" / "p" / "models" / "exp"
    other, mine = RunDir(tmp_path / "a" / "exp"), RunDir(tmp_path / "b" / "exp")
    other.path.mkdir(parents=True)
    ownership.claim(other, model)
    assert begin_hook.begin(mine, model, "123", 0) == EXIT_NOT_OURS
    assert "belongs to run exp" in mine.read_failed()["reason"]
    assert not any(r["event"] == "job_start" for r in ledger_lines(mine))
    assert begin_hook.begin(other, model, "124", 0) == 0
    assert json.loads(other.model_record_file.read_text())["model_dir"] == str(model.resolve())
