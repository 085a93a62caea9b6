"""What the launcher refuses, each class in several spellings: one line on stderr, exit 2,
nothing written, and no secret in what it prints. docs/launching.md#what-the-launcher-refuses says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.errors import UsageError
from hpc.launcher import launch, single_run
from hpc.launcher.clusters import load_registry
from hpc.launcher.envfiles import MAX_REFERENCE_DEPTH
from hpc.launcher.jobspec import PRINTED_SETTINGS, env_layers
from hpc.launcher.managed_vars import MANAGED, OFFLINE, USER_SETTINGS
from tests.hpc.dry_run_helpers import jsc_environment, no_sbatch  # fixtures

SECRET = "sk-live-0123456789abcdef"
DIGIT_THREE = ["٣", "۳", "३", "３", "𝟑", "৩", "³", "๓"]  # Arabic-Indic, Persian, Devanagari, fullwidth, math bold, ...


def refused(capsys, tmp_path: Path, *extra: str, cluster: str = "local") -> str:
    """Launch ``extra`` as a dry run; it must be refused in one line with exit 2, writing nothing. The line."""
    runs = tmp_path / "runs"
    code = launch.main(["--cluster", cluster, "--job_name", "t1", "--time_limit", "30", "--runs_dir", str(runs),
                        "--dry_run", *extra])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert len(err.splitlines()) == 1 and err.startswith("hpc.launch: error: "), err
    assert SECRET not in out + err
    assert not runs.exists() and not list(tmp_path.glob("**/secrets.env"))
    return err


def accepted(capsys, tmp_path: Path, *extra: str, cluster: str = "local") -> str:
    code = launch.main(["--cluster", cluster, "--job_name", "t1", "--time_limit", "30",
                        "--runs_dir", str(tmp_path / "runs"), "--dry_run", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


# -- item 11: numbers in ASCII digits only ----------------------------------------------------

@pytest.mark.parametrize("digit", DIGIT_THREE)
@pytest.mark.parametrize("flag, template", [
    ("--time_limit", "{}"), ("--time_limit", "{}:00:00"), ("--time_limit", "1-{}"), ("--time_limit", "1{}"),
    ("--num_nodes", "{}"), ("--gpus_per_node", "{}"), ("--cpus_per_task", "{}"), ("--ray_port", "6{}79"),
    ("--signal_grace", "6{}"), ("--max_resubmits", "{}"), ("--max_failures", "{}"), ("--chain", "{}"),
    ("--judge_gpus", "{}"), ("--train_arg", "max_turns={}"), ("--train_arg", "learning_rate={}e-5"),
    ("--train_arg", "temperature=0.{}"), ("--env", "HPC_RAY_JOIN_TIMEOUT={}00"), ("--env", "JUDGE_SERVE_PORT=1{}000"),
])
def test_a_number_with_a_digit_that_is_not_ascii_is_refused(capsys, tmp_path, digit, flag, template):
    value = template.format(digit)
    extra = ["--judge_serve", "Qwen/Qwen2.5-7B-Instruct"] if "JUDGE" in value else []
    err = refused(capsys, tmp_path, flag, value, *extra)
    assert value in err or repr(value) in err or repr(value.split("=", 1)[1]) in err


@pytest.mark.parametrize("value", ["1_0", "٣", "３", "²", "1٣"])
def test_sweep_pack_and_init_from_numbers_are_ascii_too(capsys, tmp_path, value):
    assert "invalid --pack" in refused(capsys, tmp_path, "--sweep", "seed=1,2", "--pack", value)
    assert "invalid --init_from" in refused(capsys, tmp_path, "--init_from", f"other:{value}")
    assert "for config key 'seed'" in refused(capsys, tmp_path, "--sweep", f"seed=1,{value}")


def test_tunnel_port_in_foreign_digits_is_refused_on_an_offline_cluster(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT", "/p/project/proj")
    assert "invalid TUNNEL_PORT" in refused(capsys, tmp_path, "--env", "TUNNEL_PORT=１０８０", cluster="jureca")


# -- item 2: a value the launcher prints may not be built from a secret -------------------------

@pytest.mark.parametrize("name", ["RUNS_DIR", "ART_PATH", "DATA_DIR", "HF_HOME", "ART_VLLM_RUNTIME_CACHE_DIR",
                                  "TUNNEL_SSH_OPTS", "JUDGE_SERVE_MODEL", "HPC_RAY_JOIN_TIMEOUT"])
@pytest.mark.parametrize("spelling", [
    ["--env", "WANDB_API_KEY=" + SECRET, "--env", "{name}=/tmp/h/${{WANDB_API_KEY}}"],
    ["--env", "HF_TOKEN=" + SECRET, "--env", "{name}=${{HF_TOKEN:-none}}"],
    ["--env", "DB_PASSWORD=" + SECRET, "--env", "BASE=/x/${{DB_PASSWORD}}", "--env", "{name}=${{BASE}}/y"],
    ["--env", "{name}=/tmp/${{OUTER_SECRET}}"],  # a secret of the launcher's own environment
])
def test_a_printed_value_built_from_a_secret_refuses_the_launch(capsys, tmp_path, monkeypatch, name, spelling):
    monkeypatch.setenv("OUTER_SECRET", SECRET)
    extra = [part.format(name=name) for part in spelling]
    err = refused(capsys, tmp_path, *extra)
    assert f"{name} (--env) is built from the secret" in err


def test_the_account_variable_of_the_cluster_may_not_be_built_from_a_secret(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PROJECT", "/p/project/proj")
    err = refused(capsys, tmp_path, "--env", f"API_KEY={SECRET}", "--env", "BUDGET_ACCOUNTS=${API_KEY}",
                  cluster="jureca")
    assert "BUDGET_ACCOUNTS (--env) is built from the secret API_KEY" in err


def test_a_secret_used_only_in_the_environment_stays_a_secret(capsys, tmp_path):
    out = accepted(capsys, tmp_path, "--env", f"WANDB_API_KEY={SECRET}", "--env", "WANDB_URL=https://u:${WANDB_API_KEY}@x")
    assert SECRET not in out and "WANDB_URL=***" in out


def test_every_printed_setting_is_checked():
    assert {"RUNS_DIR", "ART_PATH", "TUNNEL_HOST", "HPC_RAY_JOIN_TIMEOUT"} <= set(PRINTED_SETTINGS)


# -- item 4: the variables the launcher, the job script or Slurm set ----------------------------

@pytest.mark.parametrize("name", ["HPC_RUN_DIR", "HPC_MODEL_DIR", "HPC_JOB_NAME", "HPC_REPO", "HPC_SIGNAL_GRACE",
                                  "HPC_CLEANUP", "HPC_WORKLOAD_ENV", "HPC_STOP_SIGNAL", "HPC_VLLM_PORT",
                                  "HPC_ANYTHING_NEW", "HPC_JOB_END_TIME", "CUDA_VISIBLE_DEVICES", "RAY_ADDRESS",
                                  "SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_CONF", "HPC_HOSTNAME"])
def test_a_managed_variable_from_env_is_refused(capsys, tmp_path, name):
    err = refused(capsys, tmp_path, "--env", f"{name}=/etc")
    assert f"--env sets {name}, which is " in err and err.rstrip().endswith("remove it")


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_what_the_job_sets_on_an_offline_cluster_is_refused_there_and_free_elsewhere(capsys, tmp_path, monkeypatch,
                                                                                    name):
    monkeypatch.setenv("PROJECT", "/p/project/proj")
    assert f"--env sets {name}, which is set by" in refused(capsys, tmp_path, "--env", f"{name}=1", cluster="jureca")
    accepted(capsys, tmp_path, "--env", f"{name}=1")


@pytest.mark.parametrize("name", [*USER_SETTINGS, "NO_PROXY", "ART_PATH", "RUNS_DIR"])
def test_the_settings_users_set_pass(name):
    layers = env_layers(load_registry().get("jureca"), [f"{name}=1"])
    assert layers[-1].values == {name: "1"}


def test_the_users_dotenv_file_may_not_set_a_managed_variable(tmp_path):
    (tmp_path / "dotenv").mkdir()
    (tmp_path / ".env").write_text("GEMINI_API_KEY=x\nexport HPC_MODEL_DIR=/etc\n")
    with pytest.raises(UsageError, match=r"\.env sets HPC_MODEL_DIR, which is set by the job for its workload"):
        env_layers(load_registry().get("local"), [], repo_dir=tmp_path)


def test_the_projects_own_dotenv_files_set_no_managed_variable():
    registry = load_registry()
    for cluster in registry.clusters.values():
        project_layers = env_layers(cluster, [])[:2]  # dotenv/common.env, dotenv/<cluster>.env
        assert not {name for layer in project_layers for name in layer.values} & (set(MANAGED) | set(OFFLINE))


# -- item 10 (launcher side): files and chains that are not what they should be -----------------

@pytest.mark.parametrize("content, fragment", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8 text"),
    (b"\xff\xfeseed: [1, 2]", "not UTF-8 text"),
    (b"seed: [[1, 2]]", "plain values"),
    (b"seed: {a: 1}", "plain values"),
    (b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nseed: [*b, *b, *b, *b]\n", "an alias (*name)"),
    (b"seed: " + b"[" * 3000 + b"]" * 3000, "invalid --sweep_file"),
    (b"seed: [1, 2]\n" + b"# padding\n" * 120_000, "larger than"),
    (b"- 1\n- 2\n", "expected a mapping"),
    (b"seed: [1, 2", "invalid --sweep_file"),
])
def test_a_sweep_file_that_is_not_a_small_yaml_mapping_is_refused(capsys, tmp_path, content, fragment):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(content)
    assert fragment in refused(capsys, tmp_path, "--sweep_file", str(path))


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/", "/no/such/sweep.yaml"])
def test_a_sweep_file_that_is_not_a_file_is_refused_without_reading_it(capsys, tmp_path, path):
    assert "not a file" in refused(capsys, tmp_path, "--sweep_file", path)


@pytest.mark.parametrize("length", [MAX_REFERENCE_DEPTH + 1, 300, 2000])
@pytest.mark.parametrize("order", ["deepest last", "deepest first"])
def test_a_reference_chain_deeper_than_the_limit_is_one_line(capsys, tmp_path, length, order):
    pairs = [f"V{i}=${{V{i + 1}}}" for i in range(length)] + [f"V{length}=end"]
    pairs = pairs if order == "deepest last" else pairs[::-1]
    flags = [part for pair in pairs for part in ("--env", pair)]
    assert f"chain of more than {MAX_REFERENCE_DEPTH}" in refused(capsys, tmp_path, *flags)


def test_a_chain_within_the_limit_resolves(capsys, tmp_path):
    pairs = [f"V{i}=${{V{i + 1}}}" for i in range(MAX_REFERENCE_DEPTH)] + [f"V{MAX_REFERENCE_DEPTH}=end"]
    out = accepted(capsys, tmp_path, *[part for pair in pairs for part in ("--env", pair)])
    assert "V0=end" in out


@pytest.mark.parametrize("content, fragment", [(b"A=\xff\xfe\n", "not UTF-8 text"), (b"\x89PNG\x00", "not UTF-8 text"),
                                               (b"\x00\x01\x02", "line 1 is not NAME=VALUE")])
def test_a_users_dotenv_file_that_is_not_text_is_one_line(tmp_path, content, fragment):
    (tmp_path / ".env").write_bytes(content)
    with pytest.raises(UsageError, match=fragment):
        env_layers(load_registry().get("local"), [], repo_dir=tmp_path)


# -- minor: --cluster '' and a project that leaves ART_PATH --------------------------------------

@pytest.mark.parametrize("name", ["", " ", "local ", "LOCAL", "local\n"])
def test_a_cluster_name_that_is_not_one_is_refused_not_detected(capsys, tmp_path, name):
    assert f"unknown cluster {name!r}" in refused(capsys, tmp_path, "--cluster", name)


@pytest.mark.parametrize("project", ["/etc", "../..", "..", ".", "a/b", "", " ", "x\\y"])
def test_a_project_that_is_not_one_folder_name_is_refused(capsys, tmp_path, project):
    assert "for config key 'project'" in refused(capsys, tmp_path, "--train_arg", f"project={project}")
    assert "for config key 'project'" in refused(capsys, tmp_path, "--train_arg", f"project={project}",
                                                 "--entrypoint", "tests.doubles.echo_workload")


@pytest.mark.parametrize("value", ["2\n3", "2\r3", "a\tb", "\x1b[31m"])
def test_a_sweep_value_with_a_control_character_is_refused_in_one_line(capsys, tmp_path, value):
    assert "invalid --sweep" in refused(capsys, tmp_path, "--sweep", f"seed=1,{value}")
    path = tmp_path / "sweep.yaml"
    path.write_text(f"seed: [1, {value!r}]".replace("'", '"'))
    assert "invalid --sweep_file" in refused(capsys, tmp_path, "--sweep_file", str(path))


def test_an_error_quoting_a_value_with_a_newline_stays_one_line(capsys, tmp_path):
    assert "\\n" in refused(capsys, tmp_path, "--train_arg", "model_name=a\nb", "--train_arg", "seed=2\n3")


# -- sbatch options with which no job of the user's is submitted ------------

@pytest.mark.parametrize("option", ["--test-only", "--test", "-h", "--usage", "-V", "--wrap=true", "--uid=0"])
def test_an_sbatch_arg_that_submits_no_job_is_refused_before_anything_is_written(capsys, tmp_path, monkeypatch,
                                                                                option):
    assert "--sbatch_arg" in refused(capsys, tmp_path, f"--sbatch_arg={option}")
    submitted: list[Path] = []
    monkeypatch.setattr(single_run.slurm, "require_sbatch", lambda: "/usr/bin/sbatch")
    monkeypatch.setattr(single_run.slurm, "submit", lambda script, dependency=None: submitted.append(script) or "1")
    code = launch.main(["--cluster", "local", "--job_name", "t1", "--time_limit", "30", "--runs_dir",
                        str(tmp_path / "runs"), "--no_preflight", f"--sbatch_arg={option}"])
    assert code == 2 and "--sbatch_arg" in capsys.readouterr().err
    assert not submitted and not (tmp_path / "runs").exists()


# -- bash's own variables, which `bash -n` passes and the job dies on ------------

@pytest.mark.parametrize("setting", ["UID=5", "SHELLOPTS=xtrace", "EUID=0", "BASHOPTS=extglob", "PPID=1",
                                     "IFS=x", "BASH_ENV=/tmp/x.sh"])
def test_a_bash_variable_the_job_script_cannot_export_is_refused_by_the_dry_run(capsys, tmp_path, setting):
    name = setting.split("=")[0]
    err = refused(capsys, tmp_path, "--env", setting)
    assert f"--env sets {name}, which is bash's own" in err


def test_a_bash_read_only_variable_in_the_repos_env_is_refused_too(tmp_path):
    layer_file = tmp_path / ".env"
    layer_file.write_text("SHELLOPTS=xtrace\n")
    with pytest.raises(UsageError, match="sets SHELLOPTS, which is bash's own, read-only"):
        env_layers(load_registry().clusters["local"], [], repo_dir=tmp_path)


# -- the serve entrypoint's --train_arg, --sbatch_arg=--export, --env values that fake a line ----------

@pytest.mark.parametrize("entrypoint", ["trainer.serve", "trainer.serving.serve"])
@pytest.mark.parametrize("pairs, fragment", [
    (["model=run:a", "port=99999"], "invalid port '99999'"),
    (["model=run:a", "port=65536"], "invalid port '65536'"),
    (["model=run:a", "port=0"], "invalid port '0'"),
    (["model=run:a", "port=-5"], "invalid port '-5'"),
    (["model=run:a", "port=٣"], "invalid port"),
    (["model=run:a", "learning_rate=nan"], "unknown setting 'learning_rate'"),
    (["model=run:../x"], "invalid model 'run:../x'"),
    (["model=run:a", "temperature=nan"], "invalid temperature='nan'"),
    (["model=run:a", "host=a b"], "invalid host 'a b'"),
    (["port=8081"], "no model to serve"),
])
def test_a_serve_jobs_train_arg_is_checked_as_the_service_reads_it(capsys, tmp_path, entrypoint, pairs, fragment):
    args = [arg for pair in pairs for arg in ("--train_arg", pair)]
    err = refused(capsys, tmp_path, "--entrypoint", entrypoint, "--config", "smoke", *args)
    assert f"invalid --train_arg for --entrypoint {entrypoint}: " in err and fragment in err, err


def test_a_serve_job_with_good_settings_passes(capsys, tmp_path):
    out = accepted(capsys, tmp_path, "--entrypoint", "trainer.serve", "--config", "smoke", "--train_arg",
                   "model=run:agent_008@30", "--train_arg", "port=8081", "--train_arg", "host=0.0.0.0")
    assert "python -m trainer.serve --config smoke model=run:agent_008@30 port=8081 host=0.0.0.0" in out


@pytest.mark.parametrize("line", ["--export=ALL,HPC_SETUP_ERROR=boom", "--export=ALL,RAY_ADDRESS=x",
                                  "--export=HPC_NOTIFY_PROXY=x", "--export NONE", "--export-file=/tmp/env",
                                  "--export-f=/tmp/env", "--mail-type=END --export=ALL"])
def test_sbatch_export_is_the_launchers(capsys, tmp_path, line):
    err = refused(capsys, tmp_path, f"--sbatch_arg={line}")
    assert "which the launcher manages: give variables with --env NAME=VALUE" in err


@pytest.mark.parametrize("value", ["x\nexport HPC_RUN_DIR=/etc", "x\rHPC_RUN_DIR=/etc", "x\x1b[1Ay", "x\u2028y"])
def test_an_env_value_that_would_fake_a_line_in_the_preview_is_refused(capsys, tmp_path, value):
    err = refused(capsys, tmp_path, "--env", f"NOTE={value}")
    assert "--env: NOTE's value holds the character U+" in err


@pytest.mark.parametrize("pair", ["DB_PASSWD=" + SECRET, "GITHUB_PAT=" + SECRET, "CLIENT_SECRETS=" + SECRET,
                                  "OPENAI_API_KEYS=" + SECRET, f"DATABASE_URL=postgres://u:{SECRET}@h/db"])
def test_a_widened_secret_never_reaches_the_dry_run_or_the_script(capsys, tmp_path, pair):
    out = accepted(capsys, tmp_path, "--env", pair)
    assert SECRET not in out and f"{pair.split('=')[0]}=***" in out.replace("'", "")
