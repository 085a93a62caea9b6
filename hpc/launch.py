"""``python -m hpc.launch``: the command users type; the code lives in hpc/launcher/launch.py.

The command's name is the users' (the README, the docs) and stays; the code sits in the folder
of the side it runs on. This module runs it as ``__main__`` (hpc/forwarding.py).
"""
from hpc.forwarding import forward
from hpc.remote.intercept import run_remotely_if_asked

run_remotely_if_asked(__name__, "hpc.launch")  # --remote DEST: on a cluster's login node instead (docs/remote.md)
forward(__name__, "hpc.launcher.launch")
