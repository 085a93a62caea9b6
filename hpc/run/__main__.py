"""``python -m hpc.run``: a run carried to another cluster or machine (docs/runs.md, "Moving a run").

    python -m hpc.run bundle RUN --out DIR [--part_mib N] [--runs_dir D]
    python -m hpc.run unbundle DIR [--runs_dir D] [--cluster C] [--env NAME=VALUE ...]
    python -m hpc.run reclaim RUN [--runs_dir D]
    python -m hpc.run move RUN --from DEST1 --to DEST2 [...]     (on the laptop: hpc/remote/move.py)

``bundle`` (hpc/run/bundle.py) writes what continuing the run needs as parts with a manifest and
records in the run's ledger that it moved; ``unbundle`` (hpc/run/unbundle.py) checks every part
and makes the run here, where the next ``hpc.launch`` continues it; ``reclaim`` takes a moved run
back; ``move`` does the three over the ``--remote`` connections. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpc.errors import UsageError
from hpc.job.workload_env import HPC_RUN_DIR
from hpc.run.bundle import MIB
from hpc.run.rundir import RunDir

PROG = "python -m hpc.run"
DEFAULT_PART_MIB = 2048


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {PROG} -h)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    made = commands.add_parser("bundle", help="write a run's bundle (parts + manifest); the run is then moved")
    made.add_argument("run", help="a run name under the runs directory, or a run directory")
    made.add_argument("--out", type=Path, required=True, help="a new or empty folder for the parts")
    made.add_argument("--part_mib", type=int, default=DEFAULT_PART_MIB, help="largest part in MiB (default: 2048)")
    made.add_argument("--runs_dir", type=Path, default=None, help="default: the launcher's (RUNS_DIR)")
    made.add_argument("--to", default=None, help="where the run goes, as the ledger records it (default: --out)")
    unmade = commands.add_parser("unbundle", help="check a bundle's parts and make its run here")
    unmade.add_argument("folder", type=Path, help="the bundle's folder (manifest.json and its parts)")
    unmade.add_argument("--runs_dir", default=None, help="default: the launcher's (RUNS_DIR of this cluster)")
    unmade.add_argument("--cluster", default=None, help="default: detected, as hpc.launch detects it")
    unmade.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="as hpc.launch's --env (ART_PATH: where the model folder goes)")
    back = commands.add_parser("reclaim", help="take a moved run back: it trains here again, not there")
    back.add_argument("run")
    back.add_argument("--runs_dir", type=Path, default=None)
    commands.add_parser("move", help="bundle on DEST1, carry, unbundle on DEST2 (python -m hpc.run move -h)",
                        add_help=False)
    return parser


def run_of(text: str, runs_dir: Path | None) -> RunDir:
    from hpc.run.report import run_argument

    return run_argument(text, runs_dir)


def do_bundle(args: argparse.Namespace) -> int:
    from hpc.run.bundle import bundle

    made = bundle(run_of(args.run, args.runs_dir), args.out, args.part_mib, args.to)
    size = sum(part["size"] for part in made.manifest["parts"])
    best = made.manifest["best_step"]
    print(f"bundled run {made.manifest['run']} at step {made.step}{f' (best: step {best})' if best is not None else ''}"
          f": {len(made.manifest['parts'])} part(s), {size / MIB:.1f} MiB, in {made.out}")
    print(f"the run is recorded as moved: unbundle it there with `{PROG} unbundle DIR`; launching it here is "
          f"refused until `{PROG} reclaim {made.manifest['run']}`")
    return 0


def do_unbundle(args: argparse.Namespace) -> int:
    from hpc.run.unbundle import read_manifest, unbundle

    name = read_manifest(args.folder).run
    runs_dir, art_path = launcher_places(name, args.runs_dir, args.cluster, args.env)
    arrived = unbundle(args.folder, runs_dir, art_path)
    manifest = arrived.bundle.manifest
    print(f"run {arrived.bundle.run} is in {arrived.place.run_dir}, its model folder {arrived.place.model_dir} "
          f"(step {arrived.bundle.step}); the next hpc.launch of it continues at step {arrived.bundle.step + 1}")
    if manifest.get("launched_with"):
        print("it was last launched with: python -m hpc.launch " + " ".join(manifest["launched_with"]))
        print("launch it with the same --config and --train_arg (the data order follows them and the step)")
    return 0


def launcher_places(name: str, runs_dir: str | None, cluster_name: str | None,
                    env_flags: list[str]) -> tuple[Path, str | None]:
    """The runs directory and ART_PATH as hpc.launch resolves them on this cluster."""
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.envfiles import resolve_one
    from hpc.launcher.jobspec import env_layers, outer_env, resolve_runs_dir

    cluster = load_registry().detect(cluster_name).cluster
    layers = env_layers(cluster, env_flags)
    outer = outer_env(cluster, name)
    folder = resolve_runs_dir(runs_dir, layers, outer)
    return folder, resolve_one(layers, {**outer, HPC_RUN_DIR: str(folder / name)}, "ART_PATH")


def do_reclaim(args: argparse.Namespace) -> int:
    from hpc.run.bundle import reclaim

    run = run_of(args.run, args.runs_dir)
    moved = reclaim(run)
    print(f"run {run.name} trains here again (it had moved to {moved.to} at step {moved.step}); its copy from "
          f"bundle {moved.bundle[:12]} must not be launched there")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["move"]:
        from hpc.remote.move import main as move_main

        return move_main(argv[1:])
    try:
        args = build_parser().parse_args(argv)
        return {"bundle": do_bundle, "unbundle": do_unbundle, "reclaim": do_reclaim}[args.command](args)
    except UsageError as error:
        print(f"hpc.run: error: {error}", file=sys.stderr)
        return UsageError.exit_code
    except OSError as error:
        print(f"hpc.run: error: {error.filename or ''}: {error.strerror or error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
