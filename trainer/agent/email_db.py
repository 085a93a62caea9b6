"""The Enron email database the agent searches: schema, fast build, search, read.

One SQLite file, built once by ``python -m trainer.data prepare``, then only
read, by many rollouts at once and often from a shared filesystem.

Layout, and why:

* ``emails`` holds one row per kept email, in the order the source gave them
  (``id``); ``recipients`` holds the to/cc/bcc addresses keyed by that row id,
  clustered on it so an email's recipients are one range scan.
* ``emails.pos`` is the email's place in "newest first" order: date descending,
  then ``id``. It is computed from the date alone (``order_key``), so it is known
  the moment a row is read, and it is the full-text index's rowid. "Newest
  first" is then FTS5's natural ascending rowid order: a search stops after
  ``max_results`` hits instead of collecting and sorting every match, and a
  date range is a rowid range.
* ``emails_fts`` indexes subject and body (as ART-E does) and also the sender
  and the recipients, each address as one opaque token (``x`` + hex of its
  UTF-8 bytes: exact, case-sensitive, never equal to a word). The inbox,
  ``from_addr`` and ``to_addr`` filters become FTS5 terms that FTS5 intersects
  with the keywords by skipping through its sorted doclists. ART-E's query
  leaves the planner a choice between walking every keyword match or every
  inbox email and then sorting them all; here the cost follows the shortest
  list and stops at the tenth hit.

Building: the main thread loads rows into ``emails``/``recipients`` (one
transaction per chunk, WAL) while a second thread indexes each committed chunk
into a side file with one ``INSERT ... SELECT`` (SQLite runs it without the
GIL, so the two threads use two cores; FTS5 writes each chunk as one segment).
The main thread then builds the secondary indexes, copies the side file's index
in, and the file is renamed into place only when complete.

``search`` must return what ART-E's straightforward query returns;
``EmailDB.search_reference`` is that query on this schema, kept so tests and the
benchmark can check one against the other.
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
from dataclasses import asdict, dataclass, field
from datetime import date as Date, datetime
from pathlib import Path
from typing import Any

DB_FILENAME = "enron_emails.db"

# ART-E's filters: longer bodies and wider distributions are not kept.
MAX_BODY_CHARS = 5000
MAX_RECIPIENTS = 30
MAX_SEARCH_RESULTS = 10
SNIPPET_TOKENS = 15
PREPARE_HINT = "build it with `python -m trainer.data prepare`"

# order_key: (seconds before the end of year 9999) * 2**SLOT_BITS + slot, where
# slot tells apart emails dated the same second, in source order.
SLOT_BITS = 16
_LAST_SECOND = (Date(9999, 12, 31).toordinal() - 1) * 86400 + 86399
# Rows per load transaction, and per full-text segment. A search looks each term
# up in every segment, so bigger segments search faster; but FTS5 holds a
# segment's pending data in memory, and a bigger hash indexes measurably slower.
# 32k rows (~15 segments at Enron scale) built fastest, and searched in ~1 ms.
_CHUNK_ROWS = 32_768
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

TABLES = """
CREATE TABLE emails (
    id INTEGER PRIMARY KEY,        -- source order of the kept emails, from 1
    pos INTEGER NOT NULL,          -- order_key(date, id): the full-text rowid
    message_id TEXT NOT NULL,
    date TEXT NOT NULL,            -- 'YYYY-MM-DD HH:MM:SS'
    from_address TEXT,
    subject TEXT,
    file_name TEXT,
    body TEXT                      -- last: the large column
);
CREATE TABLE recipients (
    email_id INTEGER NOT NULL,     -- emails.id
    seq INTEGER NOT NULL,          -- position: to, then cc, then bcc
    recipient_address TEXT NOT NULL,
    recipient_type TEXT NOT NULL,  -- 'to', 'cc' or 'bcc'
    PRIMARY KEY (email_id, seq)
) WITHOUT ROWID;
"""

INDEXES = """
CREATE UNIQUE INDEX emails_pos ON emails (pos);
CREATE UNIQUE INDEX emails_message_id ON emails (message_id);
CREATE INDEX emails_from ON emails (from_address);
CREATE INDEX emails_date ON emails (date);
CREATE INDEX recipients_address ON recipients (recipient_address, email_id);
"""

# What the full-text index holds per email. It is the index's external content
# (read back for snippets), and the side file fills the index from it.
_SENDER_TOKEN = "CASE WHEN e.from_address IS NOT NULL THEN 'x' || hex(e.from_address) END"
_RCPT_TOKENS = ("(SELECT group_concat('x' || hex(r.recipient_address), ' ') "
                "FROM {schema}recipients r WHERE r.email_id = e.id)")
CONTENT_VIEW = f"""
CREATE VIEW email_search_content AS
    SELECT e.pos AS pos, e.subject AS subject, e.body AS body,
           {_SENDER_TOKEN} AS sender, {_RCPT_TOKENS.format(schema='')} AS rcpt
    FROM emails e
