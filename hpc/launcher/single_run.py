"""One run, from the launcher's flags to a submitted job: its spec, its checked script, its run
directory (ownership, --restart, --init_from) and its submission.

hpc/launcher/launch.py (the command line) and hpc/launcher/sweep_launch.py (every run of a
sweep) both use it; it imports neither, so the two meet here instead of importing each other."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc.errors import UsageError
from hpc.job import vllm_runtime
from hpc.job.continuation_modes import AUTO, ContinuationMode
from hpc.job.workload_env import HPC_RUN_DIR
from hpc.launcher import packing
from hpc.launcher import submit as slurm
from hpc.launcher.clusters import Cluster, Registry
from hpc.launcher.envfiles import EnvLayer, MergedEnv, merge_layers
from hpc.launcher.gpus import plan_gpus
from hpc.launcher.jobspec import (
    DEFAULT_ENTRYPOINT,
    REPO_DIR,
    Continuation,
    JobSpec,
    check_config,
    check_entrypoint,
    check_job_name,
    check_mem,
    check_range,
    check_ray_join_timeout,
    check_ray_port,
    check_slurm_word,
    check_time_limit,
    check_train_args,
    default_signal_grace,
    env_layers,
    outer_env,
    refuse_printed_secrets,
    resolve_runs_dir,
    trainer_config,
)
from hpc.launcher.judge_serve import JudgeServe, judge_serve
from hpc.launcher.network import tunnel_for
from hpc.launcher.render import render
from hpc.launcher.request import LaunchRequest
from hpc.launcher.sbatch_options import check_sbatch_args
from hpc.launcher.timelimit import parse_time_limit
from hpc.run import init_from, ownership, trust
from hpc.run.checkpoints import latest_complete, model_dir
from hpc.run.rundir import RunDir

if TYPE_CHECKING:
    from hpc.launcher.trainer_config import TrainerConfig


def spec_from_args(args: argparse.Namespace, registry: Registry) -> JobSpec:
    """Validate every input and resolve defaults; raises UsageError on the first bad value."""
    detection = registry.detect(args.cluster)
    cluster = detection.cluster
    job_name = check_job_name(args.job_name)
    time_limit = check_time_limit(args.time_limit, cluster)
    num_nodes, cpus, grace = check_numbers(args, cluster, time_limit)
    ray_port = check_ray_port(args.ray_port or cluster.ray_port, num_nodes)
    config = check_config(args.config)
    train_args = check_train_args(args.train_arg)

    layers = env_layers(cluster, args.env)
    outer = outer_env(cluster, job_name)
    runs_dir = resolve_runs_dir(args.runs_dir, layers, outer)
    run_dir = RunDir(trusted_folder(runs_dir / job_name))
    env, judge = job_env(args, layers, {**outer, HPC_RUN_DIR: str(run_dir.path)}, cluster, num_nodes)
    art_path = env.get("ART_PATH") or str(run_dir.path / "art")
    trainer = trainer_config(config, train_args, args.entrypoint)
    gpus = plan_gpus(args.gpus_per_node, cluster, trainer if args.entrypoint == DEFAULT_ENTRYPOINT else None)
    use = gpu_use(cluster, gpus.gpus_per_node, judge, gpus.gpu_mode)
    account = args.account or env.get(cluster.account_var) or None

    return JobSpec(
        job_name=job_name,
        detection=detection,
        time_limit=time_limit,
        partition=check_slurm_word("--partition", args.partition or cluster.partition),
        account=check_slurm_word("--account", account),
        qos=check_slurm_word("--qos", args.qos),
        num_nodes=num_nodes,
        gpus_per_node=use.requested,
        cpus_per_task=cpus,
        mem=check_mem(args.mem),
        constraint=check_slurm_word("--constraint", args.constraint),
        sbatch_args=check_sbatch_args(args.sbatch_arg),
        signal_grace=grace,
        ray_port=ray_port,
        continuation=continuation_policy(args, cluster.requeue),
        entrypoint=check_entrypoint(args.entrypoint),
        config=config,
        train_args=[*train_args, *gpus.extra_train_args],
        env=env,
        env_layers=[layer.source for layer in layers if layer.values],
        run_dir=run_dir,
        model_dir=trusted_model_folder(model_dir(art_path, trainer.project, job_name)),
        gpu_use=gpus.describe(),
        vllm_runtime=runtime_line(trainer, args.entrypoint, env, cluster.cpu_arch),
        init_from=init_from.find_source(runs_dir, args.init_from) if args.init_from else None,
        tunnel=tunnel_for(cluster, env),
        ray_join_timeout=check_ray_join_timeout(env),
        judge=judge.placed(gpus.gpus_per_node) if judge else None,
        gpu_line=packing.describe(use, [job_name]),
        gpu_mode=gpus.gpu_mode,
    )


def trusted_folder(folder: Path) -> Path:
    """``folder`` when it and its runs directory are the user's alone (hpc/run/trust.py: the job
    sources secrets.env from it); else UsageError in one line, before anything is written."""
    try:
        trust.check_run_folder(folder)
    except trust.Untrusted as error:
        raise UsageError(f"{error}; nothing written or submitted") from None
    return folder


def trusted_model_folder(folder: Path) -> Path:
    """The run's model folder, when it is the user's alone where it is there (hpc/run/trust.py)."""
    try:
        trust.check_model_folder(folder)
    except trust.Untrusted as error:
        raise UsageError(f"the run's model folder: {error}; nothing written or submitted") from None
    return folder


def check_numbers(args: argparse.Namespace, cluster: Cluster, time_limit: str) -> tuple[int, int, int]:
    """--num_nodes, --cpus_per_task and --signal_grace as the job gets them, and the continuation's
    counts, checked in this order (the first bad one is the error)."""
    num_nodes = check_range("--num_nodes", args.num_nodes, 1, cluster.max_nodes, f" on {cluster.name}")
    cpus = check_range("--cpus_per_task",
                       cluster.cpus_per_task if args.cpus_per_task is None else args.cpus_per_task, 1, 4096)
    limit_seconds = parse_time_limit(time_limit) * 60
    grace = args.signal_grace if args.signal_grace is not None else default_signal_grace(limit_seconds)
    grace = check_range("--signal_grace", grace, 10, max(limit_seconds - 10, 10), " seconds (less than the time limit)")
    check_range("--max_resubmits", args.max_resubmits, 0, 10_000)
    check_range("--max_failures", args.max_failures, 1, 1_000)
    if args.chain is not None:
        check_range("--chain", args.chain, 1, 1_000)
    return num_nodes, cpus, grace


def job_env(args: argparse.Namespace, layers: list[EnvLayer], outer: dict[str, str], cluster: Cluster,
            num_nodes: int) -> tuple[MergedEnv, JudgeServe | None]:
    """The merged environment, with a served judge's address when the job serves one."""
    env = merge_layers(layers, outer)
    refuse_printed_secrets(env, cluster)  # before any of their values is read, checked or shown
    judge = judge_serve(args.judge_serve, args.judge_gpus, env, cluster.gpus_per_node)
    if judge is None:
        return env, None
    if num_nodes > 1:
        raise UsageError("--judge_serve runs on one node: use it with --num_nodes 1, or JUDGE_API_BASE")
    return merge_layers([*layers, judge.env_layer()], outer), judge


