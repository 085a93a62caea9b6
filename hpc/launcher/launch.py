"""Launch (or preview) an ART training job on whatever cluster this is.

    python -m hpc.launch --job_name agent_008 --time_limit 48:00:00 [--dry_run]

Steps: detect the cluster, merge the dotenv layers, validate every input,
render the cluster's sbatch template, then either print everything a
submission would do (--dry_run: writes and submits nothing) or write the
script into the run directory, submit it, and record it in the run's ledger.
Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from hpc.digits import ascii_int
from hpc.errors import UsageError
from hpc.job.continuation_modes import AUTO, LAUNCH_CHOICES
from hpc.launcher import queue_preflight
from hpc.launcher import submit as slurm
from hpc.launcher.clusters import Registry, load_registry
from hpc.launcher.jobspec import (
    DEFAULT_CONFIG,
    DEFAULT_ENTRYPOINT,
    DEFAULT_SIGNAL_GRACE,
    JobSpec,
)
from hpc.launcher.request import LaunchRequest
from hpc.launcher.single_run import checked_script, print_preview, spec_from_args, submit_run
from hpc.run.rundir import SweepDir
from hpc.run.trust import tighten_umask
from hpc.slurm.calls import SlurmError


def integer(text: str) -> int:
    """argparse's type for whole-number flags: digits 0-9 only (hpc/digits.py), so `--num_nodes ٣` is refused."""
    try:
        return ascii_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number in digits 0-9, got {text!r}") from None


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


