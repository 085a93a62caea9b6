"""What every side shares about errors: the one error type the command line turns into a one-line
message and exit code 2, and how any error's text is put on one line."""

from hpc.job.exit_codes import EXIT_BAD_INPUT


class UsageError(Exception):
    """Bad input from the user: the message names the bad value and what is accepted."""

    exit_code = EXIT_BAD_INPUT


def one_line(error: Exception) -> str:
    """An error's message on one line (a YAML parser's, a library's: they span several)."""
    return " ".join(str(error).split())
