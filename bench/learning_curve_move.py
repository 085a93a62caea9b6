"""Seed 1 of the learning bench moved to another machine mid-training, and continued there.

At the end of ``python -m bench.learning_curve start`` (after collect), seed 1's run is bundled with
``hpc.run.bundle`` into WORK/move/bundle (parts of at most PART_MIB MiB, so each leaves a lent GPU
machine with its files), beside a copy of the warmed base model (WORK/move/model) and the sha256
of each of its files (WORK/move/model.sha256.json). On a fresh machine ``python -m bench.learning_curve
resume --move DIR --steps N`` checks the model's files against those hashes (and against a
WORK/model already there), unbundles the run with ``hpc.run.unbundle`` into WORK, trains seed 1
for N more steps, and checks its steps: each once and in order from 1, the first new one the step
after the bundle's (ART's ``iterate_dataset`` starts at the latest checkpoint's step: the data's
position), its LoRA continued from the bundle's checkpoint. What does not continue, and is said:
ART's Unsloth keeps AdamW's moments in memory, never on disk, so they start afresh after a move as
after any restart of a job (the same holds for the 14B stage, trainer/proof/full_size.py).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from hpc.errors import UsageError
from hpc.job.workload_env import HPC_SIGNAL_GRACE, HPC_VLLM_PORT
from trainer.proof.figures import check_consecutive
from trainer.proof.processes import Process, after_steps, run_together
from trainer.proof.workspace import ProofFailed, Work

MOVED_RUN = "seed1"
PART_MIB = 15  # a part small enough to come back from a lent machine as a plain file
MODEL_HASHES = "model.sha256.json"


def move_folder(work: Work) -> Path:
    return work.root / "move"


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of each file of ``folder`` (by its path inside it)."""
    from hpc.run.unbundle import sha256_of

    return {str(path.relative_to(folder)): sha256_of(path) for path in sorted(folder.rglob("*")) if path.is_file()}


def bundle_seed(work: Work) -> list[str]:
    """Seed 1's run bundled into WORK/move/bundle, the base model copied beside it with its hashes."""
    from hpc.run.bundle import bundle

    move = move_folder(work)
    if move.exists():
        raise ProofFailed(f"{move} is there already: a bundle is made once, into a new folder")
    began = time.monotonic()
    made = bundle(work.for_run(MOVED_RUN).run, move / "bundle", PART_MIB, to=f"{move} (python -m bench.learning_curve resume)")
    shutil.copytree(work.model, move / "model")
    (move / MODEL_HASHES).write_text(json.dumps(file_hashes(move / "model"), indent=1) + "\n")
    sizes = [part["size"] for part in made.manifest["parts"]]
    return [f"{MOVED_RUN} bundled at step {made.step} into {move / 'bundle'}: {sum(sizes) / 2**20:.1f} MiB in "
            f"{len(sizes)} part(s) of at most {PART_MIB} MiB, the base model beside it ({MODEL_HASHES}), "
            f"{time.monotonic() - began:.1f} s; continue it elsewhere: python -m bench.learning_curve resume --move DIR "
            "--steps N"]


def move_problem(move: Path) -> str | None:
    """Why ``move`` is no folder the move stage wrote, or None."""
    if (move / MODEL_HASHES).is_file() and (move / "bundle").is_dir():
        return None
    return (f"--move {move} is no learning-bench move (no {MODEL_HASHES} or bundle/ in it): accepted the WORK/move "
            "folder python -m bench.learning_curve start wrote")


def placed_model(work: Work, move: Path) -> str:
    """The bundle's base model at WORK/model, its files as hashed where it was trained (ProofFailed otherwise)."""
    problem = move_problem(move)
    if problem is not None:
        raise ProofFailed(problem)
    recorded = json.loads((move / MODEL_HASHES).read_text())
    if file_hashes(move / "model") != recorded:
        raise ProofFailed(f"{move / 'model'} is not the model seed 1 trained on ({MODEL_HASHES} differs)")
    if work.model.exists():
        if file_hashes(work.model) != recorded:
            raise ProofFailed(f"{work.model} is there and is not the model seed 1 trained on ({MODEL_HASHES} differs)")
        return f"{work.model}: the base model seed 1 trained on ({len(recorded)} files, sha256 as recorded)"
    shutil.copytree(move / "model", work.model)
    return f"{work.model}: copied from {move / 'model'} ({len(recorded)} files, sha256 as recorded)"


