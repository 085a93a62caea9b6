"""trainer.serving.vllm_server: the `vllm serve` command it builds, its readiness wait and its stop,
against a stand-in vllm (tests/doubles/fake_vllm.py: no GPU or vLLM here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from tests.doubles.art_backend import save_adapter
from tests.doubles.fake_vllm import write_executable
from trainer.serving.vllm_server import (
    ServerError,
    ServerExited,
    ServerSpec,
    VLLMServer,
    command,
    free_port,
    served_models,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    """An executable that runs the stand-in as `vllm` would be run."""
    return write_executable(tmp_path / "bin" / "vllm")


@pytest.fixture
def adapters(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "model"
    for step in (30, 60):
        save_adapter(ck.step_dir(model, step), step)
    return {f"run@{step}": ck.step_dir(model, step) for step in (30, 60)}


def test_the_command_serves_the_base_and_every_adapter_with_qwens_tool_parser(adapters, tmp_path) -> None:
    spec = ServerSpec("Qwen/Qwen2.5-14B-Instruct", adapters, port=8123, max_model_len=16384)
    argv = command(spec, Path("/opt/vllm"))
    assert argv[:3] == ["/opt/vllm", "serve", "Qwen/Qwen2.5-14B-Instruct"]
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--max-model-len") + 1] == "16384"
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--max-lora-rank") + 1] == "8"  # the adapters' r (save_adapter writes r=8)
    assert argv[argv.index("--lora-modules") + 1:] == [f"{n}={p}" for n, p in adapters.items()]
    assert "--enable-lora" not in command(ServerSpec("m"), Path("vllm"))


def test_a_server_is_ready_when_it_lists_every_model_and_stops_on_exit(fake_vllm, adapters, tmp_path) -> None:
    spec = ServerSpec("base-model", adapters, port=free_port())
    env = {**os.environ, "FAKE_VLLM_START_SECONDS": "1", "FAKE_VLLM_ARGV": str(tmp_path / "argv.json")}
    with VLLMServer(spec, tmp_path / "vllm.log", vllm=fake_vllm, env=env) as server:
        assert served_models(server.base_url) == {"base", "run@30", "run@60"}
        pid = server._process.pid
    assert served_models(spec.base_url) == set()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert json.loads((tmp_path / "argv.json").read_text())[0] == "serve"


def test_a_server_that_dies_while_loading_is_one_line_naming_its_log(tmp_path) -> None:
    broken = tmp_path / "vllm"
    broken.write_text("#!/bin/sh\necho 'CUDA out of memory' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ServerError, match=r"vLLM exited with 3 before it was ready; see .*vllm.log"):
        VLLMServer(ServerSpec("m", port=free_port()), tmp_path / "vllm.log", vllm=broken).start()
    assert "CUDA out of memory" in (tmp_path / "vllm.log").read_text()


def test_the_command_line_writes_its_address_passes_its_cap_and_stops_on_term(fake_vllm, tmp_path) -> None:
    address, recorded = tmp_path / "address", tmp_path / "argv.json"
    port = free_port()
    child = subprocess.Popen([sys.executable, "-m", "trainer.serving.vllm_server", "--base_model", "m", "--port", str(port),
                              "--address_file", str(address), "--log", str(tmp_path / "log"), "--max_output_tokens", "64"],
                             cwd=REPO, env={**os.environ, "VLLM_BIN": str(fake_vllm), "FAKE_VLLM_ARGV": str(recorded)})
    try:
        deadline = time.monotonic() + 60
        while not address.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert address.read_text().strip() == f"127.0.0.1:{port}"
        argv = json.loads(recorded.read_text())
        assert argv[argv.index("--override-generation-config") + 1] == '{"max_new_tokens": 64}'
        child.terminate()
        assert child.wait(30) == 0
        assert served_models(f"http://127.0.0.1:{port}/v1") == set()
    finally:
        child.kill()


def test_a_fast_start_server_runs_eager_without_kernel_autotuning(tmp_path) -> None:
    argv = command(ServerSpec("/models/made", fast_start=True), tmp_path / "vllm")
    assert argv[argv.index("--kernel-config") + 1] == '{"enable_flashinfer_autotune": false}'
    assert "--enforce-eager" in argv and "--enforce-eager" not in command(ServerSpec("m"), tmp_path / "vllm")


@pytest.mark.parametrize("fast, given, started_with", [(True, {}, "0"), (True, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, "1"),
                                                      (False, {}, "unset")])
def test_a_fast_start_server_samples_with_vllms_own_sampler_unless_the_user_chose(tmp_path, fast, given,
                                                                                  started_with) -> None:
    """FlashInfer builds its sampling kernels on a machine's first vLLM start (trainer/serving/fast_start.py)."""
    vllm = recording_vllm(tmp_path, "VLLM_USE_FLASHINFER_SAMPLER")
    with pytest.raises(ServerError):
        VLLMServer(ServerSpec("m", port=free_port(), fast_start=fast), tmp_path / "vllm.log", vllm=vllm,
                   env={"PATH": os.environ["PATH"], **given}).start()
    assert (tmp_path / "recorded").read_text().strip() == started_with


