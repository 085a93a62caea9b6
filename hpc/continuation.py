"""Forwarding: hpc.continuation moved to hpc.job.continuation (hpc/job/continuation.py).

Job scripts rendered before issue 18 run ``python -m hpc.continuation``; a run launched then is
continued with that same script, so this path must keep working until no such run is
continued any more. Then delete this file (scripts rendered now call hpc.job.continuation).
"""
from hpc.forwarding import forward

forward(__name__, "hpc.job.continuation")