def gpu_use(cluster: Cluster, gpus_per_run: int, judge: JudgeServe | None, gpu_mode: str | None) -> packing.GpuUse:
    """One run's job: its GPUs, the judge's, and what the cluster charges."""
    use = packing.GpuUse(1, gpus_per_run, judge.gpus if judge else 0, cluster.gpus_per_node, cluster.whole_nodes,
                         gpu_mode)
    if use.requested > cluster.gpus_per_node:
        raise UsageError(f"the run's {gpus_per_run} GPU(s) and the judge's {use.judge_gpus} exceed a "
                         f"{cluster.name} node's {cluster.gpus_per_node}: use fewer --judge_gpus or --gpus_per_node")
    return use


def runtime_line(trainer: "TrainerConfig", entrypoint: str, env: MergedEnv, arch: str) -> str:
    """Which vLLM runtime ART's LocalBackend will find in the job, or how to build it."""
    if entrypoint != DEFAULT_ENTRYPOINT or trainer.backend != "local":
        return ""
    return vllm_runtime.describe(env.values, arch)


def continuation_policy(args: argparse.Namespace, cluster_requeues: bool) -> Continuation:
    if args.chain:
        mode = ContinuationMode.CHAIN
    elif args.continuation == AUTO:
        mode = ContinuationMode.REQUEUE if cluster_requeues else ContinuationMode.AFTERANY
    else:
        mode = ContinuationMode(args.continuation)
    return Continuation(mode, args.max_resubmits, args.max_failures, args.chain or 1)


