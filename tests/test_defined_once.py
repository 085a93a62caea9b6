"""Each job variable and exit code is defined once, and the code reads it from there.

Every HPC_* name is a constant of hpc/job/workload_env.py; Python code elsewhere imports it
instead of spelling ``"HPC_..."`` again. ``SPELLED_TODAY`` lists the files that still spell some
(each with its names): it only shrinks. A file that stops spelling a name must leave the list (the
test says so), and a file or a name not on it fails. Exit codes 69 and 78 are defined in
hpc/run/rundir.py beside 75, and assigned nowhere else.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from hpc.job import workload_env
from hpc.job.workload_env import HPC_NAMES, JOB_STATE, USER_SETTINGS, VARIABLES

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("hpc", "trainer", "bench", "scripts")
DEFINITION = "hpc/job/workload_env.py"
NAME = re.compile(r"HPC_[A-Z0-9_]+")
# file -> the HPC_* names it still spells as a literal; import them from hpc/job/workload_env.py and shrink this
SPELLED_TODAY: dict[str, set[str]] = {
    "hpc/job/ray_cluster.py": {"HPC_RAY_HOST_SUFFIX", "HPC_RAY_TEMP_DIR"},
    "hpc/job/watch.py": {"HPC_WATCH_INTERVAL"},
    "hpc/launcher/clusters.py": {"HPC_HOSTNAME"},
    "hpc/launcher/jobspec.py": {"HPC_RAY_JOIN_TIMEOUT"},
    "hpc/launcher/queue_preflight.py": {"HPC_JUDGE_SERVED"},
    "hpc/launcher/single_run.py": {"HPC_RUN_DIR"},
    "hpc/launcher/sweep_launch.py": {"HPC_RUN_DIR"},
    "hpc/remote/options.py": {"HPC_REMOTE_DIR", "HPC_REMOTE_SSH_OPTS"},
    "hpc/run/health.py": {"HPC_COLLAPSE_SPREAD", "HPC_COLLAPSE_STEPS", "HPC_STALL_FACTOR", "HPC_STALL_MIN",
                          "HPC_STALL_STARTUP"},
    "hpc/run/monitor/cli.py": {"HPC_CALLER_DIR", "HPC_PROG"},
    "trainer/evaluation/eval.py": {"HPC_RUN_DIR"},
    "trainer/serving/serve.py": {"HPC_RUN_DIR"},
    "trainer/training/backend.py": {"HPC_VLLM_PORT"},
    "trainer/training/environment.py": {"HPC_MODEL_DIR", "HPC_NO_INTERNET", "HPC_RUN_DIR"},
    "trainer/training/preflight.py": {"HPC_JUDGE_SERVED", "HPC_MODEL_DIR", "HPC_NO_INTERNET", "HPC_RUN_DIR"},
    "trainer/training/preflight_checks.py": {"HPC_NO_INTERNET"},
    "trainer/training/preflight_services.py": {"HPC_JUDGE_SERVED"},
    "trainer/proof/card_emulation/sitecustomize.py": {"HPC_PROOF_GPU_FRACTION", "HPC_PROOF_TORCH_PEAKS"},
    "trainer/proof/cards.py": {"HPC_PROOF_GPU_FRACTION", "HPC_PROOF_TORCH_PEAKS"},
    "trainer/proof/two_gpus.py": {"HPC_SETUP_ERROR"},
    "bench/learning_curve.py": {"HPC_JOB_END_TIME", "HPC_SIGNAL_GRACE", "HPC_VLLM_PORT"},
    "bench/serve_load.py": {"HPC_RUN_DIR"},
}
EXIT_CODES = {"69": "EXIT_UNAVAILABLE", "78": "EXIT_CONFIG_ERROR"}
EXIT_DEFINITION = "hpc/run/rundir.py"


def python_files() -> list[Path]:
    return sorted(path for top in SOURCES for path in (REPO / top).rglob("*.py"))


def spelled_names(path: Path) -> set[str]:
    """The HPC_* names a file's string literals are (docstrings and messages that mention one are not)."""
    names = set()
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING:  # f-strings are tokens of their own (Python >= 3.12)
            value = ast.literal_eval(token.string)
            if isinstance(value, str) and NAME.fullmatch(value):
                names.add(value)
    return names


def spellings() -> dict[str, set[str]]:
    found = {str(path.relative_to(REPO)): spelled_names(path) for path in python_files()}
    return {path: names for path, names in found.items() if names and path != DEFINITION}


def test_no_hpc_name_is_spelled_outside_its_definition_but_in_the_shrinking_list():
    found = spellings()
    new = {path: sorted(names - SPELLED_TODAY.get(path, set())) for path, names in found.items()}
    assert {path: names for path, names in new.items() if names} == {}, \
        "import these from hpc/job/workload_env.py (add a new name there) instead of spelling them"


def test_the_list_of_files_still_spelling_names_only_shrinks():
    found = spellings()
    gone = {path: sorted(names - found.get(path, set())) for path, names in SPELLED_TODAY.items()}
    assert {path: names for path, names in gone.items() if names} == {}, \
        "these no longer spell the names: take them off SPELLED_TODAY"


def test_each_constant_is_its_own_name_and_every_table_and_template_name_is_one():
    constants = {name: value for name, value in vars(workload_env).items() if name.startswith("HPC_")}
    assert all(name == value for name, value in constants.items() if name != "HPC_NAMES")
    tables = {v.name for v in VARIABLES if v.name.startswith("HPC_")} | set(JOB_STATE) | set(USER_SETTINGS)
    templates = {name for path in (REPO / "sbatch").glob("*.j2") for name in NAME.findall(path.read_text())}
    listed = {name for names in SPELLED_TODAY.values() for name in names}
    assert tables | templates | listed <= HPC_NAMES
    assert "HPC_JUDGE_SERVED" in JOB_STATE  # the queue preflight gives it to the trainer's checks


def test_exit_codes_69_and_78_are_assigned_once_in_the_run_directorys_module():
    assignment = re.compile(rf"^\s*[A-Z_]+\s*(?::\s*int\s*)?=\s*({'|'.join(EXIT_CODES)})\b", re.MULTILINE)
    found = {str(path.relative_to(REPO)): assignment.findall(path.read_text()) for path in python_files()}
    assert {path: codes for path, codes in found.items() if codes} == {EXIT_DEFINITION: ["78", "69"]}
    from hpc.run import rundir

    assert (rundir.EXIT_CONFIG_ERROR, rundir.EXIT_UNAVAILABLE) == (78, 69)
