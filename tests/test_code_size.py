"""The house rules on size: no function in the package over 60 lines, no module of it over 450.

Small functions are read at a glance and tested one by one; a module of one concern stays under
a few hundred lines. ``python -m tests.test_code_size`` lists what is over either limit in hpc/ and
trainer/ (the test checks the folders in ``FUNCTION_ROOTS`` and ``MODULE_ROOTS``).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450
FUNCTION_ROOTS = ("hpc", "trainer")
MODULE_ROOTS = ("hpc", "trainer")


@dataclass(frozen=True)
class TooLong:
    """One function or module over its limit: where it is and how long."""

    where: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.where}: {self.lines} lines (limit {self.limit})"


def python_files(root: str) -> list[Path]:
    return sorted(path for path in (REPO / root).rglob("*.py") if "__pycache__" not in path.parts)


def long_functions(root: str) -> list[TooLong]:
    """Functions and methods of ``root`` longer than MAX_FUNCTION_LINES, decorators and docstring included."""
    found = []
    for path in python_files(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                lines = node.end_lineno - first + 1
                if lines > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(REPO)}:{node.lineno} {node.name}"
                    found.append(TooLong(where, lines, MAX_FUNCTION_LINES))
    return found


def long_modules(root: str) -> list[TooLong]:
    """Modules of ``root`` longer than MAX_MODULE_LINES."""
    lengths = ((path, len(path.read_text().splitlines())) for path in python_files(root))
    return [TooLong(str(path.relative_to(REPO)), lines, MAX_MODULE_LINES)
            for path, lines in lengths if lines > MAX_MODULE_LINES]


def test_no_function_is_over_60_lines() -> None:
    found = [str(item) for root in FUNCTION_ROOTS for item in long_functions(root)]
    assert found == [], "split these functions:\n" + "\n".join(found)


def test_no_module_of_hpc_or_trainer_is_over_450_lines() -> None:
    found = [str(item) for root in MODULE_ROOTS for item in long_modules(root)]
    assert found == [], "split these modules by concern:\n" + "\n".join(found)


def test_the_check_finds_a_long_function_and_a_long_module(tmp_path: Path, monkeypatch) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n" + "\n" * 400)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert [str(item) for item in long_functions("pkg")] == ["pkg/long.py:5 long: 61 lines (limit 60)"]
    assert [str(item) for item in long_modules("pkg")] == ["pkg/long.py: 465 lines (limit 450)"]


def main() -> int:
    found = [*(item for root in FUNCTION_ROOTS for item in long_functions(root)),
             *(item for root in MODULE_ROOTS for item in long_modules(root))]
    for item in found:
        print(item)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
