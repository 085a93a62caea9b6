"""Each job variable, exit code and continuation mode is defined once, and the code reads it from there.

Every HPC_* name is a constant of hpc/job/workload_env.py: Python code elsewhere imports it instead of
spelling ``"HPC_..."`` again. Bash cannot import, so the job templates (sbatch/) and the helper scripts
(scripts/*.sh) spell their names; each such name must be one of the module's, so that the module stays
the one list. Every exit code is a constant of hpc/job/exit_codes.py: Python returns and compares the
constant, the templates render it (``exit_codes``), and no other module assigns an ``EXIT_*``. The
continuation modes are hpc/job/continuation_modes.py's: no code compares a mode's spelling or lists
the modes again.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from hpc.job import exit_codes, workload_env
from hpc.job.continuation_modes import ContinuationMode
from hpc.job.gpu_modes import GpuMode
from hpc.job.workload_env import HPC_NAMES, JOB_STATE, USER_SETTINGS, VARIABLES

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("hpc", "trainer", "bench", "scripts")
DEFINITION = "hpc/job/workload_env.py"
EXIT_DEFINITION = "hpc/job/exit_codes.py"
MODES_DEFINITION = "hpc/job/continuation_modes.py"
PROOF = "trainer/proof/"
MODE_SPELLINGS = {mode.value for mode in ContinuationMode}
GPU_MODE_SPELLINGS = {mode.value for mode in GpuMode}
NAME = re.compile(r"HPC_[A-Z0-9_]+")
# The exit codes job control tells apart (0 and 1, success and a plain failure, are everywhere's).
CODES = {value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")} - {0, 1}
# A job template's bash that spells a code: a comparison of the workload's status, an exit, an assignment.
TEMPLATE_CODE = re.compile(r"(hpc_\w*rc\s*==\s*|\bexit\s+|hpc_\w*rc=)(\d+)\b")
TEMPLATE_COMMENT = re.compile(r"\{##.*?##\}", re.DOTALL)  # what a template says of itself, not what it runs


def python_files() -> list[Path]:
    return sorted(path for top in SOURCES for path in (REPO / top).rglob("*.py"))


def shell_files() -> list[Path]:
    return sorted([*(REPO / "sbatch").glob("*.j2"), *(REPO / "scripts").glob("*.sh")])


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def spelled_names(path: Path) -> set[str]:
    """The HPC_* names a file's string literals are (docstrings and messages that mention one are not)."""
    names = set()
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING:  # f-strings are tokens of their own (Python >= 3.12)
            value = ast.literal_eval(token.string)
            if isinstance(value, str) and NAME.fullmatch(value):
                names.add(value)
    return names


def test_no_hpc_name_is_spelled_as_a_literal_outside_its_definition():
    found = {relative(path): sorted(spelled_names(path)) for path in python_files()}
    assert {path: names for path, names in found.items() if names and path != DEFINITION} == {}, \
        "import these from hpc/job/workload_env.py (add a new name there) instead of spelling them"


def aliases(path: Path) -> list[str]:
    """A module's second names for an HPC_* constant (``URL_VAR = HPC_WEBHOOK_URL``): a reader must look twice."""
    tree = ast.parse(path.read_text())
    return [ast.unparse(node) for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name) and NAME.fullmatch(node.value.id)]


def test_no_module_gives_an_hpc_name_a_second_name():
    found = {relative(path): aliases(path) for path in python_files()}
    assert {path: names for path, names in found.items() if names} == {}, "use the HPC_* constant itself"


def test_every_name_the_templates_and_helper_scripts_spell_is_defined_in_the_module():
    spelled = {relative(path): set(NAME.findall(path.read_text())) for path in shell_files()}
    assert {path: sorted(names - HPC_NAMES) for path, names in spelled.items() if names - HPC_NAMES} == {}


def test_each_constant_is_its_own_name_and_every_table_name_is_one():
    constants = {name: value for name, value in vars(workload_env).items() if name.startswith("HPC_")}
    assert all(name == value for name, value in constants.items() if name != "HPC_NAMES")
    tables = {v.name for v in VARIABLES if v.name.startswith("HPC_")} | set(JOB_STATE) | set(USER_SETTINGS)
    assert tables <= HPC_NAMES
    assert "HPC_JUDGE_SERVED" in JOB_STATE  # the queue preflight gives it to the trainer's checks


