import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.errors import UsageError
from hpc.launcher.envfiles import (
    REDACTED,
    EnvLayer,
    merge_layers,
    parse_env_flags,
    read_dotenv,
    redact_argv,
    resolve_one,
)
from hpc.secret_names import is_secret_name


def layer(source, **values):
    return EnvLayer(source, values)


def test_later_layers_win_in_the_documented_order(tmp_path):
    common = tmp_path / "common.env"
    cluster = tmp_path / "cluster.env"
    user = tmp_path / ".env"
    common.write_text("A=common\nB=common\nC=common\nD=common\n")
    cluster.write_text("B=cluster\nC=cluster\nD=cluster\n")
    user.write_text("C=user\nD=user\n")
    layers = [read_dotenv(common), read_dotenv(cluster), read_dotenv(user), parse_env_flags(["D=flag"])]
    merged = merge_layers(layers, {})
    assert merged.values == {"A": "common", "B": "cluster", "C": "user", "D": "flag"}
    assert merged.sources["B"] == str(cluster) and merged.sources["D"] == "--env"


def test_missing_dotenv_file_is_an_empty_layer(tmp_path):
    assert read_dotenv(tmp_path / "absent.env").values == {}


def test_values_refer_to_other_layers_and_the_outer_environment():
    layers = [layer("common", ART_PATH="${SCRATCH}/art", LOGS="${ART_PATH}/logs"), layer("user", SCRATCH="/scratch/me")]
    merged = merge_layers(layers, {"SCRATCH": "/ignored"})
    assert merged.values["ART_PATH"] == "/scratch/me/art"
    assert merged.values["LOGS"] == "/scratch/me/art/logs"
    merged = merge_layers([layer("common", ART_PATH="${SCRATCH}/art")], {"SCRATCH": "/outer"})
    assert merged.values["ART_PATH"] == "/outer/art"


def test_default_and_self_reference_read_the_outer_environment():
    merged = merge_layers([layer("c", ACCOUNT="${ACCOUNT:-}", X="${NOPE:-fallback}")], {"ACCOUNT": "abc"})
    assert merged.values == {"ACCOUNT": "abc", "X": "fallback"}


def test_outer_variables_are_not_copied_into_the_job():
    merged = merge_layers([layer("c", A="1")], {"HOME": "/root"})
    assert "HOME" not in merged.values


def test_undefined_reference_names_the_variable_and_its_file():
    with pytest.raises(UsageError, match=r"dotenv/x.env: ART_PATH refers to \$\{SCRATCH\}"):
        merge_layers([layer("dotenv/x.env", ART_PATH="${SCRATCH}/art")], {})


def test_circular_reference_is_reported():
    with pytest.raises(UsageError, match="circular reference"):
        merge_layers([layer("c", A="${B}", B="${A}")], {})


def test_bare_dollar_is_literal():
    assert merge_layers([layer("c", PASSWORD="pa$$word$x")], {}).values["PASSWORD"] == "pa$$word$x"


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HF_TOKEN", "CLIENT_SECRET", "DB_PASSWORD", "password_file", "wandb_api_key",
                                  "HPC_WEBHOOK_URL", "slack_webhook"])
def test_secret_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["KEYBOARD", "TOKENIZERS_PARALLELISM", "SECRETARY", "ART_PATH"])
def test_ordinary_names_are_not_secrets(name):
    assert not is_secret_name(name)


def test_secrets_are_redacted_and_kept_out_of_public_values():
    merged = merge_layers([layer("c", GEMINI_API_KEY="g-123", JUDGE_MODEL="m")], {})
    assert merged.redacted() == {"GEMINI_API_KEY": REDACTED, "JUDGE_MODEL": "m"}
    assert merged.public() == {"JUDGE_MODEL": "m"}
    assert merged.secret_values() == {"GEMINI_API_KEY": "g-123"}


