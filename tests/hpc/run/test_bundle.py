"""A run's bundle and its unbundling (hpc/run/bundle.py, hpc/run/unbundle.py, python -m hpc.run):
what is carried, parts within their size, every damaged or foreign part refused with nothing
written, and the moved run's records on both sides."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hpc.run import ledger
from hpc.run.__main__ import main
from hpc.run.bundle import MANIFEST, MIB
from hpc.run.checkpoints import list_checkpoints, model_dir, step_dir
from hpc.run.ownership import OWNER_FILE, claim
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines, write_record
from tests.doubles.step_trainer import (
    OPTIMIZER_FILE,
    expected_optimizer,
    read_optimizer,
    safetensors_bytes,
    save_optimizer,
)

PROJECT = "email_agent"


def make_run(runs: Path, art: Path, name: str = "agent_008", steps: int = 5, big: int = 0) -> RunDir:
    """A run after ``steps`` steps: its records, checkpoints 0..steps with the double's optimizer state,
    validations (best: step 3), a secret, logs, ART's history; ``big`` bytes of trajectories."""
    run = RunDir(runs / name)
    folder = model_dir(art, PROJECT, name)
    run.make_dirs(run.logs_dir)
    write_record(run, "submit", job_id="101", cluster="vista", argv=["--job_name", name, "--config", "agent_008"])
    write_record(run, "job_start", job_id="101", step=0)
    write_record(run, "job_end", job_id="101", step=steps, exit_code=75, outcome="stopped_for_time")
    claim(run, folder)
    state = [0.0, 0.0]
    for step in range(steps + 1):
        target = step_dir(folder, step)
        target.mkdir(parents=True)
        (target / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "step": step}))
        (target / "adapter_model.safetensors").write_bytes(safetensors_bytes(step))
        state = expected_optimizer(step)
        save_optimizer(target, state)
    (folder / "history.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (folder / "checkpoints_incomplete").mkdir()
    (folder / "trajectories").mkdir()
    (folder / "trajectories" / "big.bin").write_bytes(os.urandom(big))
    (folder / "logs").mkdir()
    (folder / "logs" / "vllm-runtime.log").write_text("INFO vLLM log\n")
    for step, accuracy in ((2, 0.4), (3, 0.7), (4, 0.5)):
        run.record_validation({"step": step, "accuracy": accuracy}, [])
    run.write_progress({"step": steps, "total_steps": 10})
    (run.path / "steps.log").write_text("".join(f"step={s} job=101\n" for s in range(1, steps + 1)))
    (run.path / "new_kind_of_record.json").write_text("{}")  # a file a newer release writes: carried
    run.write_bytes(run.secrets_file, b"WANDB_API_KEY=secret-value\n", 0o600)
    (run.logs_dir / f"{name}-101.err").write_text("log\n")
    return run


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    places = {name: tmp_path / name for name in ("runs_a", "art_a", "runs_b", "art_b", "bundle")}
    make_run(places["runs_a"], places["art_a"])
    return places


def hpc_run(*args: str | Path) -> int:
    return main([str(arg) for arg in args])


def bundle_of(world: dict[str, Path], *extra: str) -> int:
    return hpc_run("bundle", "agent_008", "--runs_dir", world["runs_a"], "--out", world["bundle"], *extra)


def unbundle_into(world: dict[str, Path]) -> int:
    return hpc_run("unbundle", world["bundle"], "--runs_dir", world["runs_b"], "--cluster", "local",
                   "--env", f"ART_PATH={world['art_b']}")


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_an_unbundled_run_has_the_latest_and_best_checkpoints_its_records_and_no_secrets_or_logs(world) -> None:
    assert bundle_of(world) == 0
    assert unbundle_into(world) == 0

    run, folder = RunDir(world["runs_b"] / "agent_008"), model_dir(world["art_b"], PROJECT, "agent_008")
    assert [c.step for c in list_checkpoints(folder)] == [3, 5]  # the best and the latest
    source = RunDir(world["runs_a"] / "agent_008")
    for name in ("steps.log", "validation.jsonl", "progress.json", "new_kind_of_record.json"):
        assert (run.path / name).read_bytes() == (source.path / name).read_bytes()
    assert (folder / "history.jsonl").read_text() == '{"step": 1, "loss": 0.5}\n'
    assert not run.secrets_file.exists() and not run.logs_dir.exists() and not (folder / "checkpoints_incomplete").exists()
    assert not (folder / "logs").exists()  # ART's vLLM and trainer logs stay where they were written
    assert run.read_model_record()["model_dir"] == str(folder)  # this place's folder, in both records
    assert json.loads((folder / OWNER_FILE).read_text())["run_dir"] == str(run.path)
    assert [r["event"] for r in ledger_lines(run)][-1] == "moved_in"
    assert not list(world["runs_b"].glob(".unbundle-*")) and not list(folder.parent.glob(".unbundle-*"))


def test_the_optimizer_state_after_the_move_equals_the_one_before_by_value(world) -> None:
    assert bundle_of(world) == 0 and unbundle_into(world) == 0

    moved = read_optimizer(step_dir(model_dir(world["art_b"], PROJECT, "agent_008"), 5))
    before = read_optimizer(step_dir(model_dir(world["art_a"], PROJECT, "agent_008"), 5))
    assert moved == before == expected_optimizer(5) and moved != [0.0, 0.0]


def test_a_model_folder_inside_the_run_goes_inside_the_new_run(tmp_path: Path) -> None:
    runs_a, runs_b = tmp_path / "a", tmp_path / "b"
    make_run(runs_a, runs_a / "agent_008" / "art")  # the launcher's default ART_PATH: <run>/art
    assert hpc_run("bundle", "agent_008", "--runs_dir", runs_a, "--out", tmp_path / "bundle") == 0
    assert hpc_run("unbundle", tmp_path / "bundle", "--runs_dir", runs_b, "--cluster", "local") == 0

    folder = model_dir(runs_b / "agent_008" / "art", PROJECT, "agent_008")
    assert [c.step for c in list_checkpoints(folder)] == [3, 5]
    assert RunDir(runs_b / "agent_008").read_model_record()["model_dir"] == str(folder)


def test_parts_are_at_most_part_mib_and_the_manifest_gives_each_size_and_sha256(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", tmp_path / "art", big=3 * MIB)
    out = tmp_path / "bundle"
    assert hpc_run("bundle", "agent_008", "--runs_dir", tmp_path / "runs", "--out", out, "--part_mib", "1") == 0

    manifest = json.loads((out / MANIFEST).read_text())
    assert len(manifest["parts"]) >= 4
    for row in manifest["parts"]:
        assert (out / row["name"]).stat().st_size == row["size"] <= MIB
    assert hpc_run("unbundle", out, "--runs_dir", tmp_path / "b", "--cluster", "local",
                   "--env", f"ART_PATH={tmp_path / 'art_b'}") == 0
    big = model_dir(tmp_path / "art_b", PROJECT, "agent_008") / "trajectories" / "big.bin"
    assert big.read_bytes() == (model_dir(tmp_path / "art", PROJECT, "agent_008") / "trajectories" / "big.bin").read_bytes()


def test_the_source_records_the_move_and_refuses_a_second_bundle_until_reclaimed(world, capsys) -> None:
    assert bundle_of(world) == 0
    source = RunDir(world["runs_a"] / "agent_008")
    moved = ledger.moved_away(ledger.read(source))
    assert moved is not None and moved.step == 5 and moved.to == str(world["bundle"].resolve())

    assert hpc_run("bundle", "agent_008", "--runs_dir", world["runs_a"], "--out", world["bundle"].parent / "b2") == 2
    assert "moved to" in capsys.readouterr().err and not (world["bundle"].parent / "b2").exists()
    assert hpc_run("reclaim", "agent_008", "--runs_dir", world["runs_a"]) == 0
    assert ledger.moved_away(ledger.read(source)) is None


# -- refusals: one line, exit 2, nothing written ------------------------------------------------------


def part_path(world: dict[str, Path], number: int = 1) -> Path:
    manifest = json.loads((world["bundle"] / MANIFEST).read_text())
    return world["bundle"] / manifest["parts"][number - 1]["name"]


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def another_bundle(tmp_path: Path, name: str) -> Path:
    """A bundle of another run (or, with the same name, another bundle of the same run)."""
    make_run(tmp_path / f"other_runs_{name}", tmp_path / f"other_art_{name}", name=name)
    out = tmp_path / f"other_bundle_{name}"
    assert hpc_run("bundle", name, "--runs_dir", tmp_path / f"other_runs_{name}", "--out", out) == 0
    return out


def missing(world, tmp_path) -> None:
    part_path(world).unlink()


def short(world, tmp_path) -> None:
    path = part_path(world)
    path.write_bytes(path.read_bytes()[:-100])


def flipped(world, tmp_path) -> None:
    flip_a_bit(part_path(world))


def foreign(world, tmp_path) -> None:
    other = another_bundle(tmp_path, "agent_009")
    (other_part,) = [p for p in other.iterdir() if ".part" in p.name]
    shutil.copy(other_part, part_path(world))  # another run's part under this part's name


def second_bundle_of_the_same_run(world, tmp_path) -> None:
    other = another_bundle(tmp_path, "agent_008")
    for part in other.iterdir():
        if ".part" in part.name:
            shutil.copy(part, world["bundle"] / part.name)  # beside this bundle's parts


def second_bundles_part_under_this_name(world, tmp_path) -> None:
    other = another_bundle(tmp_path, "agent_008")
    (other_part,) = [p for p in other.iterdir() if ".part" in p.name]
    shutil.copy(other_part, part_path(world))


def name_already_there(world, tmp_path) -> None:
    (world["runs_b"] / "agent_008").mkdir(parents=True)


@pytest.mark.parametrize("damage, said", [
    (missing, "is missing"),
    (short, "short"),
    (flipped, "sha256"),
    (foreign, "run agent_009's bundle"),
    (second_bundle_of_the_same_run, "another bundle of run agent_008"),
    (second_bundles_part_under_this_name, "another bundle of run agent_008"),
    (name_already_there, "already in"),
])
def test_a_damaged_foreign_or_second_bundle_or_a_name_already_there_is_refused_with_nothing_written(
        world, tmp_path, capsys, damage, said) -> None:
    assert bundle_of(world) == 0
    damage(world, tmp_path)
    runs_before, art_before = tree(world["runs_b"]), tree(world["art_b"])

    assert unbundle_into(world) == 2

    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err and "nothing written" in err, err
    assert tree(world["runs_b"]) == runs_before and tree(world["art_b"]) == art_before


def test_a_folder_without_a_manifest_is_no_bundle(world, capsys) -> None:
    assert bundle_of(world) == 0
    (world["bundle"] / MANIFEST).unlink()
    assert unbundle_into(world) == 2
    assert "no readable manifest.json" in capsys.readouterr().err and not world["runs_b"].exists()


def test_bundle_refuses_a_folder_that_is_not_empty_and_a_part_size_out_of_range(world, capsys) -> None:
    world["bundle"].mkdir()
    (world["bundle"] / "something").write_text("x")
    assert bundle_of(world) == 2
    assert "not a new or empty folder" in capsys.readouterr().err
    assert hpc_run("bundle", "agent_008", "--runs_dir", world["runs_a"], "--out", world["bundle"] / "x",
                   "--part_mib", "0") == 2
    assert "--part_mib 0 is out of range" in capsys.readouterr().err
    assert ledger.moved_away(ledger.read(RunDir(world["runs_a"] / "agent_008"))) is None


def test_after_a_move_the_jobs_of_the_old_cluster_are_not_this_runs_jobs(world) -> None:
    assert bundle_of(world) == 0 and unbundle_into(world) == 0
    run = RunDir(world["runs_b"] / "agent_008")
    assert ledger.job_ids(ledger.read(run)) == []  # 101 was vista's job: squeue here must not be asked about it
    write_record(run, "submit", job_id="7", cluster="local")
    assert ledger.job_ids(ledger.read(run)) == ["7"]


def test_reclaim_and_bundle_of_a_run_that_is_not_there_write_nothing(tmp_path, capsys) -> None:
    assert hpc_run("reclaim", "nosuch", "--runs_dir", tmp_path) == 2
    assert hpc_run("bundle", "nosuch", "--runs_dir", tmp_path, "--out", tmp_path / "out") == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2 and list(tmp_path.iterdir()) == []


def test_a_run_whose_lease_a_job_holds_is_not_bundled(world, capsys) -> None:
    import time

    from hpc.run import lease

    run = RunDir(world["runs_a"] / "agent_008")
    lease.write(run, lease.fresh("102", 0, os.getpid(), time.time()))
    assert bundle_of(world) == 2
    err = capsys.readouterr().err
    assert "is held by job 102" in err and err.count("\n") == 1
    assert not world["bundle"].exists() and ledger.moved_away(ledger.read(run)) is None


def test_a_queue_that_does_not_answer_is_no_proof_of_none_and_nothing_is_bundled(world, capsys, monkeypatch) -> None:
    from hpc.slurm import calls

    def failing(ids, *args, **kwargs):
        raise calls.SlurmFailed("squeue: error: Socket timed out on send/recv operation", 1, "")

    monkeypatch.setattr(calls, "queue_states", failing)
    assert bundle_of(world) == 2
    err = capsys.readouterr().err
    assert "Slurm did not say whether its jobs are still queued" in err and err.count("\n") == 1
    assert not world["bundle"].exists()
    assert ledger.moved_away(ledger.read(RunDir(world["runs_a"] / "agent_008"))) is None
