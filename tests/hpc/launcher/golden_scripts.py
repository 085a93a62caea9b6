"""Golden job scripts: what the launcher renders for each cluster and mode, committed under golden/.

A change to a template, to the job's environment (hpc/job/workload_env.py) or to what the
launcher puts into a script shows up as a diff of these files (tests/hpc/launcher/test_golden_scripts.py).
After an intended change, regenerate them and commit the diff with the change:

    .venv/bin/python -m tests.hpc.launcher.golden_scripts --update

Each script is rendered by the launcher's own path (the flags parsed by ``hpc.launch``'s parser,
``single_run.spec_from_args``, a sweep's plan for a pack job), for a fixed user: HOME, USER and the
clusters' variables (SCRATCH, WORK, PROJECT, budgets) have made-up values, the repository's own
``.env`` is left out, and what still differs between machines is replaced by a placeholder
(``<repo>``, ``<venv>``, ``<runs>``, ``<launch>``: the launch id in a script's name). So the files
are the same on every machine. Nothing is written or submitted: the runs directory is a temporary
folder that stays empty.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from hpc.errors import UsageError
from hpc.launcher import jobspec, launch, single_run, sweep_launch
from hpc.launcher.clusters import load_registry

REPO = Path(__file__).resolve().parents[3]
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
CLUSTERS = ("vista", "lonestar6", "jureca", "jupiter", "juwels_booster", "local")
JUDGE = "Qwen/Qwen2.5-7B-Instruct"
# A 7B base model on sequences of 16384 tokens: the trainer's config fits every cluster's GPUs (agent_008's
# 14B, or a 7B at 32768 tokens, does not fit 40 GB: hpc/launcher/gpu_memory.py).
BASE_FLAGS = ("--job_name", "golden", "--time_limit", "1:00:00", "--train_arg", "base_model=Qwen/Qwen2.5-7B-Instruct",
              "--train_arg", "max_seq_length=16384")
# What the dotenv files may refer to, fixed: a made-up user on every cluster.
USER_ENV = {"HOME": "/home/golden", "USER": "golden", "SCRATCH": "/scratch/golden", "WORK": "/work/golden",
            "PROJECT": "/p/project/golden", "BUDGET_ACCOUNTS": "golden-budget", "TACC_ACCOUNT": "golden-account"}
LAUNCH_ID = re.compile(r"\d{8}T\d{6}Z-\d+")


@dataclass(frozen=True)
class Mode:
    """One way of launching: its flags (beyond the cluster, name and time limit)."""

    name: str
    flags: tuple[str, ...]
    sweep: bool = False  # rendered as a sweep's pack job: the pack's script and its first run's


MODES = (
    Mode("one-node", ()),
    Mode("multi-node", ("--num_nodes", "2")),
    Mode("pack", ("--sweep", "seed=1,2", "--pack", "2", "--train_arg", "gpu_mode=shared"), sweep=True),
    Mode("judge-served", ("--judge_serve", JUDGE)),
    Mode("dedicated", ("--train_arg", "gpu_mode=dedicated")),
)


@dataclass(frozen=True)
class Golden:
    """One golden file: its name, and the script it holds (None: the mode does not apply to the cluster)."""

    name: str
    script: str | None
    why_not: str = ""

    @property
    def path(self) -> Path:
        return GOLDEN_DIR / f"{self.name}.sbatch"


@contextmanager
def fixed_machine() -> Iterator[None]:
    """The made-up user's environment, without the repository's own .env (a developer's keys and settings)."""
    read = jobspec.read_dotenv
    own_env = REPO / ".env"

    def read_dotenv(path: Path) -> jobspec.EnvLayer:
        return jobspec.EnvLayer(str(path), {}) if Path(path) == own_env else read(path)

    environ = {name: value for name, value in os.environ.items() if name in ("PATH", "LANG", "LC_ALL")}
    with mock.patch.dict(os.environ, {**environ, **USER_ENV}, clear=True), \
            mock.patch.object(jobspec, "read_dotenv", read_dotenv):
        yield


def normalise(script: str, runs: Path) -> str:
    """The script with what differs between machines replaced by placeholders."""
    for path, placeholder in ((runs, "<runs>"), (Path(sys.prefix), "<venv>"), (REPO, "<repo>")):
        script = script.replace(str(path), placeholder)
    return LAUNCH_ID.sub("<launch>", script)


def arguments(cluster: str, mode: Mode, runs: Path) -> argparse.Namespace:
    return launch.build_parser().parse_args(["--cluster", cluster, *BASE_FLAGS, "--runs_dir", str(runs), *mode.flags])


def render(cluster: str, mode: Mode, runs: Path) -> list[str]:
    """The mode's scripts on ``cluster``: one, or a pack job's and its first run's."""
    args = arguments(cluster, mode, runs)
    registry = load_registry()
    if not mode.sweep:
        return [single_run.render_script(single_run.spec_from_args(args, registry))]
    plan = sweep_launch.plan(args, registry)
    if plan.per_job < 2:
        raise UsageError(f"{cluster} packs no runs of {plan.gpus_per_run} GPU(s) together")
    return [single_run.render_script(sweep_launch.job_specs(plan)[0]),
            sweep_launch.packed_script(plan.groups()[0][0].spec)]


def goldens() -> list[Golden]:
    """Every cluster in every mode, rendered now."""
    found = []
    with fixed_machine(), tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        for cluster in CLUSTERS:
            for mode in MODES:
                name = f"{cluster}-{mode.name}"
                try:
                    scripts = [normalise(script, runs) for script in render(cluster, mode, runs)]
                except UsageError as error:
                    found.append(Golden(name, None, str(error)))
                    continue
                found += [Golden(name, scripts[0])] + [Golden(f"{name}-run", script) for script in scripts[1:]]
        assert not runs.exists(), "rendering the golden scripts wrote into the runs directory"
    return found


def difference(golden: Golden) -> str | None:
    """A unified diff of the committed file against the rendering; None when they agree."""
    committed = golden.path.read_text() if golden.path.exists() else None
    if committed == golden.script:
        return None
    if golden.script is None:
        return f"{golden.path} is committed, but the mode no longer applies ({golden.why_not})"
    diff = difflib.unified_diff((committed or "").splitlines(keepends=True), golden.script.splitlines(keepends=True),
                                f"{golden.path.relative_to(REPO)} (committed)", "rendered now")
    return "".join(diff)


def strays(found: list[Golden]) -> list[Path]:
    """Committed files that no cluster and mode renders any more (a mode or cluster removed)."""
    names = {golden.path.name for golden in found}
    return sorted(path for path in GOLDEN_DIR.glob("*.sbatch") if path.name not in names)


def update() -> list[str]:
    """Write every golden file anew (and remove those no mode renders); the changed names."""
    GOLDEN_DIR.mkdir(exist_ok=True)
    found = goldens()
    changed = [path.name for path in strays(found)]
    for path in strays(found):
        path.unlink()
    for golden in found:
        if difference(golden) is None:
            continue
        changed.append(golden.path.name)
        if golden.script is None:
            golden.path.unlink()
        else:
            golden.path.write_text(golden.script)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hpc.launcher.golden_scripts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the golden files from the templates as they are")
    args = parser.parse_args(argv)
    if args.update:
        changed = update()
        print(f"{len(changed)} golden file(s) written: {', '.join(changed)}" if changed else "golden files up to date")
        return 0
    found = goldens()
    diffs = [diff for golden in found if (diff := difference(golden)) is not None]
    diffs += [f"{path} is committed, but no cluster and mode renders it\n" for path in strays(found)]
    print("".join(diffs) or "golden files up to date")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
