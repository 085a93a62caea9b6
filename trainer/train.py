"""``python -m trainer.train``: the command users type; the code lives in trainer/training/train.py.

Users' commands, the README and the docs keep pointing here (issue 18 moved the code into
the folder that says where it runs); this module runs the moved one.
Job scripts run it too (the default --entrypoint), including those submitted before
the move.
"""
from hpc.forwarding import forward

forward(__name__, "trainer.training.train")
