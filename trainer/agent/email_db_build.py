"""Building the Enron email database (``python -m trainer.data prepare``): rows filtered,
deduplicated and ordered, the full-text index made on a second thread, the file renamed into
place when complete. The schema and its reading are trainer/agent/email_db.py's.

How: the main thread loads rows into ``emails``/``recipients`` (one
transaction per chunk, WAL) while a second thread indexes each committed chunk
into a side file with one ``INSERT ... SELECT`` (SQLite runs it without the
GIL, so the two threads use two cores; FTS5 writes each chunk as one segment).
The main thread then builds the secondary indexes, copies the side file's index
in, and the file is renamed into place only when complete.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date as Date
from datetime import datetime
from pathlib import Path
from typing import Any

from trainer.agent.email_db import (
    _LAST_SECOND,
    _RCPT_TOKENS,
    _SENDER_TOKEN,
    CONTENT_VIEW,
    FTS_TABLE,
    INDEXES,
    MAX_BODY_CHARS,
    MAX_RECIPIENTS,
    SLOT_BITS,
    TABLES,
    date_second,
)

# Rows per load transaction, and per full-text segment. A search looks each term
# up in every segment, so bigger segments search faster; but FTS5 holds a
# segment's pending data in memory, and a bigger hash indexes measurably slower.
# 32k rows (~15 segments at Enron scale) built fastest, and searched in ~1 ms.
_CHUNK_ROWS = 32_768
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

# A segment of the index: the rows' order keys, sorted by being the rowid of a
# temporary table, then the rows themselves fetched in that order (sorting the
# rows would sort their bodies too).
_SEGMENT_KEYS = """
CREATE TEMP TABLE segment_keys (pos INTEGER PRIMARY KEY, id INTEGER NOT NULL)
"""
_FILL_SEGMENT_KEYS = "INSERT INTO segment_keys SELECT pos, id FROM src.emails WHERE id BETWEEN ? AND ?"
_INDEX_SEGMENT = f"""
INSERT INTO emails_fts (rowid, subject, body, sender, rcpt)
    SELECT k.pos, e.subject, e.body, {_SENDER_TOKEN}, {_RCPT_TOKENS.format(schema='src.')}
    FROM segment_keys k CROSS JOIN src.emails e ON e.id = k.id ORDER BY k.pos
"""
_FTS_SHADOW_TABLES = ("emails_fts_data", "emails_fts_idx")  # _config keeps the defaults of a fresh table

# 8 KiB pages: the build is ~8% faster and the file smaller than with 4 KiB, and
# searches are as fast (FTS5 keeps its own ~4 KB leaves: bigger ones slowed them).
_PAGE_SIZE = "PRAGMA page_size = 8192"  # first: it applies only to a new, empty file
_MAIN_BUILD_PRAGMAS = (
    _PAGE_SIZE,
    "PRAGMA journal_mode = WAL",       # the full-text thread reads committed chunks while rows keep coming
    "PRAGMA synchronous = OFF",        # a failed build is deleted, never recovered
    "PRAGMA cache_size = -262144",     # 256 MiB
    "PRAGMA wal_autocheckpoint = 10000",
    # No helper threads for CREATE INDEX: the full-text thread is the longer one,
    # and a helper would take its core.
    "PRAGMA threads = 0",
)
_SIDE_BUILD_PRAGMAS = (
    _PAGE_SIZE,
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA cache_size = -65536",
    "PRAGMA temp_store = MEMORY",      # segment_keys: one chunk's (pos, id) pairs
)
# One segment per chunk (the hash never fills first), no merging while building.
_FTS_BUILD_CONFIG = (("hashsize", 512 * 1024 * 1024), ("automerge", 0))


@dataclass(frozen=True)
class BuildReport:
    path: Path
    inserted: int
    skipped_long: int
    skipped_recipients: int
    skipped_duplicates: int
    seconds: float
    rebuilt: bool


# ---------------------------------------------------------------------------
# Building: rows


@dataclass
class _Counts:
    inserted: int = 0
    skipped_long: int = 0
    skipped_recipients: int = 0
    skipped_duplicates: int = 0


def _addresses(value: Any) -> list[str]:
    """A to/cc/bcc field as a list of non-empty strings (ART-E drops empty ones)."""
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    return [a if isinstance(a, str) else str(a) for a in value if a]


def normalize_date(value: Any, message_id: Any = None) -> str:
    """The dataset's date (a datetime, or ISO text) as 'YYYY-MM-DD HH:MM:SS', its wall-clock time."""
    if isinstance(value, str):
        if _DATE_TIME.fullmatch(value):
            return value
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"email {message_id!r}: date {value!r} is not ISO 8601 "
                             "(accepted: a datetime or text like '2001-05-23 14:03:00')") from None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.replace(tzinfo=None)
        return value.isoformat(" ", "seconds")
    if isinstance(value, Date):
        return f"{value.isoformat()} 00:00:00"
    raise ValueError(f"email {message_id!r}: date {value!r} is not a datetime or ISO 8601 text")