def render_script(spec: JobSpec) -> str:
    try:
        return render(spec.cluster.template, spec.template_context())
    except ValueError as err:  # the sbatch filter's last line of defence
        raise UsageError(str(err)) from None


def checked_script(spec: JobSpec) -> str:
    """The rendered script, refused (UsageError) unless it passes ``bash -n``."""
    script = render_script(spec)
    bash_syntax_check(script)
    return script


def bash_syntax_check(script: str) -> None:
    result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    if result.returncode != 0:
        raise UsageError(f"the rendered script fails 'bash -n': {result.stderr.strip()}")


# -- run state ------------------------------------------------------------------


def resume_summary(spec: JobSpec, restart: bool = False) -> str:
    """One line on where this run stands: new, resuming from step N, finished, failed
    (the same checkpoint check the job and the trainer make, hpc.run.checkpoints), and
    whose checkpoint it starts from."""
    if spec.init_from is not None:
        source = spec.init_from
        aside = "; the old run directory and checkpoints would be moved aside" if restart else ""
        return (f"new run: will start from run {source.run.name}'s step {source.step} ({source.path}), "
                f"copied into this run's folder as its step 0{aside}")
    if restart and (spec.run_dir.path.exists() or spec.model_dir.exists()):
        return "--restart: new run from step 0; the old run directory and checkpoints would be moved aside"
    done = spec.run_dir.read_done()
    if done:
        return f"finished at step {done.get('final_step')}; nothing to submit (use --restart for a new run)"
    failed = spec.run_dir.read_failed()
    progress = spec.run_dir.read_progress() or {}
    total = progress.get("total_steps")
    of_total = f" of {total}" if total else ""
    latest = latest_complete(spec.model_dir)
    if latest is None:
        state = "new run: will start from step 0" + of_total
    else:
        state = f"will resume from step {latest.step}{of_total} of this run's own checkpoints"
    if failed:
        state += (f" (previously marked failed: {failed.get('reason')}; log: {failed.get('log_tail') or '-'}; "
                  "a launch clears that)")
    return state


