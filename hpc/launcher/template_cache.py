"""The job-script templates' compiled code, kept beside them as Python keeps a module's .pyc.

Jinja parses and compiles sbatch/'s templates into Python code on every launch, about a tenth of a
dry run; this cache keeps that code in ``sbatch/__pycache__/`` and loads it instead. What makes a
kept copy stale is part of its key or checked on each load: the template's name and path (the
file's name), its source (jinja checks a checksum of it), the Python version (jinja's magic), and the
environment's compile settings and Jinja's version (``settings_key``: the delimiters, trimming,
the filters and tests a template compiles against, and what each is passed).

The code is run when a template is, so the folder is trusted as the templates are: it is used only
where it is a real folder (not a link) owned by this user or the templates' owner, that no one else
may write to. Otherwise there is no cache and templates compile as before. PYTHONDONTWRITEBYTECODE
(``sys.dont_write_bytecode``) is honoured as for .pyc files: the cache is read, never written; a
write that fails (a read-only install) is skipped.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2.bccache import Bucket

CACHE_FOLDER = "__pycache__"
# What a template's compiled code depends on besides its source: jinja's lexer and code generator settings.
COMPILE_SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
                    "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
                    "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "autoescape",
                    "optimized", "finalize", "is_async")


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """jinja's file cache, keyed by the environment's settings too, that never fails a launch by writing."""

    def __init__(self, directory: Path, environment: jinja2.Environment) -> None:
        super().__init__(str(directory), f"%s.{settings_key(environment)}.j2c")

    def dump_bytecode(self, bucket: Bucket) -> None:
        if sys.dont_write_bytecode:
            return
        try:
            super().dump_bytecode(bucket)
        except OSError:  # a read-only install, a full disk: the next launch compiles again
            pass


def settings_key(environment: jinja2.Environment) -> str:
    """A short digest of what, besides a template's source, its compiled code depends on."""
    settings = [repr(getattr(environment, name)) for name in COMPILE_SETTINGS]
    calls = [passes(environment.filters), passes(environment.tests), sorted(map(repr, environment.extensions))]
    return hashlib.sha256(repr((jinja2.__version__, settings, calls)).encode()).hexdigest()[:16]


def passes(functions: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each filter's (or test's) name and what jinja passes it first (``@pass_context`` and the like): the
    code a call compiles to depends on both."""
    return sorted((name, repr(getattr(function, "jinja_pass_arg", None))) for name, function in functions.items())


def trusted(folder: Path, templates_dir: Path) -> bool:
    """A real folder, owned by this user or the templates' owner, that no one else may write to."""
    try:
        info, owner = os.lstat(folder), os.stat(templates_dir).st_uid
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid in (os.getuid(), owner)
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def template_cache(templates_dir: Path, environment: jinja2.Environment) -> TemplateCache | None:
    """The cache beside ``templates_dir``'s templates (made on first use), or None where it cannot be
    trusted or made."""
    folder = templates_dir / CACHE_FOLDER
    if not sys.dont_write_bytecode:
        try:
            folder.mkdir(mode=0o755, exist_ok=True)
        except OSError:
            return None
    return TemplateCache(folder, environment) if trusted(folder, templates_dir) else None
