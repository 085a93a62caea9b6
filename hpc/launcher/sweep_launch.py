"""Launching a sweep (login side): every run of it, alone or packed onto nodes.

hpc/launcher/sweeps.py expands ``--sweep``/``--sweep_file`` into runs; this module makes
each run the launcher's own JobSpec (hpc.launcher.single_run.spec_from_args, so every value
passes the same checks, the trainer's config loader included, before anything
is written), decides which runs need a job (not finished, no job queued or
running: a relaunch resumes the unfinished runs and leaves the others alone),
groups them into pack jobs where that fills nodes charged whole
(hpc/launcher/packing.py), and previews (``--dry_run``) or submits.

A run of a sweep is an ordinary run: its own run directory, model folder,
ledger, failure count and done marker. A pack job is recorded in the ledger of
every run it runs; the pack's script, logs and secrets live in the sweep's
directory (hpc.run.rundir.SweepDir), beside ``sweep.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from hpc.errors import UsageError
from hpc.job.continuation_modes import ContinuationMode
from hpc.job.workload_env import HPC_RUN_DIR
from hpc.launcher import packing, queue_preflight, single_run, sweeps
from hpc.launcher import submit as slurm
from hpc.launcher.clusters import Registry
from hpc.launcher.envfiles import merge_layers
from hpc.launcher.jobspec import JobSpec, Pack, PackMember, check_job_name, env_layers, outer_env, resolve_runs_dir
from hpc.launcher.request import LaunchRequest
from hpc.run import ledger
from hpc.run.ledger import Submit
from hpc.run.rundir import SweepDir


@dataclass(frozen=True)
class Planned:
    """One run of the sweep and what a launch would do with it."""

    member: sweeps.Member
    spec: JobSpec
    state: str  # where the run stands, in words
    launch: bool  # it needs a job


@dataclass(frozen=True)
class SweepPlan:
    sweep: SweepDir
    runs: list[Planned]
    per_job: int  # runs per job (1: every run a job of its own)
    env_flags: tuple[str, ...] = ()  # --env, for the pack jobs' own environment

    @property
    def first(self) -> JobSpec:
        return self.runs[0].spec

    @property
    def gpus_per_run(self) -> int:
        spec = self.first
        return spec.gpus_per_node - (spec.judge.gpus if spec.judge else 0)

    def groups(self) -> list[list[Planned]]:
        return packing.group([r for r in self.runs if r.launch], self.per_job)


# -- is this a sweep, and which runs ------------------------------------------------------


def sweep_dir(args: argparse.Namespace, registry: Registry) -> SweepDir:
    """``<runs_dir>/<job_name>``, the runs directory found as for a single run."""
    cluster = registry.detect(args.cluster).cluster
    name = check_job_name(args.job_name)
    runs_dir = resolve_runs_dir(args.runs_dir, env_layers(cluster, args.env), outer_env(cluster, name))
    return SweepDir(single_run.trusted_folder(runs_dir / name))


def sweep_members(args: argparse.Namespace, sweep: SweepDir) -> list[sweeps.Member]:
    """The flags' expansion; without flags, every run the sweep has had."""
    check_sweep_folder(sweep)
    if not (args.sweep or args.sweep_file):
        return sweeps.members_from_record(sweep.read_record() or {})
    axes = [sweeps.parse_sweep_flag(text) for text in args.sweep]
    if args.sweep_file:
        axes += sweeps.read_sweep_file(Path(args.sweep_file))
    return sweeps.expand(sweep.name, sweeps.check_axes(axes, args.train_arg))


def check_sweep_folder(sweep: SweepDir) -> None:
    """A sweep's folder is new (missing or empty) or a sweep's (sweep.json, no ledger): a run's folder,
    ledger or not (a launch that failed after writing its script), never gets a sweep's files."""
    if os.path.lexists(sweep.ledger):
        raise UsageError(f"--job_name {sweep.name!r} is a run, not a sweep ({sweep.path} has a ledger): "
                         "give the sweep another name")
    if not os.path.lexists(sweep.record_file) and os.path.isdir(sweep.path) and any(sweep.path.iterdir()):
        held = ", ".join(sorted(p.name for p in sweep.path.iterdir())[:4])
        raise UsageError(f"--job_name {sweep.name!r} is not a sweep: {sweep.path} holds {held}, and no sweep.json "
                         "(a run's files): give the sweep another name")