def unbundled(work: Work, move: Path) -> int:
    """Seed 1's run made here from the bundle; the step it was bundled at."""
    from hpc.run.unbundle import unbundle

    run = work.for_run(MOVED_RUN)
    try:
        arrived = unbundle(move / "bundle", run.runs, str(run.art))
    except UsageError as error:
        raise ProofFailed(f"unbundle {move / 'bundle'}: {error}") from None
    if arrived.place.model_dir != run.model_dir:
        raise ProofFailed(f"the bundle's model folder went to {arrived.place.model_dir}, not {run.model_dir}")
    return arrived.bundle.step


def resume_seed(work: Work, move: Path, steps: int, gpus: list[str], extra: tuple[str, ...] = (),
                **env: str) -> list[str]:
    """Seed 1 continued here for ``steps`` steps from ``move``, and what continued checked."""
    from bench.learning_curve import CONFIG, gpu_mode, run_specs

    lines = [placed_model(work, move)]
    step = unbundled(work, move)
    spec = next(spec for spec in run_specs(gpus) if spec.name == MOVED_RUN)
    run = work.for_run(MOVED_RUN, spec.devices)
    before = check_consecutive(run)
    lines.append(f"unbundled {move / 'bundle'} at step {step} ({len(before)} steps recorded): continuing {steps}")
    argv = ["-m", "trainer.train", "--config", CONFIG, *spec.overrides(work.model, gpu_mode(gpus)), *extra,
            *enough_data(extra, step + steps)]
    process = Process(run, f"{MOVED_RUN}-resumed", argv, until=after_steps(run, steps),
                      env={HPC_VLLM_PORT: str(spec.port), HPC_SIGNAL_GRACE: "0", **env})
    [(code, log, seconds)] = run_together([process], timeout=3600)
    return lines + [f"{MOVED_RUN} resumed: exit {code} after {seconds:.0f} s"] + continued(run, before, step, steps)


def enough_data(extra: tuple[str, ...], steps: int) -> list[str]:
    """The override that gives the run ``steps`` steps of data where the config gives fewer (a seed
    that reached the config's last step is continued past it). The training questions are shuffled
    whole, then cut (trainer.agent.scenarios.load_scenarios), so a longer cut keeps the first ones
    in their order: the data's position is the same."""
    from bench.learning_curve import CONFIG
    from trainer.training.config import load_config

    config = load_config(CONFIG, list(extra))
    needed = config.groups_per_step * steps
    size = config.training_dataset_size
    return [] if size is None or size >= needed else [f"training_dataset_size={needed}"]


def continued(run: Work, before: list[int], bundled_at: int, steps: int) -> list[str]:
    """The checks after the resume: no step lost or repeated, the first new one the bundle's next
    (the data's position and the LoRA's checkpoint), at least ``steps`` new ones."""
    from hpc.run.checkpoints import latest_complete

    numbers = check_consecutive(run)
    new = numbers[len(before):]
    if not new or new[0] != bundled_at + 1 or len(new) < steps:
        raise ProofFailed(f"{run.run_name}: after the move steps {new}, not {steps} from step {bundled_at + 1}")
    latest = latest_complete(run.model_dir)
    return [f"the run's steps 1-{numbers[-1]}: none lost, none repeated; the first after the move {new[0]} (the data "
            f"continued from the bundle's step {bundled_at}, the LoRA from its checkpoint); latest checkpoint "
            f"{latest.step if latest else None}",
            "AdamW's moments: ART's Unsloth keeps them in memory only, so they start afresh after a move as after "
            "any job's restart"]
