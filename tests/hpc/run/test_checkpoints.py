"""hpc.run.checkpoints: which ART checkpoint a run resumes from (no Slurm, no ART)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from tests.doubles.step_trainer import safetensors_bytes

REPO = Path(__file__).resolve().parents[3]


def save(model: Path, step: int, *, config: str | None = None, weights: bytes | None = None) -> Path:
    folder = ck.step_dir(model, step)
    folder.mkdir(parents=True)
    (folder / ck.ADAPTER_CONFIG).write_text(json.dumps({"r": 8}) if config is None else config)
    (folder / ck.ADAPTER_WEIGHTS).write_bytes(safetensors_bytes(step) if weights is None else weights)
    return folder


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return ck.model_dir(tmp_path / "art", "email_agent", "agent_008")


def test_model_dir_and_step_folders_follow_arts_local_backend_layout(tmp_path):
    model = ck.model_dir(tmp_path, "proj", "m1")
    assert model == tmp_path / "proj" / "models" / "m1"
    assert ck.step_dir(model, 7) == model / "checkpoints" / "0007"  # art.utils.output_dirs: f"{step:04d}"
    assert ck.step_dir(model, 12345).name == "12345"


def test_a_whole_adapter_is_complete(model):
    assert ck.is_complete(save(model, 3))


def test_a_real_safetensors_header_with_padding_and_several_tensors_is_complete(model):
    data = bytes(range(40))
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "F16", "shape": [8], "data_offsets": [24, 40]}, "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    assert ck.is_complete(save(model, 1, weights=struct.pack("<Q", len(raw)) + raw + data))


@pytest.mark.parametrize("damage", [
    "no_config", "config_not_json", "config_a_list", "no_weights", "empty_weights", "truncated_data",
    "truncated_header", "header_length_huge", "header_not_json", "extra_bytes", "bad_offsets",
])
def test_damaged_adapters_are_incomplete(model, damage):
    blob = safetensors_bytes(1)
    (header_len,) = struct.unpack("<Q", blob[:8])
    folder = save(model, 1)
    config, weights = folder / ck.ADAPTER_CONFIG, folder / ck.ADAPTER_WEIGHTS
    if damage == "no_config":
        config.unlink()
    elif damage == "config_not_json":
        config.write_text('{"r": 8')
    elif damage == "config_a_list":
        config.write_text("[1, 2]")
    elif damage == "no_weights":
        weights.unlink()
    elif damage == "empty_weights":
        weights.write_bytes(b"")
    elif damage == "truncated_data":
        weights.write_bytes(blob[:-3])
    elif damage == "truncated_header":
        weights.write_bytes(blob[: 8 + header_len // 2])
    elif damage == "header_length_huge":
        weights.write_bytes(struct.pack("<Q", 2**40) + blob[8:])
    elif damage == "header_not_json":
        weights.write_bytes(blob[:8] + b"x" * header_len + blob[8 + header_len:])
    elif damage == "extra_bytes":
        weights.write_bytes(blob + b"\0")
    elif damage == "bad_offsets":
        bad = json.dumps({"t": {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}}).encode()
        weights.write_bytes(struct.pack("<Q", len(bad)) + bad + b"\0" * 8)
    assert not ck.is_complete(folder)


def test_an_unreadable_adapter_is_incomplete(model, tmp_path):
    folder = save(model, 1)
    (folder / ck.ADAPTER_WEIGHTS).unlink()
    (folder / ck.ADAPTER_WEIGHTS).mkdir()  # a directory where the file should be: open() fails
    assert not ck.is_complete(folder)


def test_list_checkpoints_takes_all_digit_folders_in_step_order_like_art(model):
    for step in (10, 2, 0):
        save(model, step)
    (model / "checkpoints" / "tmp-3").mkdir()
    (model / "checkpoints" / "0005.bak").mkdir()
    (model / "checkpoints" / "0007").write_text("a file, not a folder")
    assert [c.step for c in ck.list_checkpoints(model)] == [0, 2, 10]
    assert ck.list_checkpoints(model / "nowhere") == []


def test_latest_complete_skips_newer_incomplete_folders(model):
    save(model, 0)
    save(model, 1)
    save(model, 2, weights=safetensors_bytes(2)[:-1])
    assert ck.latest_complete(model) == ck.Checkpoint(1, ck.step_dir(model, 1))


def test_latest_complete_is_none_for_a_new_run(model):
    assert ck.latest_complete(model) is None
    save(model, 0, config="")
    assert ck.latest_complete(model) is None


def test_quarantine_moves_only_newer_incomplete_folders_aside_and_deletes_nothing(model, caplog):
    save(model, 1, config="")       # older than the latest complete: harmless, left alone
    save(model, 2)
    save(model, 3, weights=b"\x10")  # killed while saving
    (model / "checkpoints" / "0004").mkdir()  # killed right after mkdir
    moved = ck.quarantine_incomplete(model)
    assert [p.name.split("-")[0] for p in moved] == ["0003", "0004"]
    assert all(p.parent == model / ck.INCOMPLETE and p.is_dir() for p in moved)
    assert (moved[0] / ck.ADAPTER_WEIGHTS).read_bytes() == b"\x10"
    assert [c.step for c in ck.list_checkpoints(model)] == [1, 2]
    assert ck.latest_complete(model).step == 2
    assert "checkpoint step 3 is incomplete" in caplog.text and str(moved[1]) in caplog.text
    assert ck.quarantine_incomplete(model) == []


def test_quarantine_twice_of_the_same_step_keeps_both_copies(model):
    save(model, 1)
    for _ in range(2):
        (model / "checkpoints" / "0002").mkdir()
        ck.quarantine_incomplete(model)
    assert len(list((model / ck.INCOMPLETE).iterdir())) == 2


def test_quarantine_with_no_complete_checkpoint_moves_every_incomplete_one(model):
    save(model, 0, config="{")
    assert len(ck.quarantine_incomplete(model)) == 1
    assert ck.list_checkpoints(model) == []


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpc.run.checkpoints", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_latest_prints_the_step_for_bash_helpers(model):
    save(model, 0)
    save(model, 12)
    save(model, 13, weights=b"")
    result = run_cli("latest", str(model))
    assert result.returncode == 0 and result.stdout == "12\n"
    listed = run_cli("list", str(model)).stdout.splitlines()
    assert [line.split("\t")[:2] for line in listed] == [["0", "complete"], ["12", "complete"], ["13", "incomplete"]]


def test_cli_latest_exits_1_without_a_checkpoint(model):
    result = run_cli("latest", str(model))
    assert result.returncode == 1 and result.stdout == "" and "no complete checkpoint" in result.stderr


def test_cli_quarantine_prints_the_moved_folders(model):
    save(model, 1)
    save(model, 2, config="nope")
    result = run_cli("quarantine", str(model))
    assert result.returncode == 0 and "checkpoints_incomplete/0002-" in result.stdout
    assert "moved" in result.stderr


def test_the_trained_base_model_is_read_from_arts_model_json(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text(json.dumps({"name": "m", "base_model": "/models/made"}))
    assert ck.trained_base_model(tmp_path) == "/models/made"
    (tmp_path / "model.json").write_text("{not json")
    assert ck.trained_base_model(tmp_path) is None
    assert ck.trained_base_model(tmp_path / "missing") is None
