"""The fixture corpus: a few hundred synthetic Enron-style emails and their questions
(``emails.jsonl``, ``questions.jsonl``, written by ``make_fixture.py``), in ART-E's row format.
The GPU proof trains on it (a GPU node needs no download) and the CPU tests stage it."""

from pathlib import Path

CORPUS = Path(__file__).resolve().parent