def recording_vllm(tmp_path: Path, variable: str = "VLLM_USE_V2_MODEL_RUNNER") -> Path:
    """A `vllm` that writes the value of ``variable`` it was started with to ``recorded``, then fails to start."""
    script = tmp_path / "vllm"
    script.write_text(f"#!/bin/sh\necho \"${{{variable}-unset}}\" > {tmp_path / 'recorded'}\nexit 3\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("given, started_with", [({}, "0"), ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, "1")])
def test_vllm_gets_the_v1_model_runner_unless_the_user_chose(tmp_path, given, started_with) -> None:
    """ART's runtime patch fails on vLLM 0.25.1's V2 runner (a judge served with it died on an H200)."""
    with pytest.raises(ServerError):
        VLLMServer(ServerSpec("m", port=free_port()), tmp_path / "vllm.log", vllm=recording_vllm(tmp_path),
                   env={"PATH": os.environ["PATH"], **given}).start()
    assert (tmp_path / "recorded").read_text().strip() == started_with


def test_a_capped_server_limits_every_reply_through_vllms_generation_override(tmp_path) -> None:
    argv = command(ServerSpec("Qwen/Qwen2.5-32B-Instruct", max_output_tokens=1024), tmp_path / "vllm")
    assert argv[argv.index("--override-generation-config") + 1] == '{"max_new_tokens": 1024}'
    assert "--override-generation-config" not in command(ServerSpec("m"), tmp_path / "vllm")



HEALTH_ONLY = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_command_of_its_own_is_ready_once_its_health_answers_and_is_stopped_with_its_group(tmp_path) -> None:
    """ART's runtime as the GPU proof starts it: its own command line, ready when /health answers."""
    spec = ServerSpec("m", port=free_port())
    with VLLMServer(spec, tmp_path / "runtime.log", argv=[sys.executable, "-c", HEALTH_ONLY, str(spec.port)]) as server:
        assert server.ready() and served_models(server.base_url) == set()  # it lists no models: health is enough
        pid = server._process.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_command_that_exits_before_it_answers_is_told_apart_from_one_that_never_answers(tmp_path) -> None:
    spec = ServerSpec("m", port=free_port())
    with pytest.raises(ServerExited, match="exited with 4 before it was ready"):
        VLLMServer(spec, tmp_path / "a.log", argv=[sys.executable, "-c", "raise SystemExit(4)"]).start()
    silent = VLLMServer(spec, tmp_path / "b.log", ready_timeout=1, argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(ServerError, match="did not answer within 1s") as never:
        silent.start()
    assert not isinstance(never.value, ServerExited) and not silent.running()