def move_aside(path: Path) -> Path | None:
    """Rename ``path`` to ``path.<timestamp>`` (never delete a run)."""
    if not path.exists():
        return None
    target = path.with_name(f"{path.name}.{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
    path.rename(target)
    return target


def integrity(spec: JobSpec, restart: bool) -> str:
    """Refuse (UsageError) to train in a model folder that is not this run's; return a note
    for the user (a folder adopted from before ownership records), else ""."""
    if not restart and os.path.lexists(spec.run_dir.ledger):  # a run with no ledger never moved
        from hpc.run import bundle  # the dry run of a new run does without the ledger's record classes

        bundle.refuse_moved(spec.run_dir)  # it trains where it moved to, never in two places
    try:
        if restart and not ownership.can_move_aside(spec.run_dir, spec.model_dir):
            raise ownership.OwnershipError(ownership.foreign_folder(
                spec.run_dir, spec.model_dir, ownership.owner_of(spec.model_dir) or {}))
        note = "" if restart else ownership.check(spec.run_dir, spec.model_dir).note
    except ownership.OwnershipError as error:
        raise UsageError(str(error)) from None
    if spec.init_from is not None and not restart:
        init_from.check_target(spec.model_dir, spec.init_from)
    return note


def claim_model_folder(spec: JobSpec) -> None:
    """Seed --init_from's adapter, then record who owns what (under the run's lock)."""
    lineage = None
    if spec.init_from is not None:
        init_from.check_target(spec.model_dir, spec.init_from)
        seeded = init_from.seed(spec.model_dir, spec.init_from)
        print(f"--init_from: copied run {spec.init_from.run.name}'s step {spec.init_from.step} to {seeded}")
        lineage = spec.init_from.record()
    ownership.claim(spec.run_dir, spec.model_dir, lineage)


def restart_run(spec: JobSpec) -> None:
    """Move the run (and checkpoints kept outside it) aside; nothing is deleted."""
    paths = [spec.run_dir.path]
    if not spec.model_dir.resolve().is_relative_to(spec.run_dir.path.resolve()):
        paths.insert(0, spec.model_dir)
    for path in paths:
        moved = move_aside(path)
        if moved:
            print(f"--restart: moved {path} aside to {moved}")


# -- preview and submission -------------------------------------------------------


def print_preview(spec: JobSpec, script: str, restart: bool = False) -> None:
    c = spec.continuation
    print(f"cluster:      {spec.cluster.name} ({spec.detection.reason})")
    print(f"run dir:      {spec.run_dir.path}")
    note = integrity(spec, restart)
    print(f"checkpoints:  {spec.model_dir / 'checkpoints'} (this run's own{'; ' + note if note else ''})")
    print(f"gpus:         {spec.gpu_use}")
    print(f"gpu use:      {spec.gpu_line}")
    if spec.vllm_runtime:
        print(f"vllm runtime: {spec.vllm_runtime}")
    print(f"run state:    {resume_summary(spec, restart)}")
    chain = f", {c.chain} jobs pre-submitted" if c.mode == ContinuationMode.CHAIN else ", each job queues its successor as it starts"
    print(f"continuation: {c.mode}{chain} (at most {c.max_resubmits} continuations; "
          f"{c.max_failures} failures without progress mark the run failed)")
    print(f"\n# environment ({' < '.join(_short(s) for s in spec.env_layers)}; secrets shown as ***)")
    for name, value in spec.env.redacted().items():
        print(f"{name}={value}    # {_short(spec.env.sources[name])}")
    print(f"\n# job script ({spec.script_path})")
    print(script, end="" if script.endswith("\n") else "\n")
    print("\n# command")
    print(shlex.join(slurm.sbatch_command(spec.script_path)))
    for k in range(2, c.chain + 1):
        print(shlex.join(slurm.sbatch_command(spec.script_path, "afterany:<job {}>".format(k - 1))))
    print("\nbash -n: ok")
    if slurm.sbatch_path():
        answer = slurm.test_only(script)
        print(f"sbatch --test-only: {'ok' if answer.ok else 'REFUSED'}: {answer.message}")
    else:
        print("sbatch --test-only: skipped (no sbatch on the PATH)")


def _short(source: str) -> str:
    try:
        return str(Path(source).relative_to(REPO_DIR))
    except ValueError:
        return source


def write_run_files(spec: JobSpec, script: str) -> None:
    """Script (never overwritten), logs dir, and the 0600 secrets file, none through a link
    (hpc/run/rundir.py: a run's files stay inside its directory)."""
    run_dir = spec.run_dir
    run_dir.make_dirs(run_dir.logs_dir)
    run_dir.write_new(spec.script_path, script.encode(), 0o755)
    write_secrets(run_dir, spec.env.secret_values())


def write_secrets(run_dir: RunDir, secrets: dict[str, str]) -> None:
    lines = ["# Secrets for this run, read by the job at run time. Keep mode 0600.\n",
             *(f"{name}={shlex.quote(value)}\n" for name, value in secrets.items())]
    run_dir.write_bytes(run_dir.secrets_file, "".join(lines).encode(), 0o600)


class ActiveJobs(UsageError):
    """The run already has a queued or running job: a second would train the same run twice."""


def submit_run(spec: JobSpec, script: str, request: LaunchRequest) -> int:
    slurm.require_sbatch()
    integrity(spec, request.restart)  # before the lock, which creates the run directory
    with spec.run_dir.locked():
        refuse_active(spec)  # before --restart moves the ledger aside
        if not prepare_run(spec, script, request.restart):
            return 0
        job_ids = submit_chain(spec, request.command)
    print_submitted(spec, job_ids)
    return 0


def refuse_active(spec: JobSpec) -> None:
    """Refuse a run whose job trains (its lease: hpc/run/lease.py) or waits or runs in the queue."""
    from hpc.run import lease, ledger  # a submission's only: the dry run does without the ledger's record classes

    holder = lease.read(spec.run_dir)
    if not lease.free(holder, time.time()) and holder is not None:
        raise ActiveJobs(f"run {spec.job_name} is held by {holder.holder()} (its lease, renewed at {holder.renewed}, "
                         f"lapses {lease.LEASE_SECONDS:.0f} s after its last renewal); nothing submitted "
                         "(scancel it first, or choose another --job_name)")
    records = ledger.read(spec.run_dir)
    active = slurm.active_jobs(ledger.job_ids(records), ledger.open_jobs(records))
    if active:
        listed = ", ".join(f"{job} ({state})" for job, state in active.items())
        raise ActiveJobs(f"run {spec.job_name} already has active job(s) {listed}; nothing submitted "
                         "(scancel them first, or choose another --job_name)")


def prepare_run(spec: JobSpec, script: str, restart: bool) -> bool:
    """Under the run's lock: check ownership, move a --restart'ed run aside, write the run's
    script and secrets and claim its model folder. False (and nothing written) when the
    run is finished: there is nothing to submit."""
    run_dir = spec.run_dir
    trusted_folder(run_dir.path)  # again, under the lock: what is written next must stay the user's
    note = integrity(spec, restart)
    if restart:
        restart_run(spec)
    done = run_dir.read_done()
    if done:
        print(f"run {spec.job_name} finished at step {done.get('final_step')}: nothing submitted "
              "(use --restart to start a new run)")
        return False
    if run_dir.read_failed():
        os.replace(run_dir.failed_file, run_dir.path / f"failed.{spec.launch_id}.json")
    write_run_files(spec, script)
    claim_model_folder(spec)
    if note:
        print(f"note: {note}")
    return True


def submit_chain(spec: JobSpec, command: tuple[str, ...]) -> list[str]:
    from hpc.run.ledger import Chain, Submit, append  # a submission's only, as in refuse_active

    commit = slurm.git_commit(REPO_DIR)
    job_ids: list[str] = []
    for _ in range(spec.continuation.chain):
        after = job_ids[-1] if job_ids else None
        job_id = slurm.submit(spec.script_path, f"afterany:{after}" if after else None)
        out, err = spec.run_dir.log_paths(job_id)
        common: dict[str, Any] = {"job_id": job_id, "cluster": spec.cluster.name, "script": str(spec.script_path),
                                  "git_commit": commit, "argv": list(command), "log_out": str(out), "log_err": str(err)}
        append(spec.run_dir, Submit(**common) if after is None else Chain(**common, after=after))
        job_ids.append(job_id)
    return job_ids


def print_submitted(spec: JobSpec, job_ids: list[str]) -> None:
    print(f"submitted job {' -> '.join(job_ids)} on {spec.cluster.name} (run {spec.job_name}, "
          f"{spec.continuation.mode} continuation)")
    print(f"  script: {spec.script_path}")
    for job_id in job_ids:
        out, err = spec.run_dir.log_paths(job_id)
        print(f"  logs:   {out}\n          {err}")
    print(f"  ledger: {spec.run_dir.ledger}")
