"""Hostile input to the launcher, generated (hypothesis): job names, time limits, --env, --train_arg,
--sbatch_arg, --sweep, --sweep_file contents, --cluster and host names, mixed with the spellings
test_launch_refusals.py refuses. Whatever comes, a dry run exits 0 or 2, says an error in one line, never shows a
traceback, never prints the secret it was given, and writes nothing (docs/launching.md#what-the-launcher-refuses)."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc.launcher import launch, single_run

SECRET = "sk-fuzz-5ecret-9f8e7d6c5b4a"
REFERENCE = "${WANDB_API_KEY}"
FOREIGN_DIGITS = "٣۳३３𝟑৩³"

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=24)
DIGITS = st.text(alphabet="0123456789:-" + FOREIGN_DIGITS, min_size=1, max_size=10)


def mostly(good: st.SearchStrategy, *bad: st.SearchStrategy) -> st.SearchStrategy:
    """``good`` five times in six: each input is usually a good one, so that the checks after the
    first bad one are reached as often as the first."""
    return st.sampled_from([False, True, True, True, True, True]).flatmap(lambda ok: good if ok else st.one_of(*bad))


JOB_NAMES = mostly(st.sampled_from(["agent_008", "lr.sweep=1+2", "x"]),
                   st.from_regex(r"[A-Za-z0-9._=+-]{1,64}", fullmatch=True), TEXT)
TIME_LIMITS = mostly(st.sampled_from(["30", "1:00:00", "2-00"]),
                     st.sampled_from(["0", "٣٠", "３:00:00", "99-00", "", "1_0"]), DIGITS, TEXT)
ENV_NAMES = mostly(st.sampled_from([
    "RUNS_DIR", "ART_PATH", "DATA_DIR", "HF_HOME", "TUNNEL_PORT", "TUNNEL_HOST", "HPC_RAY_JOIN_TIMEOUT",
    "HPC_STOP_TIMEOUT", "JUDGE_MODEL", "JUDGE_SERVE_MODEL", "BUDGET_ACCOUNTS", "PLAIN", "URL", "OTHER_TOKEN"]),
    st.sampled_from(["HPC_RUN_DIR", "HPC_MODEL_DIR", "HPC_CLEANUP", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES",
                     "WANDB_MODE"]), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True), TEXT)
ENV_VALUES = st.one_of(st.sampled_from(["/tmp/fuzz", "1", "900", "x", "${PLAIN}", "${URL}/x", "${RUNS_DIR}",
                                        "${OTHER_TOKEN:-d}", "${NOPE}"]),
                       st.builds(lambda a, b: f"{a}{REFERENCE}{b}", TEXT, TEXT), TEXT, DIGITS)
ENV_PAIRS = st.lists(st.builds(lambda name, value: f"{name}={value}", ENV_NAMES, ENV_VALUES), max_size=4)
TRAIN_KEYS = st.one_of(st.sampled_from(["learning_rate", "max_turns", "project", "seed", "temperature", "nope"]), TEXT)
TRAIN_ARGS = st.lists(mostly(st.sampled_from(["learning_rate=2e-5", "max_turns=4", "seed=3", "project=p2"]),
                             st.builds(lambda k, v: f"{k}={v}", TRAIN_KEYS, st.one_of(TEXT, DIGITS))), max_size=3)
SBATCH_ARGS = st.lists(mostly(
    st.sampled_from(["--mail-type=END", "--hold", "-k", "--comment -o/tmp/x", "--exclusive"]),
    st.sampled_from(["--ou=/tmp/x", "-vo/tmp/x", "-Jname", "--output /tmp/x", "-o /tmp/x", "--ti=5", "--tas=2",
                     "--mail-type END extra", "-W"]),
    st.builds(lambda text: "-" + text, TEXT), TEXT), max_size=2)
SWEEPS = mostly(st.sampled_from([[], [], ["seed=1,2"]]), st.lists(st.builds(
    lambda k, vs: f"{k}={','.join(vs)}", TRAIN_KEYS, st.lists(st.one_of(DIGITS, TEXT), min_size=1, max_size=3)),
    max_size=2))
SWEEP_FILES = mostly(st.none(), st.binary(max_size=64), st.builds(str.encode, TEXT),
                     st.sampled_from([b"seed: [1, 2]", b"seed: [[1]]", b"learning_rate: [1e-5, \xd9\xa3e-5]",
                                      b"a: &a [x, x]\nseed: [*a, *a]", b"- 1", b"seed: " + b"[" * 200]))
CLUSTERS = mostly(st.sampled_from([None, "local", "jureca", "vista"]), st.sampled_from(["", "nowhere", "LOCAL"]), TEXT)
HOSTS = mostly(st.sampled_from([None, "jrlogin05.jureca", "login1.vista.tacc.utexas.edu"]),
               st.sampled_from(["*", "a" * 300, "-", "x\ny"]), TEXT)


def flags(name: str, values: list[str]) -> list[str]:
    return [f"{name}={value}" for value in values]  # --flag=value: a value may start with '-'


@st.composite
def launches(draw) -> tuple[list[str], bytes | None, str | None]:
    argv = [f"--job_name={draw(JOB_NAMES)}", f"--time_limit={draw(TIME_LIMITS)}", "--dry_run",
            f"--env=WANDB_API_KEY={SECRET}"]
    cluster = draw(CLUSTERS)
    argv += [] if cluster is None else [f"--cluster={cluster}"]
    argv += flags("--env", draw(ENV_PAIRS)) + flags("--train_arg", draw(TRAIN_ARGS))
    argv += flags("--sbatch_arg", draw(SBATCH_ARGS)) + flags("--sweep", draw(SWEEPS))
    return argv, draw(SWEEP_FILES), draw(HOSTS)


def run(argv: list[str], sweep_file: bytes | None, host: str | None, tmp: Path) -> tuple[int, str, str]:
    if sweep_file is not None:
        (tmp / "sweep.yaml").write_bytes(sweep_file)
        argv = [*argv, f"--sweep_file={tmp / 'sweep.yaml'}"]
    environment = {"SCRATCH": str(tmp / "scratch"), "USER": "alice", "HPC_HOSTNAME": host or "fuzz-host"}
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, environment), mock.patch.object(single_run.slurm, "sbatch_path", lambda: None), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = launch.main([*argv, f"--runs_dir={tmp / 'runs'}"])
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(launch_input=launches())
def test_any_input_is_a_dry_run_or_one_line_never_a_traceback_a_secret_or_a_write(launch_input):
    argv, sweep_file, host = launch_input
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        code, out, err = run(argv, sweep_file, host, tmp)
        assert code in (0, 2), (code, err)
        if code == 2:
            assert len(err.splitlines()) == 1 and err.startswith("hpc.launch: error: "), err
        assert "Traceback" not in out + err
        assert SECRET not in out + err
        assert sorted(p.name for p in tmp.iterdir()) == (["sweep.yaml"] if sweep_file is not None else [])


# -- run folders someone else owns, can write, or links: refused exactly then ----------

NEIGHBOUR = 12345
RUNS_STATES = mostly(st.sampled_from(["missing", "ours", "shared-sticky"]),
                     st.sampled_from(["others-writable", "group-writable", "neighbour's", "file", "fifo", "read-only"]))
FOLDER_STATES = mostly(st.sampled_from(["missing", "ours"]),
                       st.sampled_from(["others-writable", "group-writable", "neighbour's", "link", "file", "fifo"]))
ENTRY_STATES = mostly(st.just("sound"), st.sampled_from(["group-writable", "others-writable", "neighbour's", "link",
                                                         "wrong-kind", "readable"]))
SPOILED_RUNS = {"others-writable", "group-writable", "neighbour's", "file", "fifo", "read-only"}


@st.composite
def run_folders(draw) -> tuple[str, str, dict[str, str], int]:
    """The runs directory's state, the run folder's, some of its entries' (trust.ENTRIES) and a umask."""
    from hpc.run.trust import ENTRIES

    names = [e.name for e in ENTRIES if e.name != "sweep.json"]  # a sweep.json makes the folder a sweep's
    entries = draw(st.dictionaries(st.sampled_from(names), ENTRY_STATES, max_size=4))
    return draw(RUNS_STATES), draw(FOLDER_STATES), entries, draw(st.sampled_from([0o022, 0o002, 0o000, 0o077]))


