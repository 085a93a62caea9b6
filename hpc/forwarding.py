"""Old module paths that still work after a move: users' commands and submitted jobs' hooks.

A module at an old path is two lines: ``forward(__name__, "new.path")``. Run as a command
(``python -m old.path ...``) it runs the moved module as ``__main__``, with the same
arguments; imported, it is the moved module itself (``sys.modules`` maps the old name to it),
so patch targets, ``isinstance`` and module attributes behave as before.
"""

import importlib
import runpy
import sys


def forward(name: str, new: str) -> None:
    if name == "__main__":
        runpy.run_module(new, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(new)
