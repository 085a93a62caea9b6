"""trainer.training.startup_phases: where a backend's start-up goes, from the trainer's clock and vLLM's log."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from trainer.training.startup_phases import LogWatch, phases, reported

VLLM_LINES = """\
(APIServer pid=71) INFO 11-28 13:36:01 [utils.py:253] non-default args: {'enforce_eager': True}
(EngineCore_DP0 pid=90) INFO 11-28 13:36:20 [default_loader.py:267] Loading weights took 0.05 seconds
(EngineCore_DP0 pid=90) INFO 11-28 13:36:20 [gpu_model_runner.py:2653] Model loading took 0.0160 GiB and 0.452 seconds
(EngineCore_DP0 pid=90) INFO 11-28 13:36:31 [backends.py:548] Dynamo bytecode transform time: 2.31 s
(EngineCore_DP0 pid=90) INFO 11-28 13:36:40 [monitor.py:34] torch.compile takes 10.5 s in total
(EngineCore_DP0 pid=90) INFO 11-28 13:36:45 [gpu_model_runner.py:3480] Graph capturing finished in 5 secs, took 0.30 GiB
(EngineCore_DP0 pid=90) INFO 11-28 13:36:45 [core.py:210] init engine (profile, create kv cache, warmup model) took 3.41 seconds
(APIServer pid=71) INFO 11-28 13:36:50 [api_server.py:1900] Starting vLLM API server 0 on http://127.0.0.1:8100
"""


def test_vllms_own_durations_are_kept_by_their_shape_with_the_log_prefix_off() -> None:
    found = reported(VLLM_LINES)
    assert [r["seconds"] for r in found] == [0.05, 0.452, 2.31, 10.5, 5.0, 3.41]
    assert found[0]["line"] == "Loading weights took 0.05 seconds"
    assert found[-1]["line"] == "init engine (profile, create kv cache, warmup model) took 3.41 seconds"
    assert reported(VLLM_LINES, limit=2) == found[:2]


def test_the_watch_sees_the_vllm_log_only_once_written_after_registration_began(tmp_path: Path) -> None:
    stale, log = tmp_path / "stale.log", tmp_path / "logs" / "vllm-runtime.log"
    stale.write_text("an earlier start\n")
    os.utime(stale, (time.time() - 60, time.time() - 60))

    async def watch_both() -> tuple[float | None, float | None]:
        since = time.time()
        old, new = LogWatch(stale, since).start(), LogWatch(log, since).start()
        await asyncio.sleep(0.1)
        log.parent.mkdir()
        log.write_text("vLLM starting\n")
        await asyncio.sleep(1.2)
        old.stop(), new.stop()
        return old.seen, new.seen

    old_seen, new_seen = asyncio.run(watch_both())
    assert old_seen is None and new_seen is not None


def test_phases_split_registration_at_the_vllm_logs_start_and_add_up() -> None:
    watch = LogWatch(Path("unused"), 0.0, seen=40.0)
    split = phases(0.0, 2.0, 3.0, 100.0, watch, VLLM_LINES)
    assert {k: v for k, v in split.items() if k != "vllm_reported"} == {
        "construct": 2.0, "model": 1.0, "unsloth": 37.0, "vllm": 60.0}
    assert len(split["vllm_reported"]) == 6
    unseen = phases(0.0, 2.0, 3.0, 100.0, LogWatch(Path("unused"), 0.0), None)
    assert unseen == {"construct": 2.0, "model": 1.0, "register": 97.0}


def test_the_log_is_read_from_its_start_where_the_start_up_is(tmp_path: Path) -> None:
    from trainer.training.startup_phases import read_log

    log = tmp_path / "vllm-runtime.log"
    log.write_text(VLLM_LINES + "request served\n" * 1000)
    assert reported(read_log(log, most=len(VLLM_LINES)) or "") == reported(VLLM_LINES)
    assert read_log(tmp_path / "missing.log") is None