def member_spec(args: argparse.Namespace, member: sweeps.Member, registry: Registry) -> JobSpec:
    """The run's JobSpec: the launch's flags with the run's name and values."""
    run_args = copy.copy(args)
    run_args.job_name = member.name
    run_args.train_arg = [*args.train_arg, *member.overrides]
    try:
        spec = single_run.spec_from_args(run_args, registry)
        if os.path.lexists(SweepDir(spec.run_dir.path).record_file):
            raise UsageError(f"{spec.run_dir.path} is a sweep's folder (it has sweep.json), not a run's")
        return spec
    except UsageError as error:
        raise UsageError(f"sweep run {member.name} ({member.describe()}): {error}") from None


def run_state(spec: JobSpec, active: dict[str, str], restart: bool) -> tuple[str, bool]:
    """Where the run stands and whether it needs a job (``active``: the sweep's queued and running jobs)."""
    mine = {job: state for job, state in active.items() if job in ledger.job_ids(ledger.read(spec.run_dir))}
    if mine:
        jobs = ", ".join(f"{job} ({state})" for job, state in mine.items())
        return f"has job(s) {jobs}: left alone", False
    if spec.run_dir.read_done() and not restart:
        return single_run.resume_summary(spec, restart).split(";")[0] + ": left alone", False
    return single_run.resume_summary(spec, restart), True


def plan(args: argparse.Namespace, registry: Registry) -> SweepPlan:
    sweep = sweep_dir(args, registry)
    members = sweep_members(args, sweep)
    if not members:
        raise UsageError(f"sweep {sweep.name!r} has no runs: give --sweep KEY=V1,V2 or --sweep_file")
    specs = [member_spec(args, member, registry) for member in members]
    active = slurm.active_jobs([job for spec in specs for job in ledger.job_ids(ledger.read(spec.run_dir))])  # one squeue
    runs = [Planned(member, spec, *run_state(spec, active, args.restart)) for member, spec in zip(members, specs)]
    return SweepPlan(sweep, runs, jobs_per_pack(args, specs), tuple(args.env))


def jobs_per_pack(args: argparse.Namespace, specs: list[JobSpec]) -> int:
    """Runs per job (--pack), refused where a pack cannot work."""
    spec = specs[0]
    judge_gpus = spec.judge.gpus if spec.judge else 0
    per_job = packing.runs_per_job(packing.parse_pack(args.pack), spec.cluster, spec.gpus_per_node - judge_gpus,
                                   judge_gpus)
    if per_job > 1 and spec.num_nodes > 1:
        raise UsageError("--pack runs several runs on one node: use --pack off with --num_nodes > 1")
    if per_job > 1 and spec.continuation.mode == ContinuationMode.CHAIN:
        raise UsageError("--chain pre-submits one run's jobs: use --pack off with --chain")
    if per_job > 1 and len({s.gpus_per_node for s in specs}) > 1:
        raise UsageError("the sweep's runs need different numbers of GPUs (gpu_mode): use --pack off")
    return per_job


# -- pack jobs ----------------------------------------------------------------------------------


def pack_spec(plan: SweepPlan, group: list[Planned], index: int) -> JobSpec:
    """The pack job: the first run's settings, the sweep's directory, the group's runs and GPUs."""
    first = plan.first
    use = packing.GpuUse(len(group), plan.gpus_per_run, first.judge.gpus if first.judge else 0,
                         first.cluster.gpus_per_node, first.cluster.whole_nodes, first.gpu_mode)
    members = tuple(PackMember(str(r.spec.run_dir.path), str(r.spec.script_path)) for r in group)
    name = f"{plan.sweep.name}.pack{index}"
    return replace(
        first, job_name=name, run_dir=plan.sweep, env=pack_env(plan, name), launch_id=f"{first.launch_id}-pack{index}",
        gpus_per_node=use.requested, pack=Pack(plan.sweep.name, members, plan.gpus_per_run), packed=False,
        judge=first.judge.placed(len(group) * plan.gpus_per_run) if first.judge else None,
        gpu_line=packing.describe(use, [r.spec.job_name for r in group]),
    )