def _dedupe_key(subject: Any, body: Any, sender: Any) -> bytes:
    """A 128-bit digest of ART-E's duplicate key (subject, body, from).

    ART-E kept the tuples themselves, i.e. every body a second time in memory;
    the digest keeps the build's memory flat. Each part is length-prefixed, and
    None differs from '', so no two keys share an encoding."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (subject, sender, body):
        if part is None:
            digest.update(b"\xff")
        else:
            data = str(part).encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.digest()


class _Loader:
    """Filters, dedupes and orders source rows; writes them a chunk (one transaction) at a time."""

    def __init__(self, conn: sqlite3.Connection, on_chunk: Any) -> None:
        self.conn = conn
        self.on_chunk = on_chunk  # called with (first id, last id) of each committed chunk
        self.counts = _Counts()
        self._seen_content: set[bytes] = set()
        self._seen_ids: set[str] = set()
        self._slots: dict[int, int] = {}  # emails so far per date (to the second)
        self._days: dict[str, int] = {}  # 'YYYY-MM-DD' -> seconds at its midnight
        self._emails: list[tuple] = []
        self._recipients: list[tuple] = []

    def add(self, row: Mapping[str, Any]) -> None:
        body = row.get("body")
        if body is not None and len(body) > MAX_BODY_CHARS:
            self.counts.skipped_long += 1
            return
        to, cc, bcc = _addresses(row.get("to")), _addresses(row.get("cc")), _addresses(row.get("bcc"))
        if len(to) + len(cc) + len(bcc) > MAX_RECIPIENTS:
            self.counts.skipped_recipients += 1
            return
        message_id = row.get("message_id")
        if not isinstance(message_id, str) or not message_id:
            raise ValueError(f"every email needs a message_id, got {message_id!r}")
        subject, sender = row.get("subject"), row.get("from")
        key = _dedupe_key(subject, body, sender)
        if key in self._seen_content or message_id in self._seen_ids:
            self.counts.skipped_duplicates += 1
            return
        self._seen_content.add(key)
        self._seen_ids.add(message_id)
        self._append(message_id, normalize_date(row.get("date"), message_id), sender, subject,
                     row.get("file_name"), body, (("to", to), ("cc", cc), ("bcc", bcc)))

    def _append(self, message_id: str, date: str, sender: Any, subject: Any, file_name: Any, body: Any,
                recipients: tuple[tuple[str, list[str]], ...]) -> None:
        second = self._second(date)
        slot = self._slots.get(second, 0)
        if slot >> SLOT_BITS:
            raise ValueError(f"more than {1 << SLOT_BITS} emails dated {date}; the database tells apart at most "
                             f"{1 << SLOT_BITS} per second")
        self._slots[second] = slot + 1
        self.counts.inserted += 1
        email_id = self.counts.inserted
        pos = ((_LAST_SECOND - second) << SLOT_BITS) | slot  # order_key(date, slot)
        self._emails.append((email_id, pos, message_id, date, sender, subject, file_name, body))
        seq = 0
        for kind, addresses in recipients:
            for address in addresses:
                self._recipients.append((email_id, seq, address, kind))
                seq += 1
        if len(self._emails) >= _CHUNK_ROWS:
            self.flush()

    def _second(self, date: str) -> int:
        """date_second, with the day's part cached (a corpus has a few thousand distinct days)."""
        midnight = self._days.get(date[:10])
        if midnight is None:
            midnight = self._days[date[:10]] = date_second(date[:10] + " 00:00:00")
        return midnight + int(date[11:13]) * 3600 + int(date[14:16]) * 60 + int(date[17:19])

    def flush(self) -> None:
        if not self._emails:
            return
        first, last = self._emails[0][0], self._emails[-1][0]
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO emails VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self._emails)
        self.conn.executemany("INSERT INTO recipients VALUES (?, ?, ?, ?)", self._recipients)
        self.conn.execute("COMMIT")
        self._emails, self._recipients = [], []
        self.on_chunk(first, last)


