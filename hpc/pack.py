"""Old path of hpc.job.pack (hpc/job/pack.py), kept for job scripts rendered before issue 18.

One of hpc/forwarding.py's OLD_JOB_PATHS: removed in the release that list names.
"""
from hpc.forwarding import forward_old_job_path

forward_old_job_path(__name__, __spec__.name)
