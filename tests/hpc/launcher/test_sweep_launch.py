"""Launching sweeps without Slurm: the dry run's expansion, packing and scripts, and refusals."""

import json
import subprocess
from pathlib import Path

import pytest

from hpc.launcher import launch, single_run
from hpc.run.rundir import SweepDir


def run_main(capsys, *argv):
    code = launch.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sweep_args(runs_dir: Path, *extra: str) -> list[str]:
    return ["--cluster", "local", "--job_name", "lr_sweep", "--time_limit", "30", "--runs_dir", str(runs_dir),
            "--dry_run", *extra]


@pytest.fixture(autouse=True)
def no_sbatch(monkeypatch):
    monkeypatch.setattr(single_run.slurm, "sbatch_path", lambda: None)


def test_the_dry_run_shows_every_run_its_values_and_one_script_and_writes_nothing(capsys, tmp_path):
    code, out, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "learning_rate=1e-5,2e-5,4e-5",
                                                  "--sweep", "seed=1,2"))
    assert code == 0, err
    assert "lr_sweep: 6 run(s), 6 to launch in 6 job(s)" in out
    rows = [" ".join(line.split()) for line in out.splitlines()]
    assert "lr_sweep.learning_rate=4e-5.seed=2 learning_rate=4e-5 seed=2 job 6 new run: will start from step 0" in rows
    assert out.count("#!/bin/bash") == 1 and "learning_rate=1e-5 seed=1 gpu_mode=shared" in out
    assert out.count("sbatch --parsable") == 6
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_packed_runs_share_a_job_each_on_its_own_gpu(capsys, tmp_path):
    code, out, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2,3", "--pack", "2"))
    assert code == 0, err
    assert "3 run(s), 3 to launch in 2 job(s) (2 run(s) per job" in out
    assert ("job 1: 2 charged; 2 used; GPU 0: lr_sweep.seed=1 (training and vLLM); "
            "GPU 1: lr_sweep.seed=2 (training and vLLM)") in out
    assert "job 2: 1 charged; 1 used; GPU 0: lr_sweep.seed=3 (training and vLLM)" in out
    pack_script, member_script = out.split("# the script of its run ")
    assert "#SBATCH --gres=gpu:2" in pack_script and "python -m hpc.job.pack slots" in pack_script
    assert "--resize 1 0" in pack_script  # local charges GPUs as asked: a smaller pack asks for fewer
    assert "python -m hpc.job.continuation end" in member_script and "--packed" in member_script
    assert "module load" not in member_script and "hpc.job.pack" not in member_script


def test_a_bad_value_fails_before_anything_naming_the_run_and_the_value(capsys, tmp_path):
    code, _, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "learning_rate=1e-5,fast"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "sweep run lr_sweep.learning_rate=fast" in err and "'fast'" in err and "learning_rate" in err


@pytest.mark.parametrize("extra, fragment", [
    (["--sweep", "seed=1,2", "--pack", "3"], "invalid --pack 3: a local node has 2 GPUs"),
    (["--pack", "2"], "--pack 2 applies to sweeps"),
    (["--sweep", "seed=1,2", "--pack", "2", "--chain", "3"], "use --pack off with --chain"),
    (["--sweep", "seed=1,2", "--train_arg", "seed=3"], "'seed' is also set by --train_arg"),
    (["--sweep", "gpu_mode=shared,dedicated", "--pack", "2"], "need different numbers of GPUs (gpu_mode)"),
    (["--sweep", "seed"], "invalid --sweep 'seed'"),
    (["--judge_gpus", "1"], "--judge_gpus needs --judge_serve"),
    (["--judge_serve", "Qwen/Qwen2.5-32B-Instruct", "--judge_gpus", "2"], "invalid --judge_gpus 2: accepted 1..1"),
    (["--judge_serve", "bad model;rm"], "invalid --judge_serve 'bad model;rm'"),
])
def test_bad_sweep_pack_and_judge_flags_are_one_line_with_exit_2(capsys, tmp_path, extra, fragment):
    code, _, err = run_main(capsys, *sweep_args(tmp_path, *extra))
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_a_sweep_cannot_take_the_name_of_a_run(capsys, tmp_path):
    (tmp_path / "lr_sweep").mkdir()
    (tmp_path / "lr_sweep" / "ledger.jsonl").write_text("{}\n")
    code, _, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2"))
    assert code == 2 and "is a run, not a sweep" in err