def test_a_webhook_url_lives_only_in_the_secrets_its_token_is_in_it():
    merged = merge_layers([layer(".env", HPC_WEBHOOK_URL="https://hooks.example/T0/B0/tok3n")], {})
    assert merged.public() == {} and merged.redacted() == {"HPC_WEBHOOK_URL": REDACTED}
    assert merged.secret_values() == {"HPC_WEBHOOK_URL": "https://hooks.example/T0/B0/tok3n"}


def test_a_value_built_from_a_secret_is_itself_secret():
    merged = merge_layers([layer("c", API_KEY="k-1", URL="https://u:${API_KEY}@host")], {})
    assert "URL" in merged.secrets
    assert "k-1" not in str(merged.public()) and "k-1" not in str(merged.redacted())


@pytest.mark.parametrize("flag", ["NOVALUE", "=x", "1A=x", "A-B=x", "A B=x"])
def test_malformed_env_flag_is_one_usage_error(flag):
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_env_flags([flag])


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"),
                                      blacklist_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                                                           "\u2066\u2067\u2068\u2069")).filter(lambda s: "${" not in s))
def test_env_flag_values_pass_through_unchanged(value):
    merged = merge_layers([parse_env_flags([f"VALUE={value}"])], {})
    assert merged.values["VALUE"] == value


@pytest.mark.parametrize("name", ["DB_PASSWD", "GITHUB_PAT", "CLIENT_SECRETS", "OPENAI_API_KEYS", "SMTP_PASS",
                                  "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "SENTRY_DSN",
                                  "awsSecretKey", "SESSION_COOKIE", "MY_APIKEY", "GH_AUTH_TOKEN"])
def test_widened_secret_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["MAX_NEW_TOKENS", "JUDGE_SERVE_MAX_OUTPUT_TOKENS", "PATH", "PYTHONPATH", "COMPASS",
                                  "PASSAGE", "BUDGET_ACCOUNTS", "HPC_PUBLIC_VARS"])
