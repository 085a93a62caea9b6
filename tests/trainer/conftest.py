"""Trainer fixtures: the ART-E data staged from the shipped fixture corpus.

``art_e_data_dir`` runs the real staging path (``trainer.staging.data.prepare`` on the
local JSONL files in trainer/proof/corpus/) once per session, so every test
that needs an email database or scenarios gets the files production would
write. Regenerate the corpus with trainer/proof/corpus/make_fixture.py.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.agent.email_db import EmailDB
from trainer.agent.scenarios import Scenario, load_scenarios
from trainer.proof.corpus import CORPUS
from trainer.staging.data import prepare

FIXTURE_DIR = CORPUS
FIXTURE_EMAILS = FIXTURE_DIR / "emails.jsonl"
FIXTURE_QUESTIONS = FIXTURE_DIR / "questions.jsonl"


def fixture_rows(path: Path = FIXTURE_EMAILS) -> list[dict[str, Any]]:
    """The rows of a fixture JSONL file, as the source gives them."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def heap_unfrozen() -> Iterator[None]:
    """trainer.train freezes its heap after its first step (``gc.freeze``); a test that runs it in
    pytest's process gives the frozen objects back to the garbage collector when it ends."""
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def art_e_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir staged by ``prepare`` from the fixture corpus: enron_emails.db and scenarios/{train,test}.jsonl."""
    data_dir = tmp_path_factory.mktemp("art_e_data")
    prepare(data_dir, str(FIXTURE_EMAILS), str(FIXTURE_QUESTIONS), show_progress=False)
    return data_dir


@pytest.fixture
def email_db(art_e_data_dir: Path) -> Iterator[EmailDB]:
    """An open EmailDB on the staged fixture database (closed after the test)."""
    db = EmailDB(art_e_data_dir / "enron_emails.db")
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def scenarios(art_e_data_dir: Path) -> list[Scenario]:
    """The train split as training loads it: known-bad ids out, single-email answers, shuffled with seed 42."""
    return load_scenarios(art_e_data_dir, "train")


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def backend_python() -> Path:
    python = Path(os.environ.get("HPC_BACKEND_PYTHON") or REPO / ".venv-backend" / "bin" / "python")
    if not python.exists():
        message = (f"the real ART backend is not installed ({python} missing): "
                   "VENV=.venv-backend bash setup.sh --backend --no-runtime")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python
