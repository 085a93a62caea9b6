"""The remote flags taken off a command's own arguments, which go to the login node unchanged."""

from __future__ import annotations

import pytest

from hpc.errors import UsageError
from hpc.job.workload_env import HPC_REMOTE_DIR
from hpc.remote.options import DEFAULT_DIR, split


def test_the_remote_flags_in_either_form_are_taken_off_and_the_rest_kept_in_order(monkeypatch):
    monkeypatch.delenv(HPC_REMOTE_DIR, raising=False)
    options, rest = split(["agent_008", "--remote=vista", "--runs_dir", "/scratch/runs", "--remote_dir", "~/x",
                           "--remote_uncommitted", "--out", "here"], extra_flags=("--out",))
    assert (options.dest, options.remote_dir, options.uncommitted) == ("vista", "~/x", True)
    assert options.extras == {"--out": "here"} and rest == ["agent_008", "--runs_dir", "/scratch/runs"]
    # --out is hpc.report's alone: another command gets it as its own argument.
    options, rest = split(["--remote", "vista", "--out", "here"])
    assert options.remote_dir == DEFAULT_DIR and not options.uncommitted and rest == ["--out", "here"]


def test_the_checkout_defaults_to_hpc_remote_dir(monkeypatch):
    monkeypatch.setenv(HPC_REMOTE_DIR, "/p/project/me/launcher")
    assert split(["--remote", "jureca"])[0].remote_dir == "/p/project/me/launcher"
    assert split(["--remote", "jureca", "--remote_dir", "mine"])[0].remote_dir == "mine"


@pytest.mark.parametrize("argv, message", [
    (["--remote"], "--remote needs a value (accepted: an ssh destination"),
    (["--remote", "-oProxyCommand=reboot"], "bad --remote '-oProxyCommand=reboot' (accepted: an ssh destination"),
    (["--remote", "login node"], "bad --remote 'login node'"),
    (["--remote", "vista\n"], "bad --remote 'vista?'"),
    (["--remote", "vista", "--remote_dir="], "bad --remote_dir '' (accepted: a folder on the cluster"),
    (["--remote", "vista", "--remote_dir", "a\x1bb"], "bad --remote_dir 'a?b'"),
])
def test_a_bad_destination_or_folder_is_one_line_naming_it(argv, message):
    with pytest.raises(UsageError) as refused:
        split(argv)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize("typo", ["--remote_di", "--remote-dir", "--Remote_Dir", "--remotedir", "--remote_dirr",
                                  "--remte_dir", "--remote_uncommited", "--remote-uncommitted", "--remot", "--rem",
                                  "--remote_di=~/x", "--REMOTE"])
def test_a_mistyped_remote_flag_is_refused_before_anything_leaves(typo):
    with pytest.raises(UsageError, match=r"unknown remote flag '--\w[\w-]*' \(accepted: --remote, --remote_dir"):
        split(["--remote", "vista", typo, "~/x", "--job_name", "a"])


@pytest.mark.parametrize("flag", ["--resume", "--run", "--report", "--runs_dir", "--retries", "--time_limit", "--rerun"])
def test_the_commands_own_flags_are_not_taken_for_remote_typos(flag):
    assert split(["--remote", "vista", flag, "x"])[1] == [flag, "x"]
