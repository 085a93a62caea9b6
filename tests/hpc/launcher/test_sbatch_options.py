"""--sbatch_arg is read as sbatch reads #SBATCH lines: every spelling of a managed option is refused.

The Slurm tests check the module against the installed sbatch itself: its option table (names,
which take a value, the short letters) is derived from sbatch's own answers, and for each of
a few hundred spellings ``sbatch -v --test-only`` says which options it sets: the launcher
refuses a spelling as managed exactly when sbatch reads a managed option from it."""

from __future__ import annotations

import re
import string
import subprocess

import pytest

from hpc.errors import UsageError
from hpc.launcher.sbatch_options import (
    ALIASES,
    LONG_OPTIONS,
    MANAGED_SBATCH_OPTIONS,
    NONE,
    OPTIONAL,
    REQUIRED,
    SHORT_NAMES,
    SHORT_OPTSTRING,
    check_sbatch_args,
)

# A value sbatch takes for each managed option (a bad value stops sbatch before it says what it read).
VALUES = {"time": "5", "job-name": "x", "nodes": "1", "gres": "gpu:1", "gpus": "1", "gpus-per-node": "1",
          "cpus-per-task": "1", "ntasks-per-node": "1", "tasks-per-node": "1", "partition": "debug",
          "account": "acct", "qos": "normal", "mem": "100", "constraint": "c", "output": "/tmp/x.out",
          "error": "/tmp/x.err", "open-mode": "append", "signal": "USR1@60", "dependency": "singleton",
          "array": "1-2", "clusters": "c1", "cluster": "c1", "export": "ALL,HPC_SETUP_ERROR=boom",
          "export-file": "/dev/null"}


def refusal(lines: list[str]) -> str | None:
    try:
        check_sbatch_args(lines)
    except UsageError as error:
        return str(error)
    return None


@pytest.mark.parametrize("lines, fragment", [
    (["--ou=/tmp/x"], "sbatch reads --ou as --output, which the launcher manages"),
    (["--outp /tmp/x"], "sbatch reads --outp as --output"),
    (["--output /tmp/x"], "sets --output, which the launcher manages: the logs go to <run dir>/logs"),
    (["-o /tmp/x"], "sbatch reads -o as --output"),
    (["-o/tmp/x"], "sbatch reads -o as --output"),
    (["-vo/tmp/x"], "sbatch reads -o as --output"),
    (["-vHe /tmp/x"], "sbatch reads -e as --error"),
    (["-Jname"], "sbatch reads -J as --job-name, which the launcher manages: use --job_name"),
    (["--mail-type=END -t5"], "sbatch reads -t as --time, which the launcher manages: use --time_limit"),
    (["--comment=a\t-p debug"], "sbatch reads -p as --partition"),
    (["--tas=2"], "sbatch reads --tas as --ntasks-per-node"),
    (["--tasks-per-node=2"], "sbatch reads --tasks-per-node as --ntasks-per-node"),
    (["--no-r"], "sbatch reads --no-r as --no-requeue, which the launcher manages: use --continuation"),
    (["--req"], "sbatch reads --req as --requeue"),
    (["--dep afterok:1"], "sbatch reads --dep as --dependency, which the launcher manages: use --chain"),
    (["--ar=1-3"], "sbatch reads --ar as --array"),
    (["--sig=B:USR1@5"], "use --signal_grace"),
    (["-W"], "sbatch reads -W as --wait"),
    (["-M other"], "sbatch reads -M as --clusters"),
    (["--gres=gpu:4"], "sets --gres, which the launcher manages: use --gpus_per_node"),
    (["--o=/tmp/x"], "sbatch cannot tell which option --o is (--open-mode, --output, --overcommit, --oversubscribe)"),
    (["--ti=5"], "sbatch cannot tell which option --ti is (--time, --time-min)"),
    (["--=x"], "sbatch cannot tell which option -- is"),
    (["--mail-type"], "--mail-type needs a value"),
    (["--mail-t"], "--mail-t needs a value (sbatch reads it as --mail-type)"),
    (["-d"], "-d needs a value (sbatch reads it as --dependency)"),
    (["--hold=yes"], "--hold takes no value"),
    (["-X"], "sbatch has no option -X"),
    (["-v:"], "sbatch has no option -:"),
    (["--mail-type END extra"], "'extra' is not an sbatch option"),
    (["--nice 5"], "'5' is not an sbatch option"),
    (["--", "-o/tmp/x"], "'--' is not an sbatch option"),
    (["mail-type=END"], "invalid --sbatch_arg 'mail-type=END'"),
    (["--comment='a b'"], "without quotes, backslashes or '#'"),
    (["--comment=a#-o/x"], "without quotes, backslashes or '#'"),
    (["--comment=a\\ b"], "without quotes, backslashes or '#'"),
    (["--export=ALL,HPC_SETUP_ERROR=boom"], "sets --export, which the launcher manages: give variables with --env"),
    (["--export=NONE"], "sets --export, which the launcher manages"),
    (["--export RAY_ADDRESS=x"], "sets --export, which the launcher manages"),
    (["--mail-type=END", "--export HPC_NOTIFY_PROXY=x"], "sets --export, which the launcher manages"),
    (["--export-file=/tmp/env"], "sets --export-file, which the launcher manages: give variables with --env"),
    (["--export-f /tmp/env"], "sbatch reads --export-f as --export-file"),
    (["--export-=/tmp/env"], "sbatch reads --export- as --export-file"),
    (["--exp=ALL"], "sbatch cannot tell which option --exp is (--export, --export-file)"),
    (["--x=1\n#SBATCH --y"], "on one line"),
    (["--mail-type=END\r"], "on one line"),
])
def test_every_spelling_of_a_managed_or_unreadable_option_is_refused_in_one_line(lines, fragment):
    message = refusal(lines)
    assert message is not None and fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize("lines", [
    ["--mail-type=END"], ["--mail-type END"], ["--mail-user=me@example.org", "--mail-type=FAIL,END"],
    ["--comment", "-o/tmp/x"],  # sbatch takes the next word as --comment's value, whatever it looks like
    ["-ko/tmp/x"],  # -k takes an optional value: o/tmp/x is -k's, not -o's
    ["--hold"], ["-H"], ["--exclusive"], ["--exclusive=user"], ["--time-min=30"], ["--gres-flags=enforce-binding"],
    ["--mem-per-gpu=10G"], ["--wait-all-nodes=1"], ["--tres-per-task=gres/gpu:1"],  # a newer sbatch's
    ["-s"], ["--nice=5"], ["--exclude n1"], ["-x n1"], ["  --mail-type=END  "],
])
def test_options_the_launcher_does_not_manage_pass(lines):
    assert refusal(lines) is None


