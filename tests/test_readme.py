"""The README's and the docs pages' promises, checked, so they stay true after every change.

The README is the door (at most about 250 lines) with a map to docs/, one page per concern.
The dry-run example in docs/launching.md is the launcher's real output: the launcher
runs from a clean copy of the repository (no .env, no runs), on a host that no
cluster pattern matches and without Slurm on the PATH, exactly as the page
says; paths and the launch id are then written as the page shows them. The sweep
example (docs/sweeps.md) and the GPU table (docs/training.md) are produced the same way.

To refresh the examples after changing a template or a dotenv file:

    UPDATE_README=1 .venv/bin/python -m pytest tests/test_readme.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
LAUNCHING, SWEEPS, TRAINING = DOCS / "launching.md", DOCS / "sweeps.md", DOCS / "training.md"
START = "<!-- dry-run example: start -->"
END = "<!-- dry-run example: end -->"
EXAMPLE_COMMAND = ["--job_name", "agent_008", "--time_limit", "48:00:00", "--dry_run"]
SHOWN_REPO = "/home/alice/hpc-art-launcher"
SHOWN_LAUNCH_ID = "20261122T101500Z-4242"
LAUNCH_ID = re.compile(r"\d{8}T\d{6}Z-\d+")


def clean_copy(target: Path) -> Path:
    """The repository's tracked and new files, as a fresh clone would have them."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def no_slurm_path(tmp: Path) -> str:
    """A PATH with bash (for `bash -n`) and nothing of Slurm."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(shutil.which("bash"))
    return str(bin_dir)


def dry_run_example(tmp: Path, command: list[str] = EXAMPLE_COMMAND, **env_extra: str) -> str:
    copy = clean_copy(tmp / "hpc-art-launcher")
    env = {"PATH": no_slurm_path(tmp), "HOME": "/home/alice", "HPC_HOSTNAME": "alice-workstation",
           "LANG": "C.UTF-8", **env_extra}
    result = subprocess.run([sys.executable, "-m", "hpc.launch", *command], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    shown = result.stdout.replace(str(copy), SHOWN_REPO).replace(sys.prefix, f"{SHOWN_REPO}/.venv")
    return LAUNCH_ID.sub(SHOWN_LAUNCH_ID, shown)


def readme_example(text: str, start: str = START, end: str = END) -> str:
    block = text.split(start, 1)[1].split(end, 1)[0]
    return block.split("```text\n", 1)[1].rsplit("```", 1)[0]


def check_example(actual: str, start: str, end: str, page: Path) -> None:
    """The page's block between the markers is ``actual`` (UPDATE_README=1 writes it)."""
    text = page.read_text()
    if os.environ.get("UPDATE_README") == "1":
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        page.write_text(f"{before}{start}\n```text\n{actual}```\n{end}{after}")
        text = page.read_text()
    assert readme_example(text, start, end) == actual, f"an example in {page.name} is stale: run UPDATE_README=1"


def test_the_dry_run_example_is_what_the_launcher_prints(tmp_path):
    check_example(dry_run_example(tmp_path), START, END, LAUNCHING)


SWEEP_START, SWEEP_END = "<!-- sweep example: start -->", "<!-- sweep example: end -->"
SWEEP_COMMAND = ["--job_name", "lr_sweep", "--time_limit", "24:00:00", "--sweep", "learning_rate=1e-5,2e-5,4e-5",
                 "--sweep", "seed=1,2", "--dry_run"]
JURECA_LOGIN = {"HPC_HOSTNAME": "jrlogin05.jureca", "USER": "alice", "SCRATCH": "/p/scratch/myproj",
                "PROJECT": "/p/project/myproj", "BUDGET_ACCOUNTS": "myproj"}


def test_the_sweep_example_is_what_the_launcher_prints(tmp_path):
    """The sweep's dry run on a JURECA login node, up to its first job script."""
    shown = dry_run_example(tmp_path, SWEEP_COMMAND, **JURECA_LOGIN)
    head = shown.split("\n# job script", 1)[0]
    check_example(f"{head.rstrip()}\n\n# job script of job 1, its runs' scripts, the sbatch commands ... (cut here)\n",
                  SWEEP_START, SWEEP_END, SWEEPS)


def test_readme_test_command_is_the_one_ci_runs():
    command = ".venv/bin/python -m pytest"
    assert f"```bash\n{command}\n```" in README.read_text()
    assert f"\n{command}\n" in (REPO / ".ci" / "run").read_text()


def test_readme_two_commands_set_up_and_launch():
    text = README.read_text()
    assert "bash setup.sh" in text
    assert ".venv/bin/python -m hpc.launch --job_name agent_008 --time_limit 48:00:00" in text


GPU_START, GPU_END = "<!-- gpu table: start -->", "<!-- gpu table: end -->"


def test_the_gpu_table_is_what_the_estimate_says():
    from hpc.launcher.gpus import fit_table

    actual = fit_table()
    text = TRAINING.read_text()
    if os.environ.get("UPDATE_README") == "1":
        before, rest = text.split(GPU_START, 1)
        TRAINING.write_text(f"{before}{GPU_START}\n{actual}{GPU_END}{rest.split(GPU_END, 1)[1]}")
        text = TRAINING.read_text()
    assert text.split(GPU_START, 1)[1].split(GPU_END, 1)[0] == f"\n{actual}", "stale: UPDATE_README=1"


# -- the door and its map ------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slugs(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_is_a_door_of_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= 250


def test_readme_maps_every_docs_page():
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", README.read_text()))
    assert linked == {p.name for p in DOCS.glob("*.md")}


def test_every_link_of_the_readme_and_the_docs_reaches_its_page_and_heading():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists() or (anchor and file.suffix == ".md" and anchor not in slugs(file)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []
