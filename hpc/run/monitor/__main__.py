"""``python -m hpc.run.monitor COMMAND ARGS...``: the monitoring helpers' report program (hpc/run/monitor/cli.py)."""

import signal
import sys

from hpc.run.monitor.cli import main

if __name__ == "__main__":
    # `status.sh | head` ends quietly. Only as a program: tests call main() in
    # pytest's own process, which must not die of a later closed pipe.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