def pack_env(plan: SweepPlan, name: str):  # -> MergedEnv
    """The dotenv as the sweep's directory sees it (each run's script exports its own on top)."""
    first = plan.first
    layers = env_layers(first.cluster, list(plan.env_flags))
    env = merge_layers(layers, {**outer_env(first.cluster, name), HPC_RUN_DIR: str(plan.sweep.path)})
    for key in ("JUDGE_API_BASE", "JUDGE_MODEL"):  # a served judge's address (--judge_serve)
        if first.env.sources.get(key) == "--judge_serve":
            env.values[key], env.sources[key] = first.env.values[key], "--judge_serve"
    return env


def packed_script(spec: JobSpec) -> str:
    """A run's own script as a pack job runs it."""
    return single_run.checked_script(replace(spec, packed=True))


def job_specs(plan: SweepPlan) -> list[JobSpec]:
    """What each job of the launch is: a pack job, or the run's own job."""
    if plan.per_job > 1:
        return [pack_spec(plan, group, k) for k, group in enumerate(plan.groups(), 1)]
    return [group[0].spec for group in plan.groups()]


# -- preview ------------------------------------------------------------------------------------


def preview(plan: SweepPlan) -> None:
    first = plan.first
    groups, jobs = plan.groups(), job_specs(plan)
    print(f"sweep:        {plan.sweep.name}: {len(plan.runs)} run(s), {sum(r.launch for r in plan.runs)} to launch "
          f"in {len(groups)} job(s) ({plan.per_job} run(s) per job{packing_note(plan)})")
    print(f"cluster:      {first.cluster.name} ({first.detection.reason})")
    print(f"sweep dir:    {plan.sweep.path}")
    print(f"gpus:         {first.gpu_use}")
    job_of = {r.spec.job_name: k for k, group in enumerate(groups, 1) for r in group}
    print("\n# runs (each its own run directory, model folder, ledger and continuation)")
    rows = [[r.spec.job_name, r.member.describe(), f"job {job_of[r.spec.job_name]}" if r.launch else "-", r.state]
            for r in plan.runs]
    for line in table(["RUN", "VALUES", "JOB", "STATE"], rows):
        print(line)
    print("\n# jobs")
    for k, job in enumerate(jobs, 1):
        print(f"job {k}: {job.gpu_line}")
    if not jobs:
        print("none: every run is finished or has a job (nothing would be submitted)")
        return
    preview_scripts(jobs, groups[0][0].spec)


def packing_note(plan: SweepPlan) -> str:
    cluster = plan.first.cluster
    if plan.per_job > 1:
        return f", each on its own GPU(s) of one {cluster.gpus_per_node}-GPU node"
    return "; packing off" if not cluster.whole_nodes else ""


