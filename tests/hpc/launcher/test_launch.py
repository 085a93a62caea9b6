"""The launcher's command line without Slurm: validation, dry run, quoting, secrets."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc.launcher import launch, single_run
from hpc.launcher.clusters import load_registry
from hpc.launcher.envfiles import UNPRINTABLE_RE

REPO = Path(__file__).resolve().parents[3]


def run_main(capsys, *argv):
    code = launch.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def base_args(runs_dir, *extra):
    return ["--cluster", "local", "--job_name", "t1", "--time_limit", "30", "--runs_dir", str(runs_dir), *extra]


@pytest.fixture(autouse=True)
def no_sbatch(monkeypatch):
    """These tests describe a machine without Slurm; the Slurm tests live elsewhere."""
    monkeypatch.setattr(single_run.slurm, "sbatch_path", lambda: None)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--job_name", "bad name"], "invalid --job_name 'bad name'"),
        (["--job_name", "x" * 65], "1-64 characters"),
        (["--job_name", ".."], "not only dots"),
        (["--time_limit", "8-00:00:00"], "exceeds local's maximum wall time 7-00:00:00"),
        (["--time_limit", "1h"], "invalid time limit '1h'"),
        (["--cluster", "nowhere"], "unknown cluster 'nowhere'; known clusters: vista"),
        (["--gpus_per_node", "3"], "invalid --gpus_per_node 3: accepted 0..2 (local has 2 GPUs per node)"),
        (["--num_nodes", "99"], "invalid --num_nodes 99: accepted 1..4 on local"),
        (["--partition", "gpu; rm -rf /"], "invalid --partition"),
        (["--mem", "lots"], "invalid --mem 'lots'"),
        (["--sbatch_arg", "mail-type=END"], "invalid --sbatch_arg"),
        (["--sbatch_arg", "--x=1\n#SBATCH --y"], "invalid --sbatch_arg"),
        (["--sbatch_arg=--time=99:00:00"], "--sbatch_arg '--time=99:00:00' sets --time, which the launcher manages: use --time_limit"),
        (["--sbatch_arg=-t 99:00:00"], "sbatch reads -t as --time, which the launcher manages: use --time_limit"),
        (["--sbatch_arg=-o/tmp/x.out"], "sbatch reads -o as --output, which the launcher manages: the logs go to"),
        (["--sbatch_arg=--signal=B:USR1@60"], "use --signal_grace"),
        (["--sbatch_arg=--no-requeue"], "use --continuation"),
        (["--sbatch_arg=--dep=afterok:1"], "use --chain"),
        (["--sbatch_arg=--gres=gpu:4"], "use --gpus_per_node"),
        (["--cpus_per_task", "0"], "invalid --cpus_per_task 0: accepted 1..4096"),
        (["--config", "nope"], "unknown --config 'nope'; known configs:"),
        (["--train_arg", "novalue"], "invalid --train_arg 'novalue'"),
        (["--train_arg", "learning_rat=1e-5"], "unknown config key 'learning_rat'; accepted keys: project,"),
        (["--train_arg", "max_turns=ten"], "invalid value 'ten' for config key 'max_turns'"),
        (["--env", "1BAD=x"], "invalid --env name '1BAD' (value not shown)"),
        (["--env", "GEMINI_API_KEY sk-secret"], "invalid --env argument without '=' (not shown"),
        (["--entrypoint", "os.system('x')"], "invalid --entrypoint"),
        (["--signal_grace", "5000"], "invalid --signal_grace 5000"),
        (["--max_failures", "0"], "invalid --max_failures 0"),
        (["--chain", "0"], "invalid --chain 0"),
        (["--unknown_flag"], "unrecognized arguments: --unknown_flag"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(capsys, tmp_path, extra, fragment):
    runs = tmp_path / "runs"
    code, out, err = run_main(capsys, *base_args(runs), *extra, "--dry_run")
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
    assert not runs.exists()


def test_runs_dir_with_a_percent_sign_is_refused(capsys, tmp_path):
    code, _, err = run_main(capsys, *base_args(tmp_path / "100%"), "--dry_run")
    assert code == 2 and "'%'" in err


def test_missing_required_flag_is_one_line(capsys):
    code, _, err = run_main(capsys, "--dry_run")
    assert code == 2 and "--job_name" in err and len(err.strip().splitlines()) == 1


def test_submission_without_slurm_names_dry_run_and_local_slurm(capsys, tmp_path):
    runs = tmp_path / "runs"
    code, _, err = run_main(capsys, *base_args(runs))
    assert code == 2
    assert "no Slurm found" in err and "--dry_run" in err and "scripts/local_slurm.sh up" in err
    assert not runs.exists()


def test_dry_run_prints_cluster_reason_env_script_and_command_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HPC_HOSTNAME", "my-workstation")
    runs = tmp_path / "runs"
    args = ["--job_name", "agent_008", "--time_limit", "48:00:00", "--runs_dir", str(runs), "--dry_run"]
    code, out, _ = run_main(capsys, *args)
    assert code == 0
    assert "cluster:      local (HPC_HOSTNAME 'my-workstation' matches no known cluster; falling back to 'local')" in out
    assert "JUDGE_MODEL=gemini/gemini-2.0-flash" in out
    assert "#SBATCH --time=48:00:00" in out
    assert "python -m trainer.train --config agent_008" in out
    assert f"sbatch --parsable {runs}/agent_008/scripts/" in out
    assert "bash -n: ok" in out
    assert "new run: will start from step 0" in out
    assert not runs.exists()


def test_dry_run_for_a_cluster_uses_its_partition_modules_and_limits(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("HPC_HOSTNAME", "login1.vista.tacc.utexas.edu")
    code, out, _ = run_main(capsys, "--job_name", "a", "--time_limit", "2-00", "--dry_run", "--account", "ABC123")
    assert code == 0
    assert "vista (hostname" not in out and "HPC_HOSTNAME 'login1.vista.tacc.utexas.edu' matches" in out
    assert "#SBATCH --partition=gh" in out and "#SBATCH --account=ABC123" in out
    assert "module load gcc" in out and "--gres" not in out  # whole nodes at TACC
    assert f"{tmp_path}/scratch/art-runs/a" in out
    assert "continuation: afterany" in out


def test_secrets_never_reach_the_preview_or_the_script(capsys, tmp_path):
    secret = "sk-live-TOPSECRET"
    code, out, _ = run_main(
        capsys, *base_args(tmp_path / "runs"), "--dry_run",
        "--env", f"OPENAI_API_KEY={secret}", "--env", f"DB_PASSWORD={secret}", "--env", "HF_TOKEN=" + secret,
        "--env", "URL=https://x:${OPENAI_API_KEY}@judge",
    )
    assert code == 0
    assert secret not in out
    assert "OPENAI_API_KEY=***" in out and "URL=***" in out


def test_train_args_config_and_entrypoint_reach_the_workload_line(capsys, tmp_path):
    code, out, _ = run_main(
        capsys, *base_args(tmp_path / "runs"), "--dry_run", "--config", "smoke",
        "--train_arg", "learning_rate=2e-5", "--train_arg", "max_turns=4", "--entrypoint", "tests.doubles.echo_workload",
    )
    assert code == 0
    assert "tests.doubles.echo_workload --config smoke learning_rate=2e-5 max_turns=4" in out


def test_help_explains_each_flag_with_its_default(capsys):
    with pytest.raises(SystemExit) as exit_info:
        launch.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    assert exit_info.value.code == 0
    for flag in ["--job_name", "--time_limit", "--cluster", "--partition", "--account", "--qos", "--num_nodes",
                 "--gpus_per_node", "--cpus_per_task", "--mem", "--constraint", "--config", "--train_arg", "--env",
                 "--sbatch_arg", "--dry_run", "--runs_dir", "--signal_grace", "--max_resubmits", "--chain"]:
        assert flag in out
    assert "default: 300, or a quarter of the time limit" in out
    assert "(default: agent_008)" in out and "(default: 20)" in out
    assert "(default: None)" not in out  # a default worth nothing is not shown


def test_dry_run_does_not_import_training_libraries(tmp_path):
    code = (
        "import sys\n"
        "from hpc import launch\n"
        f"rc = launch.main(['--cluster', 'local', '--job_name', 'x', '--time_limit', '10', '--runs_dir', {str(tmp_path)!r}, '--dry_run'])\n"
        "heavy = sorted(m for m in ('art', 'litellm', 'datasets', 'torch', 'vllm', 'ray') if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert "HEAVY [] 0" in result.stdout, result.stdout + result.stderr


# -- quoting: arbitrary strings survive rendering and reach the workload intact --

SAFE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=40
).filter(lambda s: "${" not in s)
# A value the dry run prints holds no line break or control character (refused: hpc/launcher/envfiles.py).
PRINTED_TEXT = SAFE_TEXT.filter(lambda s: not UNPRINTABLE_RE.search(s))
JOB_NAMES = st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True).filter(lambda s: set(s) != {"."})


def render_for(runs_dir: Path, job_name: str, env_value: str, train_value: str) -> tuple[str, launch.JobSpec]:
    args = launch.build_parser().parse_args([
        # --job_name=NAME: a name may start with "-", which argparse would take for a flag
        "--cluster", "local", f"--job_name={job_name}", "--time_limit", "10", "--runs_dir", str(runs_dir),
        "--entrypoint", "tests.doubles.echo_workload", "--continuation", "afterany",
        "--env", f"ODD_VALUE={env_value}", "--env", "ECHO_ENV_NAMES=ODD_VALUE",
        "--train_arg", f"note={train_value}",
    ])
    spec = single_run.spec_from_args(args, load_registry())
    return single_run.render_script(spec), spec


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job_name=JOB_NAMES, env_value=PRINTED_TEXT, train_value=SAFE_TEXT)
def test_rendered_script_passes_bash_n_and_the_workload_sees_the_exact_strings(job_name, env_value, train_value):
    with tempfile.TemporaryDirectory() as tmp:
        script, spec = render_for(Path(tmp) / "runs", job_name, env_value, train_value)
        single_run.bash_syntax_check(script)
        path = Path(tmp) / "job.sh"
        path.write_text(script)
        spec.run_dir.path.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env["SLURM_JOB_NAME"] = job_name  # no SLURM_JOB_ID: a script run by hand, so its hooks ask Slurm nothing
        result = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, timeout=120)
        echoed = json.loads((spec.run_dir.path / "echo.json").read_text())
        assert echoed["argv"] == ["--config", "agent_008", f"note={train_value}"], result.stderr
        assert echoed["env"]["ODD_VALUE"] == env_value
        assert echoed["env"]["HPC_JOB_NAME"] == job_name


@pytest.mark.parametrize(
    "time_limit, grace_flag, expected",
    [("48:00:00", [], 300), ("5", [], 75), ("1", [], 15), ("30", ["--signal_grace", "60"], 60)],
)
def test_signal_grace_defaults_to_300_s_or_a_quarter_of_a_short_limit(capsys, tmp_path, time_limit, grace_flag,
                                                                       expected):
    args = ["--cluster", "local", "--job_name", "g", "--time_limit", time_limit, "--runs_dir", str(tmp_path)]
    code, out, err = run_main(capsys, *args, *grace_flag, "--dry_run")
    assert code == 0, err
    assert f"#SBATCH --signal=B:USR1@{expected}\n" in out


# -- --dry_run --preflight: the trainer's checks on the login node -----------------------------------

PREFLIGHT_KEY = "sk-login-preflight-0123456789"
PREFLIGHT_ARGS = ("--config", "smoke", "--train_arg", "backend=tests.doubles.art_backend:FakeBackend",
                  "--train_arg", "preflight_min_free_gb=0", "--env", "JUDGE_MODEL=judge-model")


@pytest.fixture(scope="module")
def staged_data(tmp_path_factory) -> Path:
    """A DATA_DIR staged by the real `prepare` from the shipped fixture corpus."""
    from trainer.staging.data import prepare

    data = tmp_path_factory.mktemp("data")
    from trainer.proof.corpus import CORPUS as fixtures
    prepare(data, str(fixtures / "emails.jsonl"), str(fixtures / "questions.jsonl"), show_progress=False)
    return data


@pytest.mark.parametrize("extra, fragment", [
    (["--preflight"], "--preflight needs --dry_run"),
    (["--preflight", "--dry_run", "--entrypoint", "tests.doubles.step_trainer"],
     "--preflight checks what trainer.train needs; --entrypoint tests.doubles.step_trainer runs something else"),
])
def test_preflight_flag_misuse_is_one_line_exit_2_and_nothing_written(capsys, tmp_path, extra, fragment):
    code, out, err = run_main(capsys, *base_args(tmp_path / "runs"), *extra)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert out == "" and not (tmp_path / "runs").exists()


def test_dry_run_preflight_runs_each_check_with_the_jobs_environment(capsys, tmp_path, staged_data):
    from tests.doubles.openai_server import OpenAIServer, text

    with OpenAIServer(lambda body: text("OK"), api_key=PREFLIGHT_KEY) as judge:
        code, out, err = run_main(capsys, *base_args(tmp_path / "runs"), *PREFLIGHT_ARGS, "--dry_run", "--preflight",
                                  "--env", f"DATA_DIR={staged_data}", "--env", f"JUDGE_API_BASE={judge.base_url}",
                                  "--env", f"JUDGE_API_KEY={PREFLIGHT_KEY}")
        (request,) = judge.requests
    assert code == 0, out + err
    section = out[out.index("# preflight on the login node"):].splitlines()[1:]
    assert [line.split()[0] for line in section] == ["ok"] * 7 + ["job", "job"]
    assert f"ok      data: {staged_data}/enron_emails.db" in out
    assert "ok      judge: the answer judge judge-model at http://127.0.0.1" in out
    assert request.headers["authorization"] == f"Bearer {PREFLIGHT_KEY}"  # the key from --env reached it...
    assert PREFLIGHT_KEY not in out + err  # ... and was never printed
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing, preflight included


def test_dry_run_preflight_on_an_offline_cluster_fails_and_lists_what_only_the_job_checks(capsys, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("PROJECT", str(tmp_path / "project"))
    code, out, err = run_main(capsys, "--cluster", "jureca", "--job_name", "off", "--time_limit", "30",
                              "--runs_dir", str(tmp_path / "runs"), "--config", "smoke", "--dry_run", "--preflight")
    assert code == 1, err
    section = out[out.index("# preflight on the login node (jureca's"):]
    assert "FAILED  data (permanent): the data directory" in section and "art-e-data does not exist" in section
    assert "FAILED  model_cache (permanent): the node is offline and the HF cache" in section
    assert "job only: the node's offline mode" in section and "job only: the judge through the job's SSH tunnel" in section


def test_dry_run_preflight_keeps_litellm_out_of_the_launcher(tmp_path):
    code = (
        "import sys\n"
        "from hpc import launch\n"
        f"rc = launch.main(['--cluster', 'local', '--job_name', 'x', '--time_limit', '10', '--runs_dir', {str(tmp_path)!r},"
        " '--config', 'smoke', '--dry_run', '--preflight'])\n"
        "heavy = sorted(m for m in ('art', 'litellm', 'datasets', 'torch') if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert "HEAVY [] 1" in result.stdout, result.stdout + result.stderr  # the checks ran (and failed) in a child
    assert "FAILED  data" in result.stdout
