"""``python -m trainer.eval``: the command users type; the code lives in trainer/evaluation/eval.py.

Users' commands, the README and the docs keep pointing here (issue 18 moved the code into
the folder that says where it runs); this module runs the moved one.
"""
from hpc.forwarding import forward

forward(__name__, "trainer.evaluation.eval")
