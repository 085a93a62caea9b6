"""trainer.serve's settings, read the same way by the service and by the launcher."""

from __future__ import annotations

import pytest

from trainer.serving.settings import ServeError, check_settings, port_value, setting_pairs, settings_from


@pytest.mark.parametrize("port", ["99999", "65536", "0", "-5", "+80", "", " ", "80.0", "0x50", "\u0663", "８０", "1_000",
                                  "8080 ", "1e3"])
def test_a_port_outside_1_to_65535_or_not_in_digits_is_refused(port: str) -> None:
    with pytest.raises(ServeError, match=r"invalid port .*: expected a whole number from 1 to 65535"):
        port_value(port)


@pytest.mark.parametrize("port", ["1", "80", "8080", "65535"])
def test_a_port_in_range_is_read(port: str) -> None:
    assert port_value(port) == int(port)


def test_the_flags_come_before_the_pairs_and_are_checked_the_same() -> None:
    assert settings_from({"port": "9000", "host": "0.0.0.0"}, None, "9001").port == 9001
    assert settings_from({"port": "9000"}, "::1", None).host == "::1"
    with pytest.raises(ServeError, match="invalid port '0'"):
        settings_from({}, None, "0")


@pytest.mark.parametrize("host", ["", "a b", "-oProxy", "x\ny", "h\x1b[2J"])
def test_a_host_that_is_no_address_is_refused(host: str) -> None:
    with pytest.raises(ServeError, match="invalid host"):
        settings_from({}, host, None)


@pytest.mark.parametrize("pairs, fragment", [
    (["learning_rate=nan"], "unknown setting 'learning_rate'"),
    (["port"], "unknown setting 'port'"),
    (["port=1", "port=2"], "setting 'port' given twice"),
    (["temperature=nan"], "invalid temperature='nan'"),
    (["temperature=\u0661"], "invalid temperature"),
    (["max_queue=0"], "invalid max_queue='0'"),
    (["head_timeout=\u0663"], "invalid head_timeout"),
])
def test_bad_pairs_are_refused_naming_the_key(pairs: list[str], fragment: str) -> None:
    with pytest.raises(ServeError, match=fragment):
        settings_from(setting_pairs(pairs))


@pytest.mark.parametrize("pairs, fragment", [
    (["model=run:a", "port=99999"], "invalid port '99999'"),
    (["model=run:a", "learning_rate=nan"], "unknown setting 'learning_rate'"),
    (["model=run:../x"], "invalid model 'run:../x'"),
    (["model=run:"], "invalid model"),
    (["model=url:ftp://x#m"], "invalid model"),
    (["port=8081"], "no model to serve"),
    (["model=run:a", "project=x"], "unknown setting 'project'"),
])
def test_the_launchers_check_refuses_what_the_service_would(pairs: list[str], fragment: str) -> None:
    with pytest.raises(ServeError, match=fragment):
        check_settings(pairs, "Qwen/Qwen2.5-14B-Instruct")


def test_the_launchers_check_passes_what_the_service_takes() -> None:
    check_settings(["model=run:agent_008@30", "host=0.0.0.0", "port=8081", "max_in_flight=4", "temperature=0.7"],
                   "Qwen/Qwen2.5-14B-Instruct")
