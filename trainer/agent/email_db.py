"""The Enron email database the agent searches: schema, search, read (its fast build: email_db_build.py).

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

``search`` must return what ART-E's straightforward query returns;
``EmailDB.search_reference`` is that query on this schema, kept so tests and the
benchmark can check one against the other.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import asdict, dataclass, field
from datetime import date as Date
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
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")

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