class _HelpFormatter(argparse.HelpFormatter):
    """Each flag's default, said once: "(default: X)" is added where the help
    text does not already say what the default is, and left off where there is
    nothing to say (required flags, switches that are off, empty lists)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.required or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m hpc.launch",
        description="Preview or submit an ART-E training job on the cluster this runs on; "
        "the job resumes from its latest LoRA checkpoint until training is done.",
        formatter_class=_HelpFormatter,
    )
    for add_group in (add_job_flags, add_resource_flags, add_sweep_flags, add_workload_flags, add_continuation_flags):
        add_group(p)
    return p


def add_job_flags(p: argparse.ArgumentParser) -> None:
    job = p.add_argument_group("job")
    job.add_argument("--job_name", required=True,
                     help="run name: [A-Za-z0-9._=+-]{1,64}; also the run directory (a sweep's name with --sweep)")
    job.add_argument("--time_limit", required=True,
                     help="wall time per job (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), at most the cluster's maximum")
    job.add_argument("--cluster", default=None, help="cluster name; default: detected from the hostname (HPC_HOSTNAME overrides it)")
    job.add_argument("--dry_run", action="store_true", help="print cluster, env, script and sbatch command; submit and write nothing")
    job.add_argument("--preflight", action="store_true",
                     help="with --dry_run: also run the trainer's preflight checks that can run on this login node "
                          "(data, model cache, backend, filesystems, W&B, the judge) with the job's environment, "
                          "list what only the job can check, and exit 1 when a check fails")
    job.add_argument("--no_preflight", action="store_true",
                     help="submit without first running the trainer's preflight checks on this login node "
                          "(they refuse a job that cannot work before it waits in the queue; the job checks "
                          "again on its node)")
    job.add_argument("--runs_dir", default=None, help="where run directories live; default: RUNS_DIR from dotenv, else <repo>/runs")


def add_resource_flags(p: argparse.ArgumentParser) -> None:
    res = p.add_argument_group("resources")
    res.add_argument("--partition", default=None, help="Slurm partition; default: the cluster's")
    res.add_argument("--account", default=None, help="account/budget; default: the cluster's account variable from dotenv")
    res.add_argument("--qos", default=None, help="Slurm QOS; default: none (Slurm uses the account's default)")
    res.add_argument("--num_nodes", type=integer, default=1, help="nodes; more than 1 starts a Ray cluster across them")
    res.add_argument("--gpus_per_node", type=integer, default=None,
                     help="GPUs per node, at most the cluster's; default: what the config's gpu_mode needs "
                          "(1 shared, 2 dedicated)")
    res.add_argument("--cpus_per_task", type=integer, default=None, help="CPUs for the training task; default: the cluster's")
    res.add_argument("--mem", default=None, help="memory per node, e.g. 200G; default: Slurm's")
    res.add_argument("--constraint", default=None, help="Slurm node constraint; default: none")
    res.add_argument("--sbatch_arg", action="append", default=[], metavar="OPTION",
                     help="extra raw #SBATCH line, e.g. --mail-type=END (repeatable; default: none)")
    res.add_argument("--ray_port", type=integer, default=None, help="Ray head port for multi-node jobs; default: the cluster's")
    res.add_argument("--judge_serve", default=None, metavar="MODEL",
                     help="serve this open model as the judge inside the job, on the node's spare GPUs "
                          "(clusters without a judge API); default: JUDGE_SERVE_MODEL from dotenv, else none")
    res.add_argument("--judge_gpus", type=integer, default=None,
                     help="GPUs of the served judge; default: JUDGE_SERVE_GPUS from dotenv, else 1")


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    sweep = p.add_argument_group("sweeps (one run per combination; hpc/launcher/sweeps.py)")
    sweep.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="sweep a trainer config key over values (repeatable: every combination; default: none)")
    sweep.add_argument("--sweep_file", default=None, metavar="YAML",
                       help="the sweep as a YAML mapping of key to values, instead of or beside --sweep; default: none")
    sweep.add_argument("--pack", default="auto", metavar="auto|off|N",
                       help="runs of a sweep per job, each on its own GPUs: auto packs where nodes are charged whole")


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    work = p.add_argument_group("workload")
    work.add_argument("--config", default=DEFAULT_CONFIG, help="trainer config under trainer/configs/")
    work.add_argument("--train_arg", action="append", default=[], metavar="KEY=VALUE",
                      help="trainer config override passed through (repeatable; default: none)")
    work.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                      help="environment variable for the job; wins over dotenv files (repeatable; default: none)")
    work.add_argument("--entrypoint", default=DEFAULT_ENTRYPOINT, help="Python module the job runs with -m")


def add_continuation_flags(p: argparse.ArgumentParser) -> None:
    cont = p.add_argument_group("continuation (resubmission with resume)")
    cont.add_argument("--signal_grace", type=integer, default=None,
                      help="seconds before the time limit at which the job is told (USR1) to stop and save; "
                           f"default: {DEFAULT_SIGNAL_GRACE}, or a quarter of the time limit when that is shorter")
    cont.add_argument("--continuation", choices=LAUNCH_CHOICES, default=AUTO,
                      help="how a job continues the run: auto = requeue where the cluster allows it, else afterany resubmission")
    cont.add_argument("--max_resubmits", type=integer, default=20, help="most continuations of a run")
    cont.add_argument("--max_failures", type=integer, default=2, help="failed jobs without progress before the run is marked failed")
    cont.add_argument("--chain", type=integer, default=None, metavar="N",
                      help="pre-submit N jobs linked by afterany (for clusters where jobs may not submit jobs)")
    cont.add_argument("--restart", action="store_true",
                      help="start a new run: move the old run directory and checkpoints aside first")
    cont.add_argument("--init_from", default=None, metavar="RUN[:STEP]",
                      help="start this new run from another run's checkpoint (its latest complete one, or STEP), "
                           "copied into this run's own model folder as its step 0; default: none")


# -- --dry_run --preflight ----------------------------------------------------------------


def check_preflight_flags(args: argparse.Namespace) -> None:
    """--preflight previews checks: it needs --dry_run, one run, and the trainer as the workload."""
    if not args.preflight:
        return
    if not args.dry_run:
        raise UsageError("--preflight needs --dry_run (it checks a run without submitting it; every job runs "
                         "its own preflight before the expensive start anyway)")
    if getattr(args, "sweep", None) or getattr(args, "sweep_file", None):
        raise UsageError("--preflight checks one run: dry-run one of the sweep's runs with --job_name and "
                         "--train_arg instead")
    if args.entrypoint != DEFAULT_ENTRYPOINT:
        raise UsageError(f"--preflight checks what {DEFAULT_ENTRYPOINT} needs; --entrypoint {args.entrypoint} "
                         "runs something else")


def login_preflight(spec: JobSpec) -> int:
    """``--dry_run --preflight``: trainer/training/preflight.py on this login node, in a child process
    (litellm loads there, never in the launcher), one line per check; 1 when one fails."""
    print(f"\n# preflight on the login node ({spec.cluster.name}'s job environment; the job checks again on its node)")
    sys.stdout.flush()
    result = queue_preflight.run(spec)
    print(result.stdout, end="")
    if result.code and not result.stdout.strip():  # the checks themselves could not run
        print(f"preflight: FAILED: {(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    return 0 if result.code == 0 else 1


def launch_sweep(args: argparse.Namespace, argv: list[str], registry: Registry) -> int:
    """A sweep's runs planned, then previewed or submitted with the one request they share."""
    from hpc.launcher import sweep_launch  # loaded only for a sweep

    the_plan = sweep_launch.plan(args, registry)
    return sweep_launch.launch_sweep(the_plan, LaunchRequest.read(args, argv, [r.spec.env for r in the_plan.runs]))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tighten_umask()
    try:
        args = build_parser().parse_args(argv)
        check_preflight_flags(args)
        registry = load_registry()
        if args.sweep or args.sweep_file:
            return launch_sweep(args, argv, registry)
        spec = spec_from_args(args, registry)
        if SweepDir(spec.run_dir.path).is_sweep():  # the name of a sweep launched before: all its runs
            return launch_sweep(args, argv, registry)
        if args.pack != "auto":
            raise UsageError(f"--pack {args.pack} applies to sweeps: add --sweep KEY=V1,V2 (a single run has one job)")
        script = checked_script(spec)
        if args.dry_run:
            print_preview(spec, script, args.restart)
            return login_preflight(spec) if args.preflight else 0
        slurm.require_sbatch()  # no Slurm here: say that first, not what the checks find
        finished = spec.run_dir.read_done() is not None and not args.restart  # nothing will be submitted
        if queue_preflight.refuses(None if finished else spec, args.no_preflight):
            return 1
        return submit_run(spec, script, LaunchRequest.read(args, argv, [spec.env]))
    except UsageError as err:  # one line, whatever a value quoted in it holds
        print(f"hpc.launch: error: {err}".replace("\n", "\\n").replace("\r", "\\r"), file=sys.stderr)
        return UsageError.exit_code
    except SlurmError as err:
        print(f"hpc.launch: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `--dry_run | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