def exit_assignments(path: Path) -> list[str]:
    """The module-level ``EXIT_* = ...`` a file makes (an alias of another's counts: a second name)."""
    tree = ast.parse(path.read_text())
    targets = [t for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
               for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return [name for name in names if name.startswith("EXIT_")]


def test_exit_codes_are_assigned_only_in_their_module_each_code_once():
    found = {relative(path): exit_assignments(path) for path in python_files()}
    assert {path: names for path, names in found.items() if names and path != EXIT_DEFINITION} == {}
    values = [value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")]
    assert len(values) == len(set(values)), "two names for one code"
    assert (exit_codes.EXIT_STOPPED_FOR_TIME, exit_codes.EXIT_CONFIG_ERROR, exit_codes.EXIT_UNAVAILABLE) == (75, 78, 69)


def bare_codes(path: Path) -> list[str]:
    """Where Python code returns, exits with or compares an exit code's number instead of its constant."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        values: list[ast.expr] = []
        if isinstance(node, ast.Return) and node.value is not None:
            values = [node.value]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "os._exit", "SystemExit"):
            values = node.args[:1]
        elif isinstance(node, ast.Compare) and re.search(r"code|rc\b|exit", ast.unparse(node.left), re.I):
            values = list(node.comparators)
        found += [f"line {node.lineno}: {ast.unparse(node)[:60]}" for value in values
                  if isinstance(value, ast.Constant) and type(value.value) is int and value.value in CODES]
    return found


def test_no_python_code_spells_an_exit_codes_number():
    found = {relative(path): bare_codes(path) for path in python_files()}
    assert {path: lines for path, lines in found.items() if lines and path != EXIT_DEFINITION} == {}, \
        "use hpc/job/exit_codes.py's constant"


def test_no_job_template_spells_an_exit_codes_number():
    found = {relative(path): [m.group(0) for m in TEMPLATE_CODE.finditer(TEMPLATE_COMMENT.sub("", path.read_text())) if int(m.group(2)) in CODES]
             for path in (REPO / "sbatch").glob("*.j2")}
    assert {path: spelled for path, spelled in found.items() if spelled} == {}, \
        "render {{ exit_codes.EXIT_... }} (hpc/launcher/render.py) instead"


def spelled_modes(path: Path, spellings: set[str] = MODE_SPELLINGS, keys: bool = False) -> list[str]:
    """Where Python code compares a value with a mode's spelling, lists modes in a tuple or (``keys``) keys
    a dict by one (sbatch's own ``--requeue`` is a key of hpc/launcher/sbatch_options.py: not a mode)."""
    def is_mode(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in spellings

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        compared = isinstance(node, ast.Compare) and any(map(is_mode, [node.left, *node.comparators]))
        listed = isinstance(node, ast.Tuple) and len(node.elts) > 1 and all(map(is_mode, node.elts))
        keyed = keys and isinstance(node, ast.Dict) and any(map(is_mode, node.keys))
        if compared or listed or keyed:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_no_code_or_template_spells_the_continuation_modes_again():
    found = {relative(path): spelled_modes(path) for path in python_files() if relative(path) != MODES_DEFINITION}
    quoted = re.compile("|".join(rf"[\"']{mode}[\"']" for mode in MODE_SPELLINGS))
    found |= {relative(path): quoted.findall(path.read_text()) for path in (REPO / "sbatch").glob("*.j2")}
    assert {path: spelled for path, spelled in found.items() if spelled} == {}, \
        "use hpc/job/continuation_modes.py's ContinuationMode (the templates get it as continuation_modes)"


def test_no_launcher_or_trainer_code_spells_the_gpu_modes_again():
    """hpc/ and trainer/; the GPU proof's stage tables (trainer/proof/) are keyed by stage names, some
    named after the mode they prove, so their keys are not modes."""
    found = {relative(path): spelled_modes(path, GPU_MODE_SPELLINGS, keys=not relative(path).startswith(PROOF))
             for top in ("hpc", "trainer")
             for path in sorted((REPO / top).rglob("*.py")) if relative(path) != "hpc/job/gpu_modes.py"}
    assert {path: spelled for path, spelled in found.items() if spelled} == {}, "use hpc/job/gpu_modes.py's GpuMode"
