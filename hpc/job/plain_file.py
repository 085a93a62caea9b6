"""Files a job script redirects into, made plain files inside their run folder first.

    python -S -m hpc.job.plain_file RUN_DIR PATH [PATH ...]

A job script's own ``>>`` and ``>`` open their file as bash does: through any link. Someone who
may write in a run directory could plant ``server.log -> ~/.bashrc`` and have the job write there.
Each PATH below RUN_DIR is created (or kept) with no link on the way followed, the file's own name
included (``hpc.run.safe_io.open_inside``), before the script redirects into it; a link there is
an error naming it, exit 1, and the script writes nothing. The Python side's readers and writers
refuse links the same way.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run.safe_io import OutsideRun, open_inside


def make_plain(root: Path, path: Path) -> None:
    """``path`` as a plain file inside ``root`` (created empty if missing, its content kept);
    OutsideRun for a link on the way, OSError for anything but a regular file (a FIFO, a device)."""
    fd = open_inside(root, path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -S -m hpc.job.plain_file RUN_DIR PATH [PATH ...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    root = Path(args[0])
    for path in map(Path, args[1:]):
        try:
            make_plain(root, path)
        except OutsideRun as error:
            print(f"[job] error: refusing to write {path}: {error.strerror} ({error.filename}): a link in a run "
                  "directory is never written through", file=sys.stderr)
            return 1
        except OSError as error:
            print(f"[job] error: cannot write {path}: {error.strerror}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
