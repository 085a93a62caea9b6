"""Reading and writing inside a run directory, never through a link.

A run's files are reached from its folder without following a link: a ``report`` that links to
another folder, a ``report.md``, ``ledger.jsonl`` or log that links to a file elsewhere, is refused
(OutsideRun), never read or written through. The run's own folder may be a link for its readers; the
launcher and the job refuse one (hpc/run/trust.py). Nothing below it is followed. Every reader and
writer of the run directory goes through these functions (hpc/run/rundir.py's RunDir passes ``root``,
the run's folder); writers replace a file whole (a temporary file and a rename) or append one line in
one write, so readers never see half a record. Stdlib only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Iterator

MAX_READ_BYTES = 256 * 1024 * 1024  # a run's file larger than this is not read (a runaway or hostile one)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class OutsideRun(OSError):
    """A path of a run directory that would leave it: a link below the run's folder, or ``..``."""


def relative_parts(root: Path, path: Path) -> tuple[str, ...]:
    """``path``'s names below ``root``; OutsideRun when it is not below it."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        parts = ()
    if not parts or ".." in parts:
        raise OutsideRun(errno.EINVAL, f"not inside {root}", str(path))
    return parts


def _refusal(folder: int, name: str, path: Path, error: OSError) -> OSError:
    """What to raise when ``name`` in ``folder`` did not open: OutsideRun for a link, else ``error``
    naming the whole path."""
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            return OutsideRun(errno.ELOOP, "a link, not followed (a run's files stay inside its directory)", str(path))
    return type(error)(error.errno, error.strerror, str(path))


@contextlib.contextmanager
def folder_inside(root: Path, parts: tuple[str, ...], create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``root/parts...``, reached without following a link below
    ``root`` (made on the way when ``create``)."""
    if create:
        make_folders(root)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for depth, name in enumerate(parts, 1):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                inner = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as error:
                raise _refusal(fd, name, root.joinpath(*parts[:depth]), error) from None
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def make_folders(path: Path, mode: int = 0o755) -> None:
    """``path`` and the folders above it that are missing, each made with ``mode`` (never writable
    by group or others, whatever the umask: ``mkdir -p`` gives the folders above the umask's mode)."""
    missing = []
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, mode)


def open_inside(root: Path, path: Path, flags: int, mode: int = 0o644) -> int:
    """``path`` opened (``os.open``'s flags) with no link below ``root`` followed, the file's
    own name included; O_CREAT makes the folders on the way."""
    parts = relative_parts(root, path)
    with folder_inside(root, parts[:-1], create=bool(flags & os.O_CREAT)) as folder:
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
        except OSError as error:
            raise _refusal(folder, parts[-1], path, error) from None


def make_dirs(path: Path, root: Path) -> None:
    """``path`` and the folders above it up to ``root``, never through a link."""
    with folder_inside(root, relative_parts(root, path), create=True):
        pass


def remove(path: Path, root: Path) -> None:
    """``path`` removed if it is there (a link: the link itself), never through a linked folder."""
    parts = relative_parts(root, path)
    with contextlib.suppress(FileNotFoundError), folder_inside(root, parts[:-1]) as folder:
        os.unlink(parts[-1], dir_fd=folder)


def read_bytes(path: Path, root: Path | None = None) -> bytes:
    """A regular file's bytes (never a FIFO's or a device's, never more than MAX_READ_BYTES);
    with ``root``, reached as ``open_inside`` does."""
    fd, size = _open_regular(path, root, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if size > MAX_READ_BYTES:
            raise OSError(errno.EFBIG, f"larger than {MAX_READ_BYTES} bytes", str(path))
        return handle.read(MAX_READ_BYTES)


def read_tail(path: Path, size: int, root: Path | None = None) -> bytes:
    """The last ``size`` bytes of a regular file (a log), read from its end alone; never a FIFO or a
    device, and never through a link: the file's own name (or, with ``root``, anything below it)."""
    fd, length = _open_regular(path, root, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        handle.seek(max(0, length - size))
        return handle.read(size)


def _open_regular(path: Path, root: Path | None, flags: int) -> tuple[int, int]:
    """A descriptor of ``path`` and its size, when it is a regular file; else an OSError says what it is."""
    fd = os.open(path, flags) if root is None else open_inside(root, path, flags)
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode):
        return fd, info.st_size
    os.close(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a folder, not a file", str(path))
    raise OSError(errno.EINVAL, "not a regular file", str(path))


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644, root: Path | None = None) -> None:
    """Write through a temporary file and rename, so readers never see half a file; with
    ``root``, inside it as ``open_inside`` reaches it (the rename replaces a link, never follows it)."""
    parts = relative_parts(root, path) if root is not None else (path.name,)
    with folder_inside(root if root is not None else path.parent, parts[:-1], create=True) as folder:
        temporary = f".{parts[-1]}.{secrets.token_hex(6)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                os.fchmod(handle.fileno(), mode)
            os.replace(temporary, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException as error:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            if isinstance(error, OSError) and error.filename == temporary:  # say the file, not its stand-in
                raise type(error)(error.errno, error.strerror, str(path)) from None
            raise


def append_jsonl(path: Path, record: dict[str, Any], root: Path | None = None) -> None:
    """One line, one write() with O_APPEND: concurrent appenders never interleave (a FIFO where the
    file goes is refused at once, never waited on)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    if root is None:
        make_folders(path.parent)
        fd = os.open(path, flags, 0o644)
    else:
        fd = open_inside(root, path, flags)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def write_jsonl_atomic(path: Path, records: list[dict[str, Any]], root: Path | None = None) -> None:
    """Write a JSONL file through a temporary file and rename."""
    write_bytes_atomic(path, "".join(json.dumps(r) + "\n" for r in records).encode(), root=root)


def write_json_atomic(path: Path, data: dict[str, Any], mode: int = 0o644, root: Path | None = None) -> None:
    """Write through a temporary file and rename, so readers never see half a file."""
    write_bytes_atomic(path, (json.dumps(data, indent=2) + "\n").encode(), mode, root)