def test_counts_and_paths_are_still_not_secrets(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("value", ["postgres://u:pw@h/db", "redis://:hunter2@cache:6379", "https://me:p/w@git.example/x",
                                   "mysql+pymysql://root:r00t@db/app?x=1", "x http://a:b@c y"])
def test_a_url_with_a_password_is_secret_whatever_its_name(value):
    merged = merge_layers([parse_env_flags([f"DATABASE_URL={value}", "PLAIN=ok"])], {})
    assert merged.secrets == {"DATABASE_URL"} and merged.public() == {"PLAIN": "ok"}
    assert value not in str(merged.redacted())


def test_a_url_with_a_password_from_the_environment_makes_its_user_secret():
    merged = merge_layers([parse_env_flags(["MIRROR=${PROXY}/pkgs"])], {"PROXY": "http://u:pw@proxy:3128"})
    assert merged.secrets == {"MIRROR"}


def test_hpc_public_vars_declares_a_name_not_secret_but_not_a_url_password():
    merged = merge_layers([parse_env_flags(["SSH_KEY_PATH=/home/me/.ssh/id", "GIT_PAT_DIR=/x",
                                            "HPC_PUBLIC_VARS=SSH_KEY_PATH, GIT_PAT_DIR DB_URL",
                                            "DB_URL=postgres://u:pw@h/db"])], {})
    assert merged.secrets == {"DB_URL"}
    assert merged.public()["SSH_KEY_PATH"] == "/home/me/.ssh/id"


def test_redact_argv_hides_a_widened_secret_and_a_url_password():
    argv = ["--env", "GITHUB_PAT=ghp_abc123", "--env=DB=postgres://u:pw@h/db", "--env", "A=1"]
    merged = merge_layers([parse_env_flags(["GITHUB_PAT=ghp_abc123", "DB=postgres://u:pw@h/db", "A=1"])], {})
    shown = " ".join(redact_argv(argv, merged))
    assert "ghp_abc123" not in shown and "pw@" not in shown and "A=1" in shown


@pytest.mark.parametrize("value", ["${A:-${GEMINI_API_KEY}}", "/x/${A:-a${GEMINI_API_KEY}b}", "${A-${GEMINI_API_KEY}}",
                                   "${A:=x}", "${A:?unset}", "${A-x}", "${#GEMINI_API_KEY}", "${A:+x}", "${GEMINI_API_KEY",
                                   "${!A}", "${A%/x}"])
def test_a_reference_the_launcher_would_misread_is_refused_without_its_value(value):
    with pytest.raises(UsageError, match=r"RUNS_DIR holds a \$\{\.\.\.\} reference the launcher does not read") as error:
        merge_layers([parse_env_flags([f"RUNS_DIR={value}"])], {"GEMINI_API_KEY": "g-secret-1"})
    assert "g-secret-1" not in str(error.value) and value not in str(error.value)


def test_resolving_runs_dir_alone_refuses_a_nested_default_too():
    with pytest.raises(UsageError, match="does not read"):
        resolve_one([parse_env_flags(["RUNS_DIR=${A:-${GEMINI_API_KEY}}"])], {"GEMINI_API_KEY": "g"}, "RUNS_DIR")


def test_plain_defaults_and_literal_dollars_still_read():
    merged = merge_layers([parse_env_flags(["A=${NOPE:-/x/$y}", "B=${1}", "C=cost $5 {x}"])], {})
    assert merged.values == {"A": "/x/$y", "B": "${1}", "C": "cost $5 {x}"}


@pytest.mark.parametrize("value", ["x\nexport HPC_RUN_DIR=/etc", "x\rHPC_RUN_DIR=/etc", "a\x1b[2Jb", "a\u2028b",
                                   "a\x85b", "a\u202eb", "a\x00b", "a\vb"])
def test_a_printed_value_with_a_line_break_or_control_character_is_refused(value):
    with pytest.raises(UsageError, match=r"A's value holds the character U\+"):
        merge_layers([parse_env_flags([f"A={value}"])], {})


def test_a_secret_may_span_lines_it_is_never_printed():
    merged = merge_layers([parse_env_flags(["TLS_PRIVATE_KEY=-----BEGIN\nabc\n-----END"])], {})
    assert merged.redacted() == {"TLS_PRIVATE_KEY": REDACTED}


def test_a_dotenv_value_with_a_line_break_is_refused_too(tmp_path):
    path = tmp_path / ".env"
    path.write_text('NOTE="one\nHPC_RUN_DIR=/etc"\n')
    with pytest.raises(UsageError, match="NOTE's value holds the character U\\+000A"):
        merge_layers([read_dotenv(path)], {})


@pytest.mark.parametrize("line", ["canary-gem-7731", "sk-live-0123456789abcdef", "sk live 0123", "canarygem7731",
                                  "=canary-gem-7731", "export canary-gem", "'canary-gem-7731'", "canary-gem=1"])
def test_a_dotenv_line_that_is_no_assignment_is_refused_by_number_without_its_text(tmp_path, line):
    path = tmp_path / ".env"
    path.write_text(f"A=1\n{line}\nB=2\n")
    with pytest.raises(UsageError, match=r"\.env: line 2 is not NAME=VALUE") as error:
        read_dotenv(path)
    assert "canary" not in str(error.value) and "sk" not in str(error.value).replace("secret", "")


_LINE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="=\n\r\x00"), min_size=1)


@given(secret=_LINE_TEXT.filter(lambda s: s.strip() and not s.lstrip().startswith("#") and len(s.strip()) >= 4))
def test_fuzz_dotenv_lines_without_equals_never_reach_a_message(tmp_path_factory, secret):
    path = tmp_path_factory.mktemp("env") / ".env"
    path.write_text(f"A=1\n{secret}\n", encoding="utf-8")
    try:
        layer = read_dotenv(path)
    except UsageError as error:
        assert secret.strip() not in str(error)
    else:
        assert secret.strip() not in "".join(layer.values) + "".join(layer.values.values())
