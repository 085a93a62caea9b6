"""The list of managed variables is whole: every variable the job templates assign is refused from a
user's layer, and every listed name is one the project really uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpc.errors import UsageError
from hpc.job import workload_env
from hpc.launcher.envfiles import EnvLayer
from hpc.launcher.managed_vars import MANAGED, OFFLINE, USER_SETTINGS, refuse_managed, who_sets

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = sorted((REPO / "sbatch").glob("*.j2"))
MERGED = {"NO_PROXY", "IFS"}  # the job adds its hosts to the user's NO_PROXY; IFS is a `read`'s own


def assigned_in_templates() -> set[str]:
    """What the templates assign themselves, and what they render from hpc/job/workload_env.py."""
    literal = {name for path in TEMPLATES for name in re.findall(r"\b([A-Z][A-Z0-9_]*)=", path.read_text())}
    job = workload_env.Job(Path("run"), Path("model"), "c", internet=False, script=Path("script"))
    rendered = {*workload_env.job_env(job), *workload_env.offline_env(), *workload_env.run_slot_env("0", "0")}
    return literal | rendered


def code_text() -> str:
    paths = [*TEMPLATES, *(REPO / "hpc").rglob("*.py"), *(REPO / "trainer").rglob("*.py")]
    return "\n".join(p.read_text() for p in paths if p.name != "managed_vars.py")


def test_every_variable_a_job_template_assigns_is_refused_from_a_user_on_every_cluster_where_it_is_set():
    names = assigned_in_templates() - MERGED - set(USER_SETTINGS)
    assert {"HPC_RUN_DIR", "HPC_MODEL_DIR", "HPC_CLEANUP", "CUDA_VISIBLE_DEVICES", "WANDB_MODE"} <= names
    for name in names:
        assert who_sets(name, internet=False), name
        if name not in OFFLINE:
            assert who_sets(name, internet=True), name


def test_every_listed_name_is_one_the_project_uses():
    text = code_text()
    unused = [name for name in [*MANAGED, *OFFLINE, *USER_SETTINGS] if not re.search(rf"\b{name}\b", text)]
    assert not unused


@pytest.mark.parametrize("name, internet, allowed", [
    ("HPC_STOP_TIMEOUT", True, True), ("HPC_WEBHOOK_URL", False, True), ("WANDB_MODE", True, True),
    ("WANDB_MODE", False, False), ("HPC_RUN_DIR", True, False), ("SLURM_JOB_NODELIST", True, False),
    ("MY_SETTING", False, True), ("HPC_NEW_THING", True, False),
])
def test_a_user_layer_is_refused_exactly_for_managed_names(name, internet, allowed):
    layer = EnvLayer("--env", {name: "1"})
    if allowed:
        refuse_managed(layer, "c", internet)
        return
    with pytest.raises(UsageError, match=rf"^--env sets {name}, which is .*: remove it$"):
        refuse_managed(layer, "c", internet)


@pytest.mark.parametrize("name, fragment", [
    ("UID", "read-only: the job script would stop at it"), ("SHELLOPTS", "read-only"), ("EUID", "read-only"),
    ("BASHOPTS", "read-only"), ("PPID", "read-only"), ("BASH_VERSINFO", "read-only"),
    ("IFS", "changes how bash runs the job script"), ("BASH_ENV", "changes how bash runs"),
    ("POSIXLY_CORRECT", "changes how bash runs"), ("RANDOM", "loses what bash keeps in it"),
    ("PIPESTATUS", "loses what bash keeps"),
])
def test_a_user_layer_setting_bashs_own_variables_is_refused_on_every_cluster(name, fragment):
    for internet in (True, False):
        with pytest.raises(UsageError, match=rf"^--env sets {name}, which is bash's own.*: remove it$") as caught:
            refuse_managed(EnvLayer("--env", {name: "xtrace"}), "c", internet)
        assert fragment in str(caught.value)
