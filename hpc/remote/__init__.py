"""``--remote DEST``: a user's command run on a cluster's login node from a laptop, over SSH.

This side runs on the laptop (the login side of the login node): it takes the remote flags
off the command line (options.py), opens one SSH connection and reuses it for every later
command (ssh.py: OpenSSH's ControlMaster, so a second factor is typed once), syncs the
laptop's committed tree into the checkout there and runs ``bash setup.sh`` on first use
(sync.py), then runs the same command there, streaming its output and passing its exit
code back (commands.py; hpc.report's pictures come back through report_fetch.py).
intercept.py is the one hook the users' commands call first. docs/remote.md.
"""
