"""``python -m trainer.eval``: the command users type; the code lives in trainer/evaluation/eval.py.

The command's name is the users' (the README, the docs) and stays; the code sits in the folder
of the side it runs on. This module runs it as ``__main__`` (hpc/forwarding.py).
"""
from hpc.forwarding import forward

forward(__name__, "trainer.evaluation.eval")