def folder_state(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def launch_for_real(monkeypatch, capsys, runs: Path, *extra: str) -> tuple[int, str]:
    """A launch (not a dry run) against a Slurm that accepts everything."""
    monkeypatch.setattr(single_run.slurm, "require_sbatch", lambda: "/usr/bin/sbatch")
    monkeypatch.setattr(single_run.slurm, "submit", lambda script, dependency=None: "77")
    monkeypatch.setattr(single_run.slurm, "active_jobs", lambda ids: {})
    code, _, err = run_main(capsys, *[a for a in sweep_args(runs, *extra) if a != "--dry_run"], "--no_preflight")
    return code, err


@pytest.mark.parametrize("pack", ["off", "2"])
def test_a_sweep_named_like_a_run_without_a_ledger_writes_nothing_into_its_folder(capsys, tmp_path, monkeypatch, pack):
    run = tmp_path / "lr_sweep"  # a run whose launch stopped after writing its script and secrets
    (run / "scripts").mkdir(parents=True)
    (run / "scripts" / "20260101T000000Z-1.sbatch").write_text("#!/bin/bash\n")
    (run / "secrets.env").write_text("WANDB_API_KEY=k\n")
    (run / "secrets.env").chmod(0o600)
    before = folder_state(run)
    code, _, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2", "--pack", pack))
    assert code == 2 and "'lr_sweep' is not a sweep" in err and "no sweep.json" in err, err
    code, err = launch_for_real(monkeypatch, capsys, tmp_path, "--sweep", "seed=1,2", "--pack", pack)
    assert code == 2 and "is not a sweep" in err and len(err.splitlines()) == 1, err
    assert folder_state(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["lr_sweep"]


def test_a_sweeps_run_named_like_another_sweeps_folder_is_refused(capsys, tmp_path, monkeypatch):
    other = SweepDir(tmp_path / "lr_sweep.seed=1")
    other.write_record({"sweep": "lr_sweep.seed=1", "runs": [{"name": "lr_sweep.seed=1.x=1", "values": [["x", "1"]]}]})
    before = folder_state(other.path)
    for launcher in (lambda: run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2"))[::2],
                     lambda: launch_for_real(monkeypatch, capsys, tmp_path, "--sweep", "seed=1,2")):
        code, err = launcher()
        assert code == 2 and "sweep run lr_sweep.seed=1 (seed=1)" in err and "is a sweep's folder" in err, err
    assert folder_state(other.path) == before and not (tmp_path / "lr_sweep").exists()


def test_launching_a_sweep_by_name_alone_acts_on_all_its_runs(capsys, tmp_path):
    SweepDir(tmp_path / "lr_sweep").write_record(
        {"sweep": "lr_sweep", "runs": [{"name": "lr_sweep.seed=1", "values": [["seed", "1"]]},
                                       {"name": "lr_sweep.seed=2", "values": [["seed", "2"]]}]})
    done = tmp_path / "lr_sweep.seed=2"
    done.mkdir()
    (done / "done.json").write_text(json.dumps({"final_step": 630}))
    code, out, err = run_main(capsys, *sweep_args(tmp_path))
    assert code == 0, err
    assert "2 run(s), 1 to launch in 1 job(s)" in out
    rows = [" ".join(line.split()) for line in out.splitlines()]
    assert "lr_sweep.seed=2 seed=2 - finished at step 630: left alone" in rows


def test_a_served_judge_gets_its_own_gpu_and_the_runs_its_address(capsys, tmp_path):
    code, out, err = run_main(capsys, "--cluster", "jureca", "--job_name", "j", "--time_limit", "60", "--runs_dir",
                              str(tmp_path), "--dry_run", "--env", "BUDGET_ACCOUNTS=p", "--env", "SCRATCH=/s",
                              "--env", "USER=u", "--env", "PROJECT=/p", "--sweep", "seed=1,2,3,4",
                              "--judge_serve", "Qwen/Qwen2.5-32B-Instruct")
    assert code == 0, err
    assert "4 run(s), 4 to launch in 2 job(s) (3 run(s) per job" in out
    assert ("job 1: 4 charged (4-GPU nodes are charged whole); 4 used; GPU 0: j.seed=1 (training and vLLM); "
            "GPU 1: j.seed=2 (training and vLLM); GPU 2: j.seed=3 (training and vLLM); GPU 3: judge") in out
    assert "python -m hpc.job.pack devices --first 3 --count 1" in out
    assert "export JUDGE_API_BASE=http://127.0.0.1:18765/v1" in out
    assert "ssh " not in out  # the judge is in the job: no tunnel to the login node


def test_secrets_stay_out_of_every_script_of_a_sweep(capsys, tmp_path):
    code, out, err = run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2", "--pack", "2",
                                                  "--env", "GEMINI_API_KEY=sk-very-secret-1234"))
    assert code == 0, err
    assert "sk-very-secret-1234" not in out + err


def test_every_script_of_a_dry_run_passes_bash_n(capsys, tmp_path):
    code, out, _ = run_main(capsys, *sweep_args(tmp_path, "--sweep", "seed=1,2", "--pack", "2"))
    scripts = ["#!/bin/bash" + part.split("\n# ", 1)[0] for part in out.split("#!/bin/bash")[1:]]
    assert code == 0 and len(scripts) == 2
    for script in scripts:
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
