"""The job's first look at its run's folder, before it sources ``secrets.env`` or runs anything of it.

    python -S -m hpc.job.trusted_run RUN_DIR [SCRIPT ...] [--model_dir DIR]

The launcher checked the folder when it wrote it (hpc/run/trust.py), but the job starts later, maybe
days later: a neighbour who could write the folder by then could have put shell code in
``secrets.env`` (which the job sources, as the user) or in a script the job submits again. So the job
script (sbatch/base.sbatch.j2) asks again, first: the runs directory, the run's folder, its
``secrets.env`` (the user's, mode 0600), ``scripts/``, each SCRIPT it will run or submit, and the model
folder whose checkpoints the trainer loads. An untrusted one is one line on stderr and exit 1: the job
stops there, having read, written and submitted nothing of the run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run.trust import Kind, Untrusted, check_entry, check_model_folder, check_run_folder


def check(run_dir: Path, scripts: list[Path], model_dir: Path | None = None) -> None:
    """Untrusted when the run's folder, one of ``scripts`` or the model folder is not the user's alone."""
    check_run_folder(run_dir)
    for script in scripts:
        check_entry(script.parent, Kind.FOLDER)
        check_entry(script, Kind.FILE)
    if model_dir is not None:
        check_model_folder(model_dir)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -S -m hpc.job.trusted_run RUN_DIR [SCRIPT ...] [--model_dir DIR]", file=sys.stderr)
        return EXIT_BAD_INPUT
    model_dir = None
    if "--model_dir" in args[:-1]:
        at = args.index("--model_dir")
        model_dir, args = Path(args[at + 1]), args[:at] + args[at + 2:]
    try:
        check(Path(args[0]), [Path(arg) for arg in args[1:]], model_dir)
    except Untrusted as error:
        print(f"[job] error: the run's folder is not yours alone: {error}; the job stops without reading, "
              "running or submitting anything of it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
