"""Old path of hpc.job.watch (hpc/job/watch.py), which job scripts rendered by release 0.1.0 call.

One of hpc/forwarding.py's OLD_JOB_PATHS: removed in the release that list names (0.3.0).
"""
from hpc.forwarding import forward_old_job_path

forward_old_job_path(__name__, __spec__.name)
