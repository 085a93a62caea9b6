"""The package imports as a package: no module of hpc/, trainer/ or bench/ puts a folder on
sys.path or needs ``noqa: E402`` for an import below one; hpc/ and trainer/ (the GPU proof
among them, a user feature) import nothing from tests/; bench/ imports from tests/ only the
doubles and Slurm helpers each benchmark measures with, named below."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = ("hpc", "trainer")
BENCHES = "bench"
# bench module -> the test modules it measures with (a benchmark runs the package against doubles on CPU)
BENCH_TEST_IMPORTS = {
    "bench/fault_drill.py": {"tests.doubles", "tests.doubles.step_trainer"},
    "bench/launch_latency.py": {"tests.doubles.provider_api"},
    "bench/resubmit_goodput.py": {"tests.doubles.step_trainer"},
    "bench/slurm_answer_drill.py": {"tests.doubles", "tests.doubles.slurm_wrappers", "tests.doubles.step_trainer"},
    "bench/status_scale.py": {"tests.hpc.slurm_helpers", "tests.scripts.slurm_util"},
    "bench/trainer_cost.py": {"tests.doubles.art_backend"},
}


def modules(*tops: str) -> list[Path]:
    return sorted(path for top in tops for path in (REPO / top).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def from_tests(names: set[str]) -> set[str]:
    return {name for name in names if name == "tests" or name.startswith("tests.")}


def path_hacks(path: Path, root: Path = REPO) -> list[str]:
    """Lines that change sys.path or excuse an import placed below code."""
    return [f"{path.relative_to(root)}:{number}: {line.strip()}"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if "sys.path.insert" in line or "sys.path.append" in line or "noqa: E402" in line]


def test_no_module_of_the_package_or_the_benches_changes_sys_path_or_imports_below_code() -> None:
    found = [hack for path in modules(*PACKAGE, BENCHES) for hack in path_hacks(path)]
    assert found == []


def test_the_package_imports_nothing_from_the_tests() -> None:
    found = {str(path.relative_to(REPO)): from_tests(imported(path)) for path in modules(*PACKAGE)}
    assert {path: names for path, names in found.items() if names} == {}


def test_a_benchmark_imports_from_the_tests_only_the_doubles_it_is_known_to_measure_with() -> None:
    found = {str(path.relative_to(REPO)): from_tests(imported(path)) for path in modules(BENCHES)}
    assert {path: names for path, names in found.items() if names} == BENCH_TEST_IMPORTS


def test_the_checks_see_an_import_from_the_tests_and_a_path_hack(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("import sys\nsys.path.insert(0, '.')\ndef f():\n    from tests.doubles import x  # noqa: E402\n")
    assert from_tests(imported(module)) == {"tests.doubles"}
    hacks = [line.split(": ", 1)[1] for line in path_hacks(module, tmp_path)]
    assert hacks == ["sys.path.insert(0, '.')", "from tests.doubles import x  # noqa: E402"]