@pytest.mark.parametrize("lines, fragment", [
    (["--test-only"], "--test-only': a dry run (--dry_run) asks sbatch --test-only itself"),
    (["--test"], "sbatch reads --test as --test-only"),
    (["--mail-type=END --test-only"], "asks sbatch --test-only itself"),
    (["-h"], "sbatch reads -h as --help"), (["-vh"], "sbatch reads -h as --help"), (["--help"], "print its help"),
    (["--usage"], "print its usage"), (["--usa"], "sbatch reads --usa as --usage"),
    (["-V"], "sbatch reads -V as --version"), (["--version"], "print its version"),
    (["--wrap=true"], "run that command instead of the job script"), (["--wrap true"], "instead of the job script"),
    (["--uid=0"], "the job runs as you"), (["--gid=0"], "the job runs as you"),
])
def test_an_option_with_which_sbatch_submits_no_job_of_the_users_is_refused(lines, fragment):
    message = refusal(lines)
    assert message is not None and fragment in message and "\n" not in message, message


def test_the_table_is_consistent():
    assert set(SHORT_NAMES.values()) <= set(LONG_OPTIONS)
    assert set(SHORT_NAMES) == set(SHORT_OPTSTRING.replace(":", ""))
    assert set(MANAGED_SBATCH_OPTIONS) <= set(LONG_OPTIONS) - set(ALIASES)


# -- against the installed sbatch -------------------------------------------------------------

SCRIPT = "#!/bin/bash\ntrue\n"


def sbatch(*args: str, script: str = SCRIPT) -> tuple[int, str]:
    result = subprocess.run(["sbatch", "--test-only", *args], input=script, capture_output=True, text=True,
                            timeout=60)
    return result.returncode, result.stdout + result.stderr


def long_names_of(prefix: str) -> set[str]:
    """The long options sbatch knows that start with ``prefix``, as sbatch itself lists them."""
    _, out = sbatch(f"--{prefix}=zz")
    listed = re.search(r"is ambiguous; possibilities:(.*)", out)
    if listed:
        return set(re.findall(r"'--([^']+)'", listed.group(1)))
    if "unrecognized option" in out:
        return set()
    _, out = sbatch(f"--{prefix}")  # one option: its error names it
    named = re.search(r"option '--([^'=]+)' (requires|doesn't allow)", out)
    if named:
        return {named.group(1)}
    _, out = sbatch("-v", f"--{prefix}")
    return set(defined_options(out))


def value_kind(name: str) -> str:
    if "requires an argument" in sbatch(f"--{name}")[1]:
        return REQUIRED
    return NONE if "doesn't allow an argument" in sbatch(f"--{name}=zz")[1] else OPTIONAL


def defined_options(out: str) -> list[str]:
    """The options ``sbatch -v`` says were set (not the test's own --test-only)."""
    if "defined options" not in out:
        return []
    block = out.split("defined options", 1)[1].split("end of defined options", 1)[0]
    return [name for name in re.findall(r"sbatch: (\S+)\s+: ", block) if name != "test-only"]