# ---------------------------------------------------------------------------
# Building: the full-text index, in a second thread


class _FullTextBuilder:
    """Indexes committed chunks of the main file into a side file, on its own thread.

    Each chunk is one INSERT ... SELECT in rowid order, so SQLite runs it
    without the GIL and FTS5 writes it as one segment."""

    def __init__(self, side: Path, main: Path) -> None:
        self.side, self.main = side, main
        self._chunks: queue.Queue[tuple[int, int] | None] = queue.Queue()
        self._conn: sqlite3.Connection | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="full-text index", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        self._raise_if_failed()

    def submit(self, first_id: int, last_id: int) -> None:
        self._raise_if_failed()
        self._chunks.put((first_id, last_id))

    def finish(self) -> None:
        """Wait for every submitted chunk to be indexed."""
        self._chunks.put(None)
        self._thread.join()
        self._raise_if_failed()

    def abort(self) -> None:
        """Stop early (the build failed): interrupt the running statement, wait for the thread."""
        self._chunks.put(None)
        conn = self._conn
        if conn is not None:
            conn.interrupt()
        if self._thread.ident is not None:  # started
            self._thread.join()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"building the full-text index failed: {self._error}") from self._error

    def _run(self) -> None:
        try:
            self._conn = conn = sqlite3.connect(self.side, isolation_level=None, check_same_thread=False)
            for pragma in _SIDE_BUILD_PRAGMAS:
                conn.execute(pragma)
            conn.execute(FTS_TABLE)
            for key, value in _FTS_BUILD_CONFIG:
                conn.execute("INSERT INTO emails_fts (emails_fts, rank) VALUES (?, ?)", (key, value))
            conn.execute("ATTACH DATABASE ? AS src", (self.main.resolve().as_uri() + "?mode=ro",))
            conn.execute(_SEGMENT_KEYS)
            self._ready.set()
            while (chunk := self._chunks.get()) is not None:
                conn.execute(_FILL_SEGMENT_KEYS, chunk)
                conn.execute(_INDEX_SEGMENT)
                conn.execute("DELETE FROM segment_keys")
            conn.execute("DETACH DATABASE src")
        except BaseException as error:  # noqa: BLE001 - reported to the loading thread
            self._error = error
        finally:
            self._ready.set()
            if self._conn is not None:
                self._conn.close()


# ---------------------------------------------------------------------------
# Building: the whole file


