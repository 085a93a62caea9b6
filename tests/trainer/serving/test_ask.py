"""trainer.ask's refusals before it asks anything: a date not exactly YYYY-MM-DD (no service is
reached), a model whose key is not set (one line, exit 1, and no network: litellm's price table is
the bundled one, whatever the caller's environment said)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from trainer.serving.ask import main as ask_main

REPO = Path(__file__).resolve().parents[3]
INBOX = "vince.kaminski@enron.com"
KEYS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY", "LITELLM_LOCAL_MODEL_COST_MAP")


class Listener:
    """A TCP port that counts whoever connects to it and hangs up at once (so that a client that
    should not have come is told no quickly)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.server.accept()[0].close()
                self.connections += 1


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.server.close()


@pytest.mark.parametrize("date", ["2000-13-45", "2000-02-30", "20000328xx", "2000-W13-2", "2000-03-28T10:00",
                                  "\u0662\u0660\u0660\u0660-\u0660\u0663-\u0662\u0668", "2000-3-28", "", "tomorrow"])
def test_a_bad_date_is_refused_before_the_service_is_reached(listener, capsys, date) -> None:
    assert ask_main(["q", "--inbox", INBOX, "--date", date, "--url", listener.url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad --date" in err and "YYYY-MM-DD" in err
    assert listener.connections == 0, "nothing was sent before the date was checked"


@pytest.mark.parametrize("model", ["openai/o3", "gemini/gemini-2.5-pro", "anthropic/claude-3-5-sonnet-20240620"])
def test_a_model_without_its_key_is_one_line_exit_1_and_no_network(listener, art_e_data_dir, model) -> None:
    proxy = listener.url  # anything that goes out comes here
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update({"PYTHONPATH": str(REPO), "DATA_DIR": str(art_e_data_dir), "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy,
                "ALL_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy, "NO_PROXY": ""})
    done = subprocess.run([sys.executable, "-m", "trainer.ask", "When?", "--inbox", INBOX, "--date", "2000-03-28",
                           "--model", model], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "is not set" in done.stderr
    assert done.stdout == ""
    assert listener.connections == 0, "the command reached for the network"


def test_at_best_names_a_checkpoint_which_ask_refuses_in_one_line_without_a_server(capsys) -> None:
    from trainer.serving.policy import parse_policy

    spec = parse_policy("run:agent_008@best")
    assert (spec.kind, spec.name, spec.step, spec.label) == ("checkpoint", "agent_008", "best", "agent_008@best")
    assert ask_main(["q", "--inbox", INBOX, "--date", "2000-03-28", "--model", "run:agent_008@best",
                     "--config", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "agent_008@best: a checkpoint model needs vLLM serving it" in err