def make_place(path: Path, state: str, folder: bool, outside: Path) -> None:
    """``path`` in ``state``: a folder (or, not ``folder``, a file) that is sound or spoiled one way."""
    if state in ("missing",):
        return
    if state == "link":
        path.symlink_to(outside)
    elif state == "file" or (state == "wrong-kind" and folder) or (not folder and state != "wrong-kind"):
        path.write_text("x\n")
    elif state == "fifo" or state == "wrong-kind":
        os.mkfifo(path)
    else:
        path.mkdir()
    if state in ("link", "wrong-kind", "fifo", "file"):
        return
    path.chmod({"others-writable": 0o757, "group-writable": 0o775, "shared-sticky": 0o1777, "read-only": 0o555,
                "readable": 0o644}.get(state, 0o755 if folder else 0o600))
    if state == "neighbour's":
        os.chown(path, NEIGHBOUR, NEIGHBOUR)


def spoiled(runs: str, folder: str, entries: dict[str, str]) -> bool:
    """Whether the drawn places hold anything someone else could change (the rule, stated apart from its code)."""
    if runs in SPOILED_RUNS or folder not in ("missing", "ours"):
        return True
    secrets_readable = entries.get("secrets.env") == "readable"
    return folder == "ours" and (secrets_readable or any(s not in ("sound", "readable") for s in entries.values()))