"""
FTS_TABLE = """
CREATE VIRTUAL TABLE emails_fts USING fts5(
    subject, body, sender, rcpt,
    content = 'email_search_content', content_rowid = 'pos',
    detail = full,                 -- keywords are phrases: positions are needed
    columnsize = 0                 -- no per-row sizes: nothing ranks by bm25
)
"""
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
class SearchResult:
    message_id: str
    snippet: str


@dataclass(frozen=True)
class Email:
    message_id: str
    date: str  # 'YYYY-MM-DD HH:MM:SS'
    subject: str | None
    from_address: str | None
    to_addresses: list[str] = field(default_factory=list)
    cc_addresses: list[str] = field(default_factory=list)
    bcc_addresses: list[str] = field(default_factory=list)
    body: str | None = None
    file_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``read_email`` hands back to the model."""
        return asdict(self)


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
# Order and query expressions


def date_second(date_time: str) -> int:
    """Seconds from 0001-01-01 00:00:00 to a 'YYYY-MM-DD HH:MM:SS' date."""
    day = Date(int(date_time[0:4]), int(date_time[5:7]), int(date_time[8:10])).toordinal() - 1
    return day * 86400 + int(date_time[11:13]) * 3600 + int(date_time[14:16]) * 60 + int(date_time[17:19])


def order_key(date_time: str, slot: int) -> int:
    """The full-text rowid: ascending = date descending, then slot (source order) ascending."""
    return ((_LAST_SECOND - date_second(date_time)) << SLOT_BITS) | slot


