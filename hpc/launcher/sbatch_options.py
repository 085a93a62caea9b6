"""--sbatch_arg: extra #SBATCH lines, refused where sbatch would read an option the launcher manages.

sbatch reads the words of every #SBATCH line of a script as one command line, with
getopt_long: a long option may be any prefix of its name that no other option shares
(``--ou=/x`` is ``--output``), its value may follow as the next word (``--output /x``),
short options bundle (``-vo/x`` is ``-v -o /x``; ``-Jname``), and a word that is not an
option or an option's value is an error. So the check reads the user's lines the same
way, against sbatch's own option table (sbatch 22.05; tests/hpc/launcher/test_sbatch_options.py
derives the table from the installed sbatch and asks ``sbatch -v --test-only`` which option
each refused spelling sets). Quotes, backslashes and ``#`` are refused: sbatch gives them
meanings of its own (quotes join words, ``#`` ends the line).

An option unknown to sbatch 22.05 passes (a newer Slurm may have it) when it carries its
value after ``=``; a prefix that several options share is refused as sbatch refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpc.errors import UsageError

# sbatch 22.05's long options by the value they take (getopt_long's has_arg).
_WITH_VALUE = """
    account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters comment
    constraint container context core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task
    deadline delay-boot dependency distribution error exclude export export-file extra-node-info gid
    gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input
    job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu
    mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu
    ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output partition power prefer priority
    profile qos reservation signal sockets-per-node switches tasks-per-node thread-spec threads-per-core
    time time-min tmp uid wait-all-nodes wckey wrap
""".split()
_OPTIONAL_VALUE = "exclusive get-user-env nice no-kill propagate".split()
_NO_VALUE = """
    contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue
    spread-job test-only usage use-min-nodes verbose version wait
""".split()
REQUIRED, OPTIONAL, NONE = "required", "optional", "none"
LONG_OPTIONS: dict[str, str] = {
    **dict.fromkeys(_WITH_VALUE, REQUIRED), **dict.fromkeys(_OPTIONAL_VALUE, OPTIONAL), **dict.fromkeys(_NO_VALUE, NONE)}
ALIASES = {"tasks-per-node": "ntasks-per-node"}  # two names, one option
# sbatch's short options (its getopt string, "k::" = optional value) and their long names.
SHORT_OPTSTRING = "a:A:b:B:c:C:d:D:e:F:G:hHi:J:k::L:m:M:n:N:o:Op:q:QsS:t:vVw:Wx:"
SHORT_NAMES = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task", "C": "constraint",
    "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile", "G": "gpus", "h": "help", "H": "hold",
    "i": "input", "J": "job-name", "k": "no-kill", "L": "licenses", "m": "distribution", "M": "clusters",
    "n": "ntasks", "N": "nodes", "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version", "w": "nodelist",
    "W": "wait", "x": "exclude",
}

_LOGS = "the logs go to <run dir>/logs, where every helper looks"
# The job's environment is the launcher's to set: a variable passed by sbatch would skip the checks
# --env makes (the names the job sets itself, secrets kept out of the script).
_ENV = "give variables with --env NAME=VALUE (or the repo's .env)"
# Options the launcher or job control sets, or that would break what they do: name -> what to do instead.
MANAGED_SBATCH_OPTIONS = {
    "time": "use --time_limit",
    "job-name": "use --job_name",
    "nodes": "use --num_nodes",
    "gres": "use --gpus_per_node",
    "gpus": "use --gpus_per_node",
    "gpus-per-node": "use --gpus_per_node",
    "cpus-per-task": "use --cpus_per_task",
    "ntasks-per-node": "one task per node runs the job script",
    "partition": "use --partition",
    "account": "use --account",
    "qos": "use --qos",
    "mem": "use --mem",
    "constraint": "use --constraint",
    "output": _LOGS,
    "error": _LOGS,
    "open-mode": "logs are appended across requeues",
    "signal": "use --signal_grace",
    "dependency": "use --chain (job control chains the run's jobs itself)",
    "array": "one launch per run, or a --sweep (array jobs would share one run directory)",
    "requeue": "use --continuation",
    "no-requeue": "use --continuation",
    "wait": "the launcher and each job's successor submission go on without waiting for the job",
    "clusters": "job control finds and continues the run's jobs on this cluster",
    "cluster": "job control finds and continues the run's jobs on this cluster",
    "export": _ENV,
    "export-file": _ENV,
}
# Options with which sbatch submits no job, or not the launcher's script, or not as the user: a
# launch would write the run and then find no job id, or the job's check of its run folder would fail.
NOT_SUBMITTING = {
    "test-only": "a dry run (--dry_run) asks sbatch --test-only itself",
    "help": "sbatch would print its help and submit nothing",
    "usage": "sbatch would print its usage and submit nothing",
    "version": "sbatch would print its version and submit nothing",
    "wrap": "sbatch would run that command instead of the job script",
    "uid": "the job runs as you: its run folder is yours alone (hpc/run/trust.py)",
    "gid": "the job runs as you, with your groups",
}
_SPLIT = re.compile(r"[ \t\v\f]+")  # the C locale's isspace, which sbatch splits #SBATCH lines on
_UNSAFE = re.compile(r"[\"'\\#\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Read:
    """One option as sbatch reads it: how the user spelled it and its long name."""

    spelling: str  # --ou, -o, --output
    name: str  # output


def check_sbatch_args(lines: list[str]) -> list[str]:
    """The lines, unless one is not an sbatch option or sets one the launcher manages (UsageError)."""
    for line in lines:
        check_line(line)
    words = [(line, word) for line in lines for word in _SPLIT.split(line.strip())]
    for line, read in read_options(words):
        if read.name in MANAGED_SBATCH_OPTIONS:
            raise UsageError(managed_message(line, read))
        if read.name in NOT_SUBMITTING:
            raise UsageError(f"--sbatch_arg {line!r}{read_as(read)}: {NOT_SUBMITTING[read.name]}")
    return lines


def read_as(read: Read) -> str:
    """How sbatch reads a spelling that is not the option's own name (a prefix, a short option)."""
    return "" if read.spelling == f"--{read.name}" else f" (sbatch reads {read.spelling} as --{read.name})"


def check_line(line: str) -> None:
    if not line.strip().startswith("-") or _UNSAFE.search(line):
        raise UsageError(
            f"invalid --sbatch_arg {line!r}: expected sbatch options such as --mail-type=END, starting with '-', "
            "on one line, without quotes, backslashes or '#' (sbatch reads those itself: quotes join words, "
            "'#' ends the line)")


def managed_message(line: str, read: Read) -> str:
    advice = MANAGED_SBATCH_OPTIONS[read.name]
    if read.spelling == f"--{read.name}":
        return f"--sbatch_arg {line!r} sets --{read.name}, which the launcher manages: {advice}"
    return f"--sbatch_arg {line!r}: sbatch reads {read.spelling} as --{read.name}, which the launcher manages: {advice}"


def read_options(words: list[tuple[str, str]]) -> list[tuple[str, Read]]:
    """Every option the words set, read as getopt_long reads sbatch's argument list (each
    word with the line it came from); UsageError where sbatch would refuse the words."""
    found: list[tuple[str, Read]] = []
    index = 0
    while index < len(words):
        line, word = words[index]
        if word == "--" or not word.startswith("-") or word == "-":
            raise UsageError(f"--sbatch_arg {line!r}: {word!r} is not an sbatch option (a value goes with its "
                             "option: --mail-type=END or --mail-type END)")
        reads, consumed = (long_option if word.startswith("--") else short_options)(line, word, words[index + 1:])
        found += [(line, read) for read in reads]
        index += 1 + consumed
    return found


def long_option(line: str, word: str, rest: list[tuple[str, str]]) -> tuple[list[Read], int]:
    """``--name[=value]``: the option it names (exactly, or by a prefix) and whether the next word is its value."""
    spelled, has_value, _ = word[2:].partition("=")
    name = resolve_long(line, spelled)
    if name is None:  # not an sbatch 22.05 option: a newer sbatch's, with its value after '='
        return [], 0
    read = Read(f"--{spelled}", name)
    kind = LONG_OPTIONS[name]
    if kind == NONE and has_value:
        raise UsageError(f"--sbatch_arg {line!r}: --{name} takes no value")
    if kind == REQUIRED and not has_value:
        return [read], value_word(line, read, rest)
    return [read], 0


def resolve_long(line: str, spelled: str) -> str | None:
    """The option a long name means: its exact name, else the one option it is a prefix of."""
    if spelled in LONG_OPTIONS:
        return ALIASES.get(spelled, spelled)
    candidates = sorted({ALIASES.get(name, name) for name in LONG_OPTIONS if name.startswith(spelled)})
    if len(candidates) > 1:
        listed = ", ".join(f"--{name}" for name in candidates[:8]) + (", ..." if len(candidates) > 8 else "")
        raise UsageError(f"--sbatch_arg {line!r}: sbatch cannot tell which option --{spelled} is ({listed}): "
                         "write the option's full name")
    return candidates[0] if candidates else None


def short_options(line: str, word: str, rest: list[tuple[str, str]]) -> tuple[list[Read], int]:
    """``-abc``: a bundle of short options; the first that takes a value takes the rest of the word
    (or, if that is empty and the value is required, the next word)."""
    reads: list[Read] = []
    for position, letter in enumerate(word[1:], 1):
        kind = short_kind(line, letter)
        read = Read(f"-{letter}", ALIASES.get(SHORT_NAMES[letter], SHORT_NAMES[letter]))
        reads.append(read)
        if kind == NONE:
            continue
        if position == len(word) - 1 and kind == REQUIRED:
            return reads, value_word(line, read, rest)
        return reads, 0
    return reads, 0


def short_kind(line: str, letter: str) -> str:
    at = SHORT_OPTSTRING.find(letter)
    if letter == ":" or at < 0:
        raise UsageError(f"--sbatch_arg {line!r}: sbatch has no option -{letter}")
    if SHORT_OPTSTRING.startswith("::", at + 1):
        return OPTIONAL
    return REQUIRED if SHORT_OPTSTRING.startswith(":", at + 1) else NONE


def value_word(line: str, read: Read, rest: list[tuple[str, str]]) -> int:
    """An option that needs a value takes the next word (1), whatever it looks like."""
    if not rest:
        named = "" if read.spelling == f"--{read.name}" else f" (sbatch reads it as --{read.name})"
        raise UsageError(f"--sbatch_arg {line!r}: {read.spelling} needs a value{named}")
    return 1
