"""hpc/ reads the trainer through one seam (hpc/launcher/trainer_config.py), and no module of hpc/ or trainer/ imports itself back."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SEAM = "hpc.launcher.trainer_config"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_launcher_reads_the_trainer_only_through_its_config_seam() -> None:
    readers = {module_name(p) for p in (REPO / "hpc").rglob("*.py")
               if any(name.split(".")[0] == "trainer" for name in imported(p))}
    assert readers == {SEAM}


def test_the_seam_is_the_trainers_config_and_the_services_settings_alone() -> None:
    trainer_modules = {name for name in imported(REPO / "hpc" / "launcher" / "trainer_config.py")
                       if name.startswith("trainer.")}
    assert {name.rpartition(".")[0] if name.count(".") > 2 else name for name in trainer_modules} == {
        "trainer.training.config", "trainer.serving.settings"}


def own_imports(path: Path, known: set[str]) -> set[str]:
    """The modules of hpc/ and trainer/ that ``path`` imports (lazily too; TYPE_CHECKING aside)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            tree.body.remove(node)
    found = set()
    for name in imported_in(tree):
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name not in ("hpc", "trainer"):
            found.add(name)
    return found


def imported_in(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_hpc_or_trainer_imports_itself_back() -> None:
    paths = {module_name(p): p for pkg in ("hpc", "trainer") for p in (REPO / pkg).rglob("*.py")}
    graph = {name: own_imports(path, set(paths)) - {name} for name, path in paths.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
        return False
    circles = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if reaches(b, a))
    assert circles == []
