"""``python -m hpc.launch``: the command users type; the code lives in hpc/launcher/launch.py.

Users' commands, the README and the docs keep pointing here (issue 18 moved the code into
the folder that says where it runs); this module runs the moved one.
"""
from hpc.forwarding import forward
from hpc.remote.intercept import run_remotely_if_asked

run_remotely_if_asked(__name__, "hpc.launch")  # --remote DEST: on a cluster's login node instead (docs/remote.md)
forward(__name__, "hpc.launcher.launch")
