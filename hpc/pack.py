"""Forwarding: hpc.pack moved to hpc.job.pack (hpc/job/pack.py).

Job scripts rendered before issue 18 run ``python -m hpc.pack``; a run launched then is
continued with that same script, so this path must keep working until no such run is
continued any more. Then delete this file (scripts rendered now call hpc.job.pack).
"""
from hpc.forwarding import forward

forward(__name__, "hpc.job.pack")
