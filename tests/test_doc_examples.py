"""Every `python -m hpc.launch ... --dry_run` example of README.md and docs/*.md runs as printed.

An example is a line of a code block (backslash continuations joined) or an inline code span.
It runs from a clean copy of the repository (no .env), without Slurm on the PATH, in an
environment of only what every shell has (PATH, HOME, USER, LANG) plus the NAME=VALUE words
the example itself starts with: what a user must set is on the example's own line
(docs/launching.md says so). A dry run exits 0; one with --preflight may exit 1, its checks
failing on a machine without the data or keys, but never 2, bad input."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme import clean_copy, no_slurm_path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PLACEHOLDERS = {"<name>": "local"}  # docs/clusters.md: "--cluster <name>", a cluster's name
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def code_lines(text: str) -> list[str]:
    """Lines of fenced code blocks (continuations joined) and inline code spans."""
    lines: list[str] = []
    for index, block in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if index % 2:
            lines += block.replace("\\\n", " ").splitlines()
        else:
            lines += re.findall(r"`([^`\n]+)`", block)
    return lines


def examples() -> list[tuple[str, str]]:
    """(page, command) for every hpc.launch dry run the pages show, optional parts ([--x]) aside."""
    found = []
    for page in PAGES:
        for line in code_lines(page.read_text()):
            command = line.split(" # ")[0].strip()
            if "-m hpc.launch " in command and "--dry_run" in command and "[" not in command:
                found.append((page.relative_to(REPO).as_posix(), command))
    return found


def split(command: str) -> tuple[dict[str, str], list[str]]:
    """The example's own variables, and its arguments after `python -m hpc.launch`."""
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    words = shlex.split(command)
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0].endswith("python") and words[1:3] == ["-m", "hpc.launch"], command
    return env, words[3:]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return clean_copy(tmp_path_factory.mktemp("examples") / "hpc-art-launcher")


def test_the_pages_show_dry_run_examples():
    pages = {page for page, _ in examples()}
    assert {"README.md", "docs/launching.md", "docs/multinode.md", "docs/clusters.md"} <= pages


@pytest.mark.parametrize("page, command", examples())
def test_a_dry_run_example_of_the_docs_runs_as_printed(checkout, tmp_path, page, command):
    own, args = split(command)
    env = {"PATH": no_slurm_path(tmp_path), "HOME": str(tmp_path / "home"), "USER": "alice", "LANG": "C.UTF-8",
           **own}
    result = subprocess.run([sys.executable, "-m", "hpc.launch", *args], cwd=checkout, env=env,
                            capture_output=True, text=True, timeout=300)
    allowed = (0, 1) if "--preflight" in args else (0,)
    assert result.returncode in allowed, f"{page}: {command}\n{result.stderr}"
    assert "error:" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "bash -n: ok" in result.stdout
    if "--preflight" in args:
        assert "# preflight on the login node" in result.stdout
