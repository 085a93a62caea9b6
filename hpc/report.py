"""``python -m hpc.report``: the command users type; the code lives in hpc/run/report.py.

The command's name is the users' (the README, the docs) and stays; the code sits in the folder
of the side it runs on. This module runs it as ``__main__`` (hpc/forwarding.py).
"""
from hpc.forwarding import forward
from hpc.remote.intercept import run_remotely_if_asked

run_remotely_if_asked(__name__, "hpc.report")  # --remote DEST: on a cluster's login node instead (docs/remote.md)
forward(__name__, "hpc.run.report")