def build_database(
    emails: Iterable[Mapping[str, Any]],
    db_path: Path,
    *,
    force: bool = False,
    show_progress: bool = True,
    total: int | None = None,
) -> BuildReport:
    """Build the database at ``db_path`` from rows with the ``corbt/enron-emails`` schema.

    Rows: message_id, subject, from, to, cc, bcc (lists), date (datetime or ISO
    text), body, file_name. ART-E's filters apply: bodies over 5000 characters,
    more than 30 recipients, and repeats of (subject, body, from) are skipped
    (so is a repeated message_id). The file is built under a temporary name next
    to ``db_path`` and renamed when complete, so no reader ever sees half a
    database. An existing database is kept (``rebuilt=False``; ``emails`` is not
    read) unless ``force``."""
    db_path = Path(db_path)
    start = time.perf_counter()
    if db_path.exists() and not force:
        return BuildReport(db_path, 0, 0, 0, 0, time.perf_counter() - start, rebuilt=False)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(temporary_file(db_path, ".building"))
    side = tmp.with_name(tmp.name + "-fts")
    try:
        counts = _build_into(tmp, side, emails, show_progress, total)
        os.replace(tmp, db_path)
    finally:
        for leftover in (tmp, side, *(tmp.with_name(tmp.name + s) for s in ("-wal", "-shm", "-journal"))):
            leftover.unlink(missing_ok=True)
    return BuildReport(db_path, counts.inserted, counts.skipped_long, counts.skipped_recipients,
                       counts.skipped_duplicates, time.perf_counter() - start, rebuilt=True)


def temporary_file(target: Path, suffix: str) -> str:
    """A new empty file next to ``target``, with the permissions a plain open() would give.

    (mkstemp makes it 0600; the data directory is often shared with a group.)"""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    os.close(fd)
    return name


def _build_into(path: Path, side: Path, emails: Iterable[Mapping[str, Any]], show: bool,
                total: int | None) -> _Counts:
    conn = sqlite3.connect(path, isolation_level=None)
    full_text = _FullTextBuilder(side, path)
    try:
        for pragma in _MAIN_BUILD_PRAGMAS:
            conn.execute(pragma)
        conn.executescript(TABLES)
        full_text.start()
        loader = _Loader(conn, full_text.submit)
        for row in _progress(emails, show, total):
            loader.add(row)
        loader.flush()
        with _Steps(show) as steps:
            steps.run("indexes", lambda: conn.executescript(INDEXES))  # while the other thread indexes text
            steps.run("full-text index", full_text.finish)
            steps.run("assembling", lambda: _adopt_full_text(conn, side))
            steps.run("statistics", lambda: conn.executescript("PRAGMA analysis_limit = 1000; ANALYZE;"))
        return loader.counts
    except BaseException:
        full_text.abort()
        raise
    finally:
        conn.close()


def _adopt_full_text(conn: sqlite3.Connection, side: Path) -> None:
    """Leave WAL, then move the side file's full-text index into the database.

    The index is FTS5's own shadow tables; copied between two tables declared
    alike, it is the same index."""
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute(CONTENT_VIEW)
    conn.execute(FTS_TABLE)
    conn.execute("ATTACH DATABASE ? AS side", (str(side),))
    conn.execute("BEGIN")
    for table in _FTS_SHADOW_TABLES:
        conn.execute(f"DELETE FROM main.{table}")
        conn.execute(f"INSERT INTO main.{table} SELECT * FROM side.{table}")
    conn.execute("COMMIT")
    conn.execute("DETACH DATABASE side")


def _progress(rows: Iterable[Mapping[str, Any]], show: bool, total: int | None) -> Iterable[Mapping[str, Any]]:
    if not show:
        return rows
    from tqdm import tqdm  # light, but only a build needs it

    if total is None and hasattr(rows, "__len__"):
        total = len(rows)  # type: ignore[arg-type]
    return tqdm(rows, total=total, desc="emails", unit=" rows", unit_scale=True, mininterval=0.5)


class _Steps:
    """The build's last steps, shown as a small progress bar when asked."""

    def __init__(self, show: bool) -> None:
        self.bar = None
        if show:
            from tqdm import tqdm  # light, but only a build shows a bar

            self.bar = tqdm(total=4, desc="finishing", unit=" steps", bar_format="{desc} {n}/{total}{postfix}")

    def __enter__(self) -> _Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def run(self, name: str, step: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(name)
        step()
        if self.bar is not None:
            self.bar.update(1)
