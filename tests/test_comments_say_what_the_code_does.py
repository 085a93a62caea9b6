"""The house rule on comments: they say what the code does and why; what happened goes in git and CHANGELOG.md.

A comment or docstring in hpc/ or trainer/ that cites an issue number ("issue 18 moved ...") or
narrates the code's past ("it used to ...", "X is no longer needed", "before the move") ages
with every change and tells a newcomer nothing about the code before them. The patterns are
narrow on purpose: "is used to" (a tool used for something), "no longer" about a run's state
("a run no longer there"), dates in example timestamps and in a source's citation all pass.
``python -m tests.test_comments_say_what_the_code_does`` lists what the test finds.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("hpc", "trainer")
# what each pattern finds, and the pattern; matched case-insensitively on a comment or docstring line
NARRATION: dict[str, re.Pattern[str]] = {
    "cites an issue": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "says what the code used to do": re.compile(
        r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )(?<!\bwas )(?<!\bwere )\bused to\b", re.IGNORECASE),
    "says what the code no longer does": re.compile(
        r"\bno longer (needs?|needed|necessary|required|uses?|used|calls?|called|imports?|imported|supports?|"
        r"supported|does|do)\b", re.IGNORECASE),
    "narrates a change": re.compile(
        r"\b(formerly|(before|after|since) the (move|split|rename|refactoring)|moved the code|the old code)\b",
        re.IGNORECASE),
}


@dataclass(frozen=True)
class Narration:
    """One comment or docstring line that narrates: where, what it does, and the line."""

    where: str
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}: {self.text}"


def comment_lines(source: str) -> list[tuple[int, str]]:
    """Every comment, and every line of every module, class and function docstring, with its line number."""
    lines = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0].value if node.body and isinstance(node.body[0], ast.Expr) else None
            if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
                lines += [(doc.lineno + offset, line) for offset, line in enumerate(doc.value.splitlines())]
    return lines


def narrations(root: str) -> list[Narration]:
    """The comment and docstring lines of ``root``'s modules that narrate (a phrase broken over
    two lines is found too: each line is read with the next one's first words)."""
    found = []
    for path in sorted((REPO / root).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        lines = sorted(comment_lines(path.read_text()))
        for index, (number, line) in enumerate(lines):
            following = " ".join(lines[index + 1][1].split()[:3]) if index + 1 < len(lines) else ""
            text = " ".join(f"{line} {following}".replace("#", " ").split())
            for what, pattern in NARRATION.items():
                match = pattern.search(text)
                if match and match.start() < len(" ".join(line.replace("#", " ").split())):
                    found.append(Narration(f"{path.relative_to(REPO)}:{number}", what, line.strip()))
    return found


def test_no_comment_or_docstring_of_hpc_or_trainer_narrates_history() -> None:
    found = [str(item) for root in ROOTS for item in narrations(root)]
    assert found == [], "say what the code does (history goes in CHANGELOG.md):\n" + "\n".join(found)


def test_the_check_finds_narration_and_passes_plain_wording(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        '"""The launcher (issue 18 moved the code here).\n\nA helper is used to read it; a run no longer there\n'
        'is forgotten."""\n\n'
        "X = 1  # the job used to\n# wait here; 2026-11-25T08:46:36 is UTC\n"
        "def f():\n    \"\"\"The lock is no longer needed.\"\"\"\n"
        "# kept apart, before the\n# move of the folder\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert [(item.where, item.what) for item in narrations("pkg")] == [
        ("pkg/mod.py:1", "cites an issue"),
        ("pkg/mod.py:1", "narrates a change"),
        ("pkg/mod.py:6", "says what the code used to do"),
        ("pkg/mod.py:9", "says what the code no longer does"),
        ("pkg/mod.py:10", "narrates a change"),
    ]


def main() -> int:
    found = [item for root in ROOTS for item in narrations(root)]
    for item in found:
        print(item)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
