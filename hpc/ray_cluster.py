"""Forwarding: hpc.ray_cluster moved to hpc.job.ray_cluster (hpc/job/ray_cluster.py).

Job scripts rendered before issue 18 run ``python -m hpc.ray_cluster``; a run launched then is
continued with that same script, so this path must keep working until no such run is
continued any more. Then delete this file (scripts rendered now call hpc.job.ray_cluster).
"""
from hpc.forwarding import forward

forward(__name__, "hpc.job.ray_cluster")