def tree_of(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    return {str(p): (os.lstat(p).st_uid, os.lstat(p).st_mode, p.read_bytes() if p.is_file() and not p.is_symlink()
                     and not stat.S_ISFIFO(os.lstat(p).st_mode) else None) for p in [root, *root.rglob("*")]}


def launch_into(runs: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(single_run.slurm, "sbatch_path", lambda: None), \
            mock.patch.object(single_run.slurm, "require_sbatch", lambda: "/usr/bin/sbatch"), \
            mock.patch.object(single_run.slurm, "submit", lambda script, dependency=None: "4242"), \
            mock.patch.object(single_run.slurm, "active_jobs", lambda *asked: {}), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = launch.main(["--cluster=local", "--job_name=nb2", "--time_limit=30", f"--runs_dir={runs}",
                            "--entrypoint=tests.doubles.step_trainer", "--no_preflight",
                            f"--env=WANDB_API_KEY={SECRET}", *extra])
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=run_folders())
def test_a_run_folder_is_launched_into_exactly_when_no_one_else_can_change_it(place):
    runs_state, folder_state, entries, umask = place
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "outside").mkdir()
        runs, folder = tmp / "runs", tmp / "runs" / "nb2"
        make_place(runs, "ours" if runs_state == "shared-sticky" and folder_state == "missing" else runs_state,
                   True, tmp / "outside")
        if runs_state == "shared-sticky":
            runs.chmod(0o1777)
        if runs.is_dir() and not runs.is_symlink():
            make_place(folder, folder_state, True, tmp / "outside")
        if folder.is_dir() and not folder.is_symlink():
            for entry, state in entries.items():
                is_folder = entry in ("scripts", "logs", "art")
                make_place(folder / entry, state, is_folder, tmp / "outside")
        refuse = spoiled(runs_state, folder_state if runs.is_dir() else "missing", entries if folder.is_dir() else {})
        before = tree_of(tmp)
        old = os.umask(umask)
        try:
            dry = launch_into(runs, "--dry_run")
            real = launch_into(runs)
        finally:
            os.umask(old)
        for code, out, err in (dry, real):
            assert code == (2 if refuse else 0), (place, err)
            assert SECRET not in out + err and "Traceback" not in err
            assert code == 0 or (len(err.splitlines()) == 1 and err.startswith("hpc.launch: error: ")), err
        if refuse:
            assert tree_of(tmp) == before, place
        else:
            made = {p: mode for p, (_, mode, _) in tree_of(folder).items() if p not in before}
            assert made and not [p for p, mode in made.items() if mode & 0o022 and not stat.S_ISLNK(mode)], made