def preview_scripts(jobs: list[JobSpec], run: JobSpec) -> None:
    """One rendered script (the first job's, and its first run's when it is a pack), and every job's command."""
    first = jobs[0]
    if first.pack:
        print(f"\n# job script of job 1 ({first.script_path})")
        print(single_run.checked_script(first), end="")
        print(f"\n# the script of its run {run.job_name} ({run.script_path}); the other runs' differ in names and values")
        print(packed_script(run), end="")
    else:
        print(f"\n# job script of job 1 ({first.script_path}); the other runs' differ in names and values")
        print(single_run.checked_script(first), end="")
    print("\n# commands")
    for job in jobs:
        print(shlex.join(slurm.sbatch_command(job.script_path)))
    print("\nbash -n: ok")


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers) - 1)]
    return ["  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]) for row in [headers, *rows]]


# -- submission ---------------------------------------------------------------------------------


def submit(plan: SweepPlan, request: LaunchRequest) -> int:
    slurm.require_sbatch()
    # the first run to launch: the sweep's runs share the data, keys, backend and folders the checks look at
    if queue_preflight.refuses(next((r.spec for r in plan.runs if r.launch), None), request.args.no_preflight):
        return 1
    record_sweep(plan)
    for k, group in enumerate(plan.groups(), 1):
        if plan.per_job > 1:
            submit_pack(plan, group, k, request)
        else:
            submit_alone(group[0], plan.sweep.name, request)
    return 0


def record_sweep(plan: SweepPlan) -> None:
    """sweep.json (every run the sweep has had) and each run's sweep_member.json."""
    with plan.sweep.locked():
        known = sweeps.members_from_record(plan.sweep.read_record() or {})
        plan.sweep.write_record(sweeps.record(plan.sweep.name, [r.member for r in plan.runs], known))


def submit_alone(run: Planned, sweep: str, request: LaunchRequest) -> None:
    """A run in a job of its own, exactly as a single launch submits it."""
    script = single_run.checked_script(run.spec)
    try:
        single_run.submit_run(run.spec, script, request)
    except single_run.ActiveJobs as error:
        print(f"{run.spec.job_name}: {error}; left alone")
        return
    run.spec.run_dir.write_sweep_member(sweep, dict(run.member.values))


def submit_pack(plan: SweepPlan, group: list[Planned], index: int, request: LaunchRequest) -> None:
    """Prepare each run (under its lock), then submit one job that runs them all."""
    with contextlib.ExitStack() as locks:
        for run in sorted(group, key=lambda r: str(r.spec.run_dir.path)):
            locks.enter_context(run.spec.run_dir.locked())
        ready = [run for run in group if prepared(run, plan.sweep.name, request.restart)]
        if not ready:
            return
        spec = pack_spec(plan, ready, index)
        write_pack_files(spec)
        job_id = slurm.submit(spec.script_path)
        commit = slurm.git_commit(single_run.REPO_DIR)
        for run in ready:
            record_submit(run, spec, job_id, commit, request.command)
    names = ", ".join(r.spec.job_name for r in ready)
    print(f"submitted pack job {job_id} ({spec.job_name}) on {spec.cluster.name}: {names}")
    print(f"  script: {spec.script_path}\n  GPUs:   {spec.gpu_line}")


def prepared(run: Planned, sweep: str, restart: bool) -> bool:
    """The run's files written for a pack (False: it has a job, or is finished)."""
    try:
        single_run.integrity(run.spec, restart)
        single_run.refuse_active(run.spec)
    except single_run.ActiveJobs as error:
        print(f"{run.spec.job_name}: {error}; left alone")
        return False
    if not single_run.prepare_run(run.spec, packed_script(run.spec), restart):
        return False
    run.spec.run_dir.write_sweep_member(sweep, dict(run.member.values))
    return True


def write_pack_files(spec: JobSpec) -> None:
    """The pack's script and secrets in the sweep's directory (the script is never overwritten)."""
    single_run.trusted_folder(spec.run_dir.path)
    spec.run_dir.make_dirs(spec.run_dir.logs_dir)
    spec.run_dir.write_new(spec.script_path, single_run.checked_script(spec).encode(), 0o755)
    single_run.write_secrets(spec.run_dir, spec.env.secret_values())


def record_submit(run: Planned, pack: JobSpec, job_id: str, commit: str | None, command: tuple[str, ...]) -> None:
    """The pack job in the run's ledger, with the run's own script and logs (hpc.launch's submit record)."""
    assert pack.pack is not None
    out, err = run.spec.run_dir.log_paths(job_id)
    ledger.append(run.spec.run_dir, Submit(
        job_id=job_id, cluster=pack.cluster.name, script=str(run.spec.script_path),
        pack=pack.job_name, pack_script=str(pack.script_path), pack_runs=len(pack.pack.members),
        git_commit=commit, argv=list(command), log_out=str(out), log_err=str(err)))


def launch_sweep(the_plan: SweepPlan, request: LaunchRequest) -> int:
    if request.args.dry_run:
        preview(the_plan)
        return 0
    return submit(the_plan, request)