def _phrase(text: str) -> str:
    """One FTS5 string: everything between double quotes is literal text.

    NUL would end the expression early inside SQLite and a lone surrogate
    cannot be encoded, so both become spaces (token separators anyway)."""
    text = text.replace("\x00", " ")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = "".join(" " if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return '"' + text.replace('"', '""') + '"'


def fts_match_expression(keywords: list[str]) -> str:
    """An FTS5 query requiring every keyword, each as a literal phrase, in subject or body.

    Quoting makes AND/OR/NOT/NEAR, ``*``, ``:``, ``^``, parentheses and hyphens
    plain text (a keyword of several words is a phrase, as in ART-E); the
    column filter keeps keywords away from the address columns."""
    if not keywords:
        raise ValueError("keywords must not be empty")
    if not all(isinstance(k, str) for k in keywords):
        raise ValueError(f"keywords must be strings, got {list(keywords)!r}")
    return "{subject body} : (" + " AND ".join(_phrase(k) for k in keywords) + ")"


def address_token(address: str) -> str:
    """The single full-text token an address is indexed as (see the module docstring)."""
    return "x" + address.encode("utf-8", "surrogatepass").hex()


def _filter_expression(keywords: list[str], inbox: str, from_addr: str | None, to_addr: str | None) -> str:
    parts = [fts_match_expression(keywords), "{sender rcpt} : " + _phrase(address_token(inbox))]
    if from_addr:
        parts.append("sender : " + _phrase(address_token(from_addr)))
    if to_addr:
        parts.append("rcpt : " + _phrase(address_token(to_addr)))
    return " AND ".join(parts)


def _day(value: str | None, name: str) -> str | None:
    """'YYYY-MM-DD' -> the 'YYYY-MM-DD 00:00:00' bound ART-E compares dates with."""
    if not value:
        return None
    if not isinstance(value, str) or not _DAY.fullmatch(value):
        raise ValueError(f"{name} must be a date 'YYYY-MM-DD', got {value!r}")
    try:
        Date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{name} must be a date 'YYYY-MM-DD', got {value!r}") from None
    return f"{value} 00:00:00"


def _pos_range(after: str | None, before: str | None) -> tuple[int, int]:
    """Full-text rowids of emails dated in [after, before): newest first, so ``before`` bounds below."""
    lo = 0 if before is None else order_key(before, 0) + (1 << SLOT_BITS)
    hi = (1 << 63) - 1 if after is None else order_key(after, (1 << SLOT_BITS) - 1)
    return lo, hi


def _check_max_results(max_results: int) -> None:
    if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= MAX_SEARCH_RESULTS:
        raise ValueError(f"max_results must be an integer from 1 to {MAX_SEARCH_RESULTS}, got {max_results!r}")


# ---------------------------------------------------------------------------
# Reading

_SNIPPET = f"snippet(emails_fts, -1, '<b>', '</b>', ' ... ', {SNIPPET_TOKENS})"
_ELLIPSIS = " ... "
_SEARCH_SQL = f"""
SELECT f.rowid, e.message_id, f.snippet, f.sender, f.rcpt
FROM (SELECT rowid, {_SNIPPET} AS snippet, sender, rcpt FROM emails_fts
      WHERE emails_fts MATCH :expr AND rowid >= :lo AND rowid <= :hi
      ORDER BY rowid LIMIT :n) AS f
JOIN emails e ON e.pos = f.rowid
"""
_SNIPPET_SQL = f"SELECT {_SNIPPET} FROM emails_fts WHERE emails_fts MATCH ? AND rowid = ?"
_READ_SQL = "SELECT id, message_id, date, subject, from_address, body, file_name FROM emails WHERE message_id = ?"
_RECIPIENTS_SQL = "SELECT recipient_address, recipient_type FROM recipients WHERE email_id = ? ORDER BY seq"


class EmailDB:
    """Read-only access to a built database; one connection, safe to share across threads and tasks."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"email database not found: {path}; {PREPARE_HINT}")
        self.path = path
        # immutable: once renamed into place the file is never modified (a rebuild
        # replaces it), and skipping locks sidesteps shared filesystems whose
        # file locking is slow or broken.
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self._check_schema()
        self._conn.execute("PRAGMA cache_size = -65536")

    def _check_schema(self) -> None:
        try:
            names = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as error:
            self._conn.close()
            raise ValueError(f"{self.path} is not an SQLite database ({error}); "
                             "rebuild it with `python -m trainer.data prepare --force`") from None
        missing = {"emails", "recipients", "emails_fts", "emails_pos"} - names
        if missing:
            self._conn.close()
            raise ValueError(f"{self.path} is not an email database built by this version "
                             f"(missing {', '.join(sorted(missing))}); rebuild it with "
                             "`python -m trainer.data prepare --force`")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> EmailDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self) -> int:
        """Number of emails in the database."""
        with self._lock:
            return self._conn.execute("SELECT count(*) FROM emails").fetchone()[0]

    def has_inbox(self, address: str) -> bool:
        """Whether any email was sent by or to ``address`` (the serving API's unknown-inbox check)."""
        with self._lock:
            return self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM emails WHERE from_address = ?1) "
                "OR EXISTS (SELECT 1 FROM recipients WHERE recipient_address = ?1)", (address,)).fetchone()[0] == 1

    def search(
        self,
        *,
        inbox: str,
        keywords: list[str],
        from_addr: str | None = None,
        to_addr: str | None = None,
        sent_after: str | None = None,
        sent_before: str | None = None,
        max_results: int = 10,
    ) -> list[SearchResult]:
        """Emails of ``inbox`` (sent by it, or to/cc/bcc it) containing every keyword, newest first.

        ``sent_after`` is inclusive and ``sent_before`` exclusive, both 'YYYY-MM-DD'."""
        _check_max_results(max_results)
        keywords = list(keywords)
        keyword_expr = fts_match_expression(keywords) if keywords else ""  # checks them
        params = _search_params(keywords, inbox, from_addr, to_addr, sent_after, sent_before, max_results)
        if params is None:
            return []
        with self._lock:
            rows = sorted(self._conn.execute(_SEARCH_SQL, params).fetchall())
            return [SearchResult(message_id, self._keyword_snippet(keyword_expr, pos, snippet, sender, rcpt))
                    for pos, message_id, snippet, sender, rcpt in rows]

    def _keyword_snippet(self, keyword_expr: str, pos: int, snippet: str, sender: str | None,
                         rcpt: str | None) -> str:
        """ART-E's snippet, which knows only the keywords, from the one the search computed.

        The search's snippet also sees the address terms, but those occur only in
        the sender and rcpt columns: when subject or body wins the snippet's
        choice of column, column and window are the ones the keywords alone
        give. When an address column wins, the text is a verbatim piece of it;
        only then is the snippet asked for again with the keywords alone (a
        seek per row, which gets slow with many index segments)."""
        core = snippet.removeprefix(_ELLIPSIS).removesuffix(_ELLIPSIS).replace("<b>", "").replace("</b>", "")
        if core and (core in (sender or "") or core in (rcpt or "")):
            row = self._conn.execute(_SNIPPET_SQL, (keyword_expr, pos)).fetchone()
            return row[0] if row else ""
        return snippet

    def explain_search(self, *, inbox: str, keywords: list[str], sent_before: str | None = None) -> list[str]:
        """EXPLAIN QUERY PLAN of the search statement (tests and the benchmark check it is one FTS scan)."""
        params = _search_params(list(keywords), inbox, None, None, None, sent_before, MAX_SEARCH_RESULTS)
        with self._lock:
            return [row[-1] for row in self._conn.execute("EXPLAIN QUERY PLAN " + _SEARCH_SQL, params or
                                                          {"expr": "x", "lo": 0, "hi": 0, "n": 1})]

    def search_reference(
        self,
        *,
        inbox: str,
        keywords: list[str],
        from_addr: str | None = None,
        to_addr: str | None = None,
        sent_after: str | None = None,
        sent_before: str | None = None,
        max_results: int = 10,
    ) -> list[SearchResult]:
        """ART-E's straightforward query on this schema: the specification ``search`` is checked against.

        FTS match joined with emails, inbox via from OR EXISTS recipients, date
        filters, newest first; equal dates in source order (ART-E left ties open)."""
        _check_max_results(max_results)
        after, before = _day(sent_after, "sent_after"), _day(sent_before, "sent_before")
        if not keywords:
            return []
        where = ["emails_fts MATCH ?",
                 "(e.from_address = ? OR EXISTS (SELECT 1 FROM recipients r "
                 "WHERE r.recipient_address = ? AND r.email_id = e.id))"]
        params: list[Any] = [fts_match_expression(list(keywords)), inbox, inbox]
        if from_addr:
            where.append("e.from_address = ?")
            params.append(from_addr)
        if to_addr:
            where.append("EXISTS (SELECT 1 FROM recipients r WHERE r.recipient_address = ? AND r.email_id = e.id)")
            params.append(to_addr)
        if after:
            where.append("e.date >= ?")
            params.append(after)
        if before:
            where.append("e.date < ?")
            params.append(before)
        sql = (f"SELECT e.message_id, {_SNIPPET} FROM emails e JOIN emails_fts ON emails_fts.rowid = e.pos "
               f"WHERE {' AND '.join(where)} ORDER BY e.date DESC, e.id LIMIT ?")
        params.append(max_results)
        with self._lock:
            return [SearchResult(*row) for row in self._conn.execute(sql, params)]

    def read(self, message_id: str) -> Email | None:
        """One email with its recipients, or None if there is no such message_id.

        Recipients are looked up by the email's row id. (ART-E looked them up by
        message_id, so its emails always came back without recipients.)"""
        with self._lock:
            row = self._conn.execute(_READ_SQL, (message_id,)).fetchone()
            if row is None:
                return None
            recipients = self._conn.execute(_RECIPIENTS_SQL, (row[0],)).fetchall()
        by_type: dict[str, list[str]] = {"to": [], "cc": [], "bcc": []}
        for address, kind in recipients:
            by_type[kind].append(address)
        return Email(message_id=row[1], date=row[2], subject=row[3], from_address=row[4],
                     to_addresses=by_type["to"], cc_addresses=by_type["cc"], bcc_addresses=by_type["bcc"],
                     body=row[5], file_name=row[6])


def _search_params(keywords: list[str], inbox: str, from_addr: str | None, to_addr: str | None,
                   sent_after: str | None, sent_before: str | None, max_results: int) -> dict[str, Any] | None:
    """The search statement's parameters; None when nothing can match (no keywords, empty date range)."""
    after, before = _day(sent_after, "sent_after"), _day(sent_before, "sent_before")
    if not keywords:
        return None
    lo, hi = _pos_range(after, before)
    if lo > hi:
        return None
    return {"expr": _filter_expression(keywords, inbox, from_addr, to_addr), "lo": lo, "hi": hi, "n": max_results}


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
        except BaseException as error:  # reported to the loading thread
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
            from tqdm import tqdm

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
