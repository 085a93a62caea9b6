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


@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))).filter(lambda s: "${" not in s))
def test_env_flag_values_pass_through_unchanged(value):
    merged = merge_layers([parse_env_flags([f"VALUE={value}"])], {})
    assert merged.values["VALUE"] == value