@pytest.mark.slurm
def test_the_long_option_table_is_the_installed_sbatchs(slurm):
    names: set[str] = set()
    for first in string.ascii_lowercase:
        found = long_names_of(first)
        names |= found
        if len(found) == 1:  # a single option under the letter; a second one would share a longer prefix
            names |= {n for second in string.ascii_lowercase + "-" for n in long_names_of(first + second)}
    assert names == set(LONG_OPTIONS)
    assert {name: value_kind(name) for name in sorted(names)} == LONG_OPTIONS


def declared_kind(letter: str) -> str:
    at = SHORT_OPTSTRING.index(letter)
    if SHORT_OPTSTRING.startswith("::", at + 1):
        return OPTIONAL
    return REQUIRED if SHORT_OPTSTRING.startswith(":", at + 1) else NONE


@pytest.mark.slurm
def test_the_short_options_are_the_installed_sbatchs(slurm, tmp_path):
    letters = [letter for letter in string.ascii_letters + string.digits
               if "invalid option" not in sbatch(f"-{letter}")[1]]
    assert set(letters) == set(SHORT_NAMES)
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\n")
    values = {**VALUES, "begin": "now", "distribution": "block", "no-kill": "off", "nodefile": str(nodefile),
              "chdir": "/tmp", "input": "/dev/null", "nodelist": "n1", "exclude": "n2"}
    for letter, name in SHORT_NAMES.items():
        kind = declared_kind(letter)
        assert ("requires an argument" in sbatch(f"-{letter}")[1]) == (kind == REQUIRED), letter
        if letter in "hVQ":  # -h and -V print and exit; -Q cannot be asked with -v
            continue
        if kind != REQUIRED:  # a letter after it is its value (optional) or the next option (none)
            assert ("invalid option -- 'z'" in sbatch(f"-{letter}zz")[1]) == (kind == NONE), letter
        _, out = sbatch("-v", f"-{letter}{values.get(name, '1') if kind != NONE else ''}")
        assert name in defined_options(out), (letter, out)
    _, out = sbatch("-v", "--tasks-per-node=1")
    assert ALIASES["tasks-per-node"] in defined_options(out)


def spellings() -> list[list[str]]:
    """Many ways to write each managed option, and some neighbours that are not."""
    cases: list[list[str]] = []
    for name in MANAGED_SBATCH_OPTIONS:
        value = VALUES.get(name, "")
        for end in range(1, len(name) + 1):
            prefix = name[:end]
            if LONG_OPTIONS[name] == REQUIRED:
                cases += [[f"--{prefix}={value}"], [f"--{prefix} {value}"], [f"--mail-type=END --{prefix}", f"-H {value}"]]
            else:
                cases += [[f"--{prefix}"], [f"--mail-type=END --{prefix}"]]
    for letter, name in SHORT_NAMES.items():
        if name in MANAGED_SBATCH_OPTIONS:
            value = VALUES[name] if LONG_OPTIONS[name] == REQUIRED else ""
            cases += [[f"-{letter}{value}"], [f"-v{letter}{value}"], [f"-H{letter} {value}".strip()],
                      [f"--comment=c -{letter} {value}".strip()], [f"-k{letter}{value}"], [f"--comment -{letter}{value}"]]
    return cases + [["--mail-type=END"], ["--comment", "-o/tmp/x"], ["--hold", "--comment=x"], ["-s"], ["-Hs"],
                    ["--exclusive"], ["--time-min=5"], ["--gres-flags=enforce-binding"], ["--mem-per-cpu=10"],
                    ["--gpus-per-task=1"], ["--cpus-per-gpu=1"], ["--nodelist=n1"], ["-w n1"]]


GETOPT_ERROR = re.compile(r"unrecognized option|invalid option|is ambiguous|requires an argument|"
                          r"doesn't allow an argument|Invalid directive")


def sbatch_reads(lines: list[str]) -> tuple[int, list[str], str]:
    script = "#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "true\n"
    code, out = sbatch("-v", script=script)
    return code, defined_options(out), out


@pytest.mark.slurm
def test_the_launcher_refuses_exactly_what_sbatch_reads_as_a_managed_option(slurm):
    cases = spellings()
    assert len(cases) > 300
    for lines in cases:
        message = refusal(lines)
        code, read, out = sbatch_reads(lines)
        managed = [name for name in read if name in MANAGED_SBATCH_OPTIONS]
        assert bool(managed) == bool(message and "which the launcher manages" in message), (lines, read, message)
        if message and not managed:  # refused for another reason: sbatch refuses it as well
            assert code != 0, (lines, read, message)
        if not message:  # sbatch may refuse a value (-kt5: "t5" is no --no-kill), never the words themselves
            assert not GETOPT_ERROR.search(out), (lines, out)
