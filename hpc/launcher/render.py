"""Rendering a job script from the Jinja templates in sbatch/.

One base template (``base.sbatch.j2``) holds the whole job; each cluster's
template extends it and overrides only the blocks that differ (modules,
network, GPU request). The environment is strict: an undefined name is an
error, never an empty string, and every value that came from a user, a dotenv
file or the registry is written through the ``q`` filter (POSIX shell quoting).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import jinja2

from hpc.job import continuation_modes, exit_codes
from hpc.job.workload_env import offline_env, run_slot_env
from hpc.launcher.template_cache import template_cache

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "sbatch"


def shell_quote(value: Any) -> str:
    """Quote one value for bash: the script sees exactly the original string."""
    return shlex.quote(str(value))


def sbatch_value(value: Any) -> str:
    """A value for an ``#SBATCH`` line. sbatch parses these itself, not bash,
    so shell quoting does not apply; the launcher has already refused values
    with whitespace, quotes or newlines, and this filter re-checks that."""
    text = str(value)
    if not text or any(ch.isspace() or ch in "'\"\\" for ch in text):
        raise ValueError(f"unsafe value for an #SBATCH line: {text!r}")
    return text


def make_environment(templates_dir: Path = TEMPLATES_DIR) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        # Bash's ${#array[@]} would open a default Jinja comment ("{#"), so
        # template comments are written {## ... ##} instead.
        comment_start_string="{##",
        comment_end_string="##}",
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = shell_quote
    env.filters["sbatch"] = sbatch_value
    env.globals.update(offline_env=offline_env, run_slot_env=run_slot_env)  # what a job gives its workload
    # The exit codes job control compares and the continuation modes, as hpc/job/ defines them:
    env.globals.update(exit_codes=exit_codes, continuation_modes=continuation_modes)
    env.bytecode_cache = template_cache(templates_dir, env)  # set last: its key covers the filters
    return env


def render(template: str, context: dict[str, Any], templates_dir: Path = TEMPLATES_DIR) -> str:
    """Render ``template`` (a file name under sbatch/) with ``context``."""
    return make_environment(templates_dir).get_template(template).render(**context)
