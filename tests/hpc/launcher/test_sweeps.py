"""Sweep expansion, run names and the sweep record (hpc/launcher/sweeps.py)."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.errors import UsageError
from hpc.launcher import sweeps
from hpc.launcher.jobspec import JOB_NAME_RE


def axes(*flags: str) -> list[sweeps.Axis]:
    return [sweeps.parse_sweep_flag(flag) for flag in flags]


def test_every_combination_is_a_run_with_the_first_axis_slowest():
    members = sweeps.expand("lr_sweep", axes("learning_rate=1e-5,2e-5,4e-5", "seed=1,2"))
    assert [m.overrides for m in members][:3] == [
        ["learning_rate=1e-5", "seed=1"], ["learning_rate=1e-5", "seed=2"], ["learning_rate=2e-5", "seed=1"]]
    assert len(members) == 6


def test_run_names_say_the_values():
    (member,) = sweeps.expand("lr_sweep", axes("learning_rate=2e-5", "seed=1"))
    assert member.name == "lr_sweep.learning_rate=2e-5.seed=1"
    assert member.describe() == "learning_rate=2e-5 seed=1"


def test_a_name_too_long_for_a_run_is_hashed_and_stable():
    flags = ("trajectories_per_group=4,8", "groups_per_step=12", "learning_rate=1.2e-5")
    first, again = sweeps.expand("a_long_sweep_name", axes(*flags)), sweeps.expand("a_long_sweep_name", axes(*flags))
    assert all(len(m.name) <= 64 and m.name.startswith("a_long_sweep_name.") for m in first)
    assert [m.name for m in first] == [m.name for m in again]
    assert len({m.name for m in first}) == 2


def test_a_value_with_characters_a_name_cannot_hold_is_hashed():
    (member,) = sweeps.expand("s", axes("base_model=Qwen/Qwen2.5-7B-Instruct"))
    assert JOB_NAME_RE.fullmatch(member.name) and "/" not in member.name
    assert member.overrides == ["base_model=Qwen/Qwen2.5-7B-Instruct"]


@pytest.mark.parametrize("flag", ["learning_rate", "learning_rate=", "learning_rate=1e-5,,2e-5", "bad key=1",
                                  "=1,2"])
def test_a_malformed_sweep_flag_is_one_line_naming_it(flag):
    with pytest.raises(UsageError, match="invalid --sweep") as error:
        sweeps.parse_sweep_flag(flag)
    assert repr(flag) in str(error.value) and "\n" not in str(error.value)


def test_a_key_swept_twice_or_also_fixed_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        sweeps.check_axes(axes("seed=1", "seed=2"), [])
    with pytest.raises(UsageError, match="also set by --train_arg"):
        sweeps.check_axes(axes("seed=1,2"), ["seed=3"])
    with pytest.raises(UsageError, match="value '1' is given twice"):
        sweeps.check_axes(axes("seed=1,1"), [])


def test_a_sweep_of_more_runs_than_the_limit_is_refused():
    many = ",".join(str(k) for k in range(sweeps.MAX_RUNS + 1))
    with pytest.raises(UsageError, match=f"{sweeps.MAX_RUNS + 1} runs"):
        sweeps.check_axes(axes(f"seed={many}"), [])


def test_a_sweep_file_is_a_mapping_of_keys_to_values(tmp_path: Path):
    path = tmp_path / "sweep.yaml"
    path.write_text("learning_rate: [1.0e-5, 2.0e-5]\nseed: 3\nruler_judge_model: null\nprune_checkpoints: [true]\n")
    found = sweeps.read_sweep_file(path)
    assert [(a.key, a.values) for a in found] == [("learning_rate", ("1e-05", "2e-05")), ("seed", ("3",)),
                                                  ("ruler_judge_model", ("null",)), ("prune_checkpoints", ("true",))]


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "{}\n", "seed: []\n", "'bad key': [1]\n", "seed: [1\n"])
def test_a_bad_sweep_file_is_one_line_naming_it(tmp_path: Path, text):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match="invalid --sweep_file") as error:
        sweeps.read_sweep_file(path)
    assert "\n" not in str(error.value)


def test_the_record_keeps_every_run_the_sweep_has_had():
    old = sweeps.expand("s", axes("seed=1,2"))
    new = sweeps.expand("s", axes("seed=2,3"))
    record = sweeps.record("s", new, old)
    assert [m.name for m in sweeps.members_from_record(record)] == ["s.seed=1", "s.seed=2", "s.seed=3"]
    assert sweeps.members_from_record(record)[0].values == (("seed", "1"),)


keys = st.sampled_from(["learning_rate", "seed", "beta", "trajectories_per_group", "max_turns"])
values = st.text("abcXYZ0189.e+-_/ ", min_size=1, max_size=12).map(str.strip).filter(bool)


@given(st.dictionaries(keys, st.lists(values, min_size=1, max_size=3, unique=True), min_size=1, max_size=3),
       st.sampled_from(["s", "lr_sweep", "x" * 40]))
def test_every_expansion_has_one_valid_unique_name_per_combination(spec, sweep):
    found = [sweeps.Axis(k, tuple(v)) for k, v in spec.items()]
    members = sweeps.expand(sweep, found)
    assert len(members) == sweeps.combinations(found)
    assert len({m.name for m in members}) == len(members)
    assert all(JOB_NAME_RE.fullmatch(m.name) and m.name.startswith(f"{sweep}.") for m in members)
    assert {tuple(m.overrides) for m in members} == {
        tuple(f"{k}={v}" for k, v in zip(spec, combo)) for combo in __import__("itertools").product(*spec.values())}


@pytest.mark.parametrize("text, fragment", [
    ("seed: [1]\nseed: [2]\n", "the key 'seed' is given twice (again at line 2"),
    ("seed: [1]\n'seed': [2]\n", "the key 'seed' is given twice"),
    ("learning_rate: [1e-5]\n\"learning_rate\" : [2e-5]\n", "the key 'learning_rate' is given twice"),
    ("seed: &s [1, 2]\nnum_epochs: *s\n", "an alias (*name)"),
    ("seed: &s 1\nnum_epochs: [*s]\n", "an alias (*name)"),
    ("a: &b {seed: [1]}\n<<: *b\n", "a merge key (<<)"),
    ("x: &x [1, 2, 3]\ny: &y [*x, *x, *x, *x, *x, *x, *x, *x]\nz: [*y, *y, *y, *y, *y, *y, *y, *y]\n", "an alias"),
])
def test_a_sweep_file_with_a_key_twice_or_an_alias_is_refused(tmp_path: Path, text, fragment):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match="invalid --sweep_file") as error:
        sweeps.read_sweep_file(path)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_an_anchor_nobody_refers_to_is_harmless(tmp_path: Path):
    path = tmp_path / "sweep.yaml"
    path.write_text("seed: &s [1, 2]\n")
    assert [(a.key, a.values) for a in sweeps.read_sweep_file(path)] == [("seed", ("1", "2"))]
