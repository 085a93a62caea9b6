"""``python -m trainer.train``: the command users type; the code lives in trainer/training/train.py.

The command's name is the users' (the README, the docs) and stays; the code sits in the folder
of the side it runs on. This module runs it as ``__main__`` (hpc/forwarding.py).
Job scripts run it too (the default --entrypoint), those rendered by release 0.1.0 included.
"""
from hpc.forwarding import forward

forward(__name__, "trainer.training.train")
