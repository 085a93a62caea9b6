"""Email database: build and search, ours against ART-E's approach, on an Enron-scale corpus.

    .venv/bin/python -m bench.email_db [--emails 517000 | --quick] [--keep DIR]

(--keep DIR keeps the corpus and databases there, and reuses the corpus when
run again with the same size.)

A synthetic corpus with the schema of `corbt/enron-emails` (message_id, subject,
from, to/cc/bcc lists, date, body, file_name) is generated deterministically:
about 150 mailboxes of very different sizes, Zipf-distributed words and
correspondents, bodies with a median of ~1,200 characters and a tail past
ART-E's 5,000-character cut, a few percent of messages over its 30-recipient
cut, and some exact duplicates. It is saved as a `datasets` folder (what
`prepare` reads when staged locally), and both builds read that same folder,
each in a fresh child process so its peak memory (VmHWM: interpreter, imports
and build) is its own:

* baseline: ART-E's approach (`art_e/data/local_email_db.py`), re-implemented:
  iterate the `datasets.Dataset` row by row, one INSERT per email plus one
  executemany per email's recipients, keep (subject, body, from) tuples to
  dedupe, then create seven indexes and fill FTS5 from the table; search with
  ART-E's query (FTS MATCH joined with emails, inbox via from OR EXISTS
  recipients, date filters, ORDER BY date DESC LIMIT n);
* ours: `trainer.data`'s reader and `trainer.agent.email_db_build.build_database`, and
  `EmailDB.search`.

Search latency is measured over a fixed set of 1-3 keyword queries, each
scoped to one inbox and a date (as the agent searches: its inbox, before the
question's date), after one warm-up pass, on a warm page cache. Each of our
results is checked against the straightforward query on our database
(`EmailDB.search_reference`) and against ART-E's query on the baseline
database (same message ids and snippets; emails with equal dates come in
insertion order in both, which ART-E left to chance).

Targets: build at least 3x faster than the baseline and under 33 s (judged
at the full 517,000 emails only), peak memory under 1.5 GB; search p50 under
5 ms and p99 under 50 ms; identical results. Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

FULL_EMAILS = 517_000
QUICK_EMAILS = 50_000
SEED = 20011202  # the day Enron filed for bankruptcy
QUERIES = 300

TARGET_SPEEDUP = 3.0
TARGET_BUILD_SECONDS = 33.0
TARGET_PEAK_BYTES = 1.5e9
TARGET_P50_MS = 5.0
TARGET_P99_MS = 50.0

# ---------------------------------------------------------------------------
# Corpus

COMMON_WORDS = (
    "the to and of a in for is on that you i this be with will have we it are as at enron please from by your "
    "not or if can com ect hou me would an our all has thanks was any gas power energy meeting price deal "
    "contract market california trading call know let new time information business company report group "
    "review attached week today friday monday update agreement schedule risk financial transmission project "
    "credit houston management capacity pipeline customer rate cost plan issue letter draft legal team date "
    "year day office fax phone message original sent subject forwarded vince jeff kay sara mark john david"
).split()
DOMAINS = ("enron.com",) * 6 + ("aol.com", "yahoo.com", "hotmail.com", "dynegy.com", "elpaso.com", "reliant.com",
                                "calpx.com", "caiso.com", "pge.com", "sempra.com", "duke-energy.com", "mail.utexas.edu")
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["ex", "in", "on", "ar", "el", "or", "um"]


@dataclass(frozen=True)
class Query:
    inbox: str
    keywords: list[str]
    sent_before: str


def _words(rng: random.Random, count: int, used: set[str]) -> list[str]:
    """`count` distinct pronounceable made-up words not in `used`."""
    out: list[str] = []
    while len(out) < count:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 2, 3, 3, 3, 4))))
        if word not in used:
            used.add(word)
            out.append(word)
    return out


class Corpus:
    """Deterministic Enron-like emails, generated in column batches (numpy for the draws)."""

    VOCABULARY = 60_000
    POOL_TOKENS = 4_000_000
    MAILBOXES = 150
    CORRESPONDENTS = 40_000

    def __init__(self, emails: int, seed: int = SEED) -> None:
        import numpy as np

        self.np = np
        self.emails = emails
        self.rng = np.random.default_rng(seed)
        pyrng = random.Random(seed)
        used = set(COMMON_WORDS)
        self.vocab = COMMON_WORDS + _words(pyrng, self.VOCABULARY - len(COMMON_WORDS), used)
        self.pool = self._text_pool()
        people = _words(pyrng, 2 * (self.MAILBOXES + self.CORRESPONDENTS), used)
        self.mailboxes = [f"{people[2 * i]}.{people[2 * i + 1]}@enron.com" for i in range(self.MAILBOXES)]
        self.correspondents = [
            f"{people[2 * i]}.{people[2 * i + 1]}@{DOMAINS[i % len(DOMAINS)]}"
            for i in range(self.MAILBOXES, self.MAILBOXES + self.CORRESPONDENTS)]
        sizes = self.rng.lognormal(0.0, 0.9, self.MAILBOXES)
        self.mailbox_p = sizes / sizes.sum()
        ranks = np.arange(1, self.CORRESPONDENTS + 1, dtype=np.float64)
        self.correspondent_cdf = np.cumsum(1.0 / ranks) / np.sum(1.0 / ranks)
        self.start = np.datetime64("1999-06-01T00:00:00").astype("datetime64[s]").astype(np.int64)
        self.span = int((np.datetime64("2002-03-01T00:00:00") - np.datetime64("1999-06-01T00:00:00")).astype(
            "timedelta64[s]").astype(np.int64))

    def _text_pool(self) -> str:
        """One long Zipf-distributed text; bodies and subjects are slices of it."""
        np = self.np
        ranks = np.arange(1, len(self.vocab) + 1, dtype=np.float64)
        cdf = np.cumsum(1.0 / ranks ** 1.05)
        cdf /= cdf[-1]
        tokens = np.searchsorted(cdf, self.rng.random(self.POOL_TOKENS))
        marks = self.rng.random(self.POOL_TOKENS)
        vocab = self.vocab
        seps = [(".\n" if m < 0.04 else ". " if m < 0.08 else ", " if m < 0.12 else " ") for m in marks.tolist()]
        return "".join(vocab[t] + s for t, s in zip(tokens.tolist(), seps))

    def _slice(self, start: int, length: int) -> str:
        pool = self.pool
        begin = pool.find(" ", start) + 1
        end = pool.rfind(" ", begin, begin + length)
        return pool[begin:end if end > begin else begin + length].strip()

    def batches(self, batch_size: int = 20_000):
        """Yield column dicts (lists, dates as numpy datetime64[s]) of `batch_size` emails."""
        done = 0
        while done < self.emails:
            n = min(batch_size, self.emails - done)
            yield self._batch(done, n)
            done += n

    def _batch(self, first: int, n: int) -> dict[str, Any]:
        np, rng = self.np, self.rng
        owners = rng.choice(self.MAILBOXES, size=n, p=self.mailbox_p)
        sent = rng.random(n) < 0.3
        kind = rng.random(n)
        counts = np.where(kind < 0.55, 1, np.where(kind < 0.82, rng.integers(2, 6, n),
                          np.where(kind < 0.975, rng.integers(6, 31, n), rng.integers(31, 81, n))))
        others = np.searchsorted(self.correspondent_cdf, rng.random(int(counts.sum()) + n))
        body_len = np.clip(rng.lognormal(math.log(1200), 0.85, n), 20, 60_000).astype(np.int64)
        body_at = rng.integers(0, len(self.pool) - 70_000, n)
        subject_len = rng.integers(8, 60, n)
        subject_at = rng.integers(0, len(self.pool) - 100, n)
        reply = rng.random(n) < 0.3
        in_2000s = rng.random(n) < 0.85
        seconds = np.where(in_2000s, rng.integers(31_000_000, 94_000_000, n),  # 2000-2001
                           rng.integers(0, self.span, n))
        dates = (self.start + seconds).astype("datetime64[s]")
        duplicate = rng.random(n) < 0.03
        slot = rng.random(n)
        cols: dict[str, list] = {k: [] for k in ("message_id", "subject", "from", "to", "cc", "bcc", "body",
                                                 "file_name")}
        at = 0
        mailboxes, correspondents = self.mailboxes, self.correspondents
        for i in range(n):
            serial = first + i
            owner = mailboxes[owners[i]]
            k = int(counts[i])
            people = [correspondents[j] for j in others[at:at + k]]
            at += k
            if sent[i]:
                sender = owner
            else:
                sender = correspondents[others[at]]
                at += 1
                people[int(slot[i] * k)] = owner
            n_to = max(1, (k * 3) // 4) if k > 1 else 1
            n_cc = (k - n_to) if slot[i] < 0.9 else max(0, k - n_to - 1)
            to, cc, bcc = people[:n_to], people[n_to:n_to + n_cc], people[n_to + n_cc:]
            if duplicate[i] and i > 0:
                j = int(slot[i] * i)
                subject, body, sender = cols["subject"][j], cols["body"][j], cols["from"][j]
            else:
                subject = ("RE: " if reply[i] else "") + self._slice(int(subject_at[i]), int(subject_len[i]))
                body = self._slice(int(body_at[i]), int(body_len[i]))
            user = owner.split("@")[0]
            cols["message_id"].append(f"<{serial}.{(serial * 7919) % 1_000_003}.JavaMail.evans@thyme>")
            cols["subject"].append(subject)
            cols["from"].append(sender)
            cols["to"].append(to)
            cols["cc"].append(cc)
            cols["bcc"].append(bcc)
            cols["body"].append(body)
            cols["file_name"].append(f"{user}/{'sent_items' if sent[i] else 'inbox'}/{serial % 997}.")
        cols["date"] = dates
        cols["owner"] = [mailboxes[o] for o in owners]
        return cols


def queries_for(columns: dict[str, Any], rng: random.Random, count: int, vocab: list[str]) -> list[Query]:
    """`count` agent-like searches drawn from one batch of the corpus.

    Each is scoped to an email's mailbox and a date up to 60 days after it.
    Keywords: 40% words of that email (so there is a hit), 30% fairly common
    words, 30% any vocabulary word (often no hit in that inbox: the slow case
    for a search that collects every match)."""
    out = []
    for _ in range(count):
        i = rng.randrange(len(columns["body"]))
        date = columns["date"][i].astype("datetime64[D]") + rng.randrange(1, 61)
        kind = rng.random()
        n = rng.choice((1, 1, 2, 2, 3))
        if kind < 0.4:
            words = [w.strip(".,") for w in (columns["subject"][i] + " " + columns["body"][i]).split()]
            words = [w for w in words if w and w not in COMMON_WORDS[:60]] or words
            keywords = [rng.choice(words) for _ in range(n)]
        elif kind < 0.7:
            keywords = [rng.choice(vocab[60:600]) for _ in range(n)]
        else:
            keywords = [rng.choice(vocab) for _ in range(n)]
        out.append(Query(inbox=columns["owner"][i], keywords=keywords, sent_before=str(date)))
    return out


def write_corpus(emails: int, folder: Path) -> tuple[list[Query], float]:
    """Generate the corpus into a `datasets` save_to_disk folder; returns the queries and the seconds taken."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = time.perf_counter()
    corpus = Corpus(emails)
    rng = random.Random(SEED)
    schema = pa.schema([("message_id", pa.string()), ("subject", pa.string()), ("from", pa.string()),
                        ("to", pa.list_(pa.string())), ("cc", pa.list_(pa.string())), ("bcc", pa.list_(pa.string())),
                        ("date", pa.timestamp("us")), ("body", pa.string()), ("file_name", pa.string())])
    parquet = folder / "corpus.parquet"
    queries: list[Query] = []
    done = 0
    with pq.ParquetWriter(parquet, schema) as writer:
        for columns in corpus.batches():
            done += len(columns["body"])
            queries += queries_for(columns, rng, QUERIES * done // emails - len(queries), corpus.vocab)
            arrays = [pa.array(columns[name], type=schema.field(name).type) if name != "date"
                      else pa.array(columns["date"].astype("datetime64[us]"), type=pa.timestamp("us"))
                      for name in schema.names]
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(folder / "hf_cache"))
    dataset.save_to_disk(str(folder / "emails"))
    del dataset
    shutil.rmtree(folder / "hf_cache", ignore_errors=True)
    parquet.unlink()
    return queries, time.perf_counter() - start


# ---------------------------------------------------------------------------
# Baseline: ART-E's approach (art_e/data/local_email_db.py, email_search_tools.py), re-implemented

BASELINE_TABLES = """
CREATE TABLE emails (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT UNIQUE, subject TEXT,
                     from_address TEXT, date TEXT, body TEXT, file_name TEXT);
CREATE TABLE recipients (email_id INTEGER, recipient_address TEXT, recipient_type TEXT,
                         FOREIGN KEY(email_id) REFERENCES emails(id) ON DELETE CASCADE);
"""
BASELINE_INDEXES = """
CREATE INDEX idx_emails_from ON emails(from_address);
CREATE INDEX idx_emails_date ON emails(date);
CREATE INDEX idx_emails_message_id ON emails(message_id);
CREATE INDEX idx_recipients_address ON recipients(recipient_address);
CREATE INDEX idx_recipients_type ON recipients(recipient_type);
CREATE INDEX idx_recipients_email_id ON recipients(email_id);
CREATE INDEX idx_recipients_address_email ON recipients(recipient_address, email_id);
CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');
CREATE TRIGGER emails_ai AFTER INSERT ON emails BEGIN
    INSERT INTO emails_fts (rowid, subject, body) VALUES (new.id, new.subject, new.body); END;
CREATE TRIGGER emails_ad AFTER DELETE ON emails BEGIN DELETE FROM emails_fts WHERE rowid=old.id; END;
CREATE TRIGGER emails_au AFTER UPDATE ON emails BEGIN
    UPDATE emails_fts SET subject=new.subject, body=new.body WHERE rowid=old.id; END;
INSERT INTO emails_fts (rowid, subject, body) SELECT id, subject, body FROM emails;
"""


def baseline_build(dataset_dir: Path, db_path: Path) -> dict[str, Any]:
    """ART-E's build: a row-by-row pass over the Dataset, then indexes and the full-text table."""
    import datasets

    conn = sqlite3.connect(db_path)
    conn.executescript(BASELINE_TABLES)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA journal_mode = MEMORY")
    dataset = datasets.load_from_disk(str(dataset_dir))
    seen: set[tuple] = set()
    kept = long = wide = dupes = 0
    conn.execute("BEGIN")
    cursor = conn.cursor()
    for row in dataset:
        to = [str(a) for a in row["to"] if a]
        cc = [str(a) for a in row["cc"] if a]
        bcc = [str(a) for a in row["bcc"] if a]
        if len(row["body"]) > 5000:
            long += 1
            continue
        if len(to) + len(cc) + len(bcc) > 30:
            wide += 1
            continue
        key = (row["subject"], row["body"], row["from"])
        if key in seen:
            dupes += 1
            continue
        seen.add(key)
        cursor.execute("INSERT INTO emails (message_id, subject, from_address, date, body, file_name) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (row["message_id"], row["subject"], row["from"], row["date"].strftime("%Y-%m-%d %H:%M:%S"),
                        row["body"], row["file_name"]))
        email_id = cursor.lastrowid
        recipients = [(email_id, a, "to") for a in to] + [(email_id, a, "cc") for a in cc] + \
                     [(email_id, a, "bcc") for a in bcc]
        if recipients:
            cursor.executemany("INSERT INTO recipients (email_id, recipient_address, recipient_type) "
                               "VALUES (?, ?, ?)", recipients)
        kept += 1
    conn.commit()
    conn.executescript(BASELINE_INDEXES)
    conn.commit()
    conn.close()
    return {"inserted": kept, "skipped_long": long, "skipped_recipients": wide, "skipped_duplicates": dupes}


def baseline_search(conn: sqlite3.Connection, query: Query, max_results: int = 10) -> list[tuple[str, str]]:
    """ART-E's search query; equal dates in insertion order, as ours (ART-E left ties to chance)."""
    fts = " ".join('"' + k.replace('"', '""') + '"' for k in query.keywords)
    sql = """
        SELECT e.message_id, snippet(emails_fts, -1, '<b>', '</b>', ' ... ', 15)
        FROM emails e JOIN emails_fts fts ON e.id = fts.rowid
        WHERE fts.emails_fts MATCH ?
          AND (e.from_address = ? OR EXISTS (SELECT 1 FROM recipients r_inbox
               WHERE r_inbox.recipient_address = ? AND r_inbox.email_id = e.id))
          AND e.date < ?
        ORDER BY e.date DESC, e.id
        LIMIT ?"""
    return conn.execute(sql, (fts, query.inbox, query.inbox, f"{query.sent_before} 00:00:00", max_results)).fetchall()


def ours_build(dataset_dir: Path, db_path: Path) -> dict[str, Any]:
    from trainer.agent.email_db_build import build_database
    from trainer.staging.sources import email_rows, resolve_source

    rows, total = email_rows(resolve_source(str(dataset_dir)))
    report = build_database(rows, db_path, force=True, show_progress=False, total=total)
    return {"inserted": report.inserted, "skipped_long": report.skipped_long,
            "skipped_recipients": report.skipped_recipients, "skipped_duplicates": report.skipped_duplicates}


def child(kind: str, dataset_dir: Path, db_path: Path) -> None:
    """Run one build in this (fresh) process and print its figures as JSON."""
    build = baseline_build if kind == "baseline" else ours_build
    if kind == "baseline":
        import datasets  # imported before the clock starts, like ours imports its modules

        datasets.disable_progress_bars()
    else:
        import pyarrow  # noqa: F401

        import trainer.staging.data  # noqa: F401
    start = time.perf_counter()
    counts = build(dataset_dir, db_path)
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    print(json.dumps({"seconds": seconds, "peak_bytes": peak, **counts}))


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM, which starts afresh at exec.

    (ru_maxrss would not do: Linux carries it over fork and exec, so a child
    started by a big parent reports the parent's peak.)"""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # not Linux: best effort


def run_child(kind: str, dataset_dir: Path, db_path: Path) -> dict[str, Any]:
    db_path.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-m", "bench.email_db", "--child", kind, "--dataset", str(dataset_dir),
                             "--db", str(db_path)], capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        raise SystemExit(f"{kind} build failed:\n{result.stderr[-3000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["size_bytes"] = db_path.stat().st_size
    return figures


# ---------------------------------------------------------------------------
# Search


@dataclass
class SearchFigures:
    p50_ms: float
    p99_ms: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def timed_search(run, queries: list[Query]) -> tuple[SearchFigures, list[Any]]:
    for query in queries:  # warm-up: page cache and statement cache
        run(query)
    latencies, results = [], []
    for query in queries:
        start = time.perf_counter()
        results.append(run(query))
        latencies.append((time.perf_counter() - start) * 1000)
    return SearchFigures(percentile(latencies, 0.5), percentile(latencies, 0.99)), results


def query_plan(conn: sqlite3.Connection, sql: str, params: Any) -> list[str]:
    return [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


# ---------------------------------------------------------------------------
# Report


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emails", type=int, default=FULL_EMAILS, help=f"corpus size (default {FULL_EMAILS:,})")
    parser.add_argument("--quick", action="store_true", help=f"a {QUICK_EMAILS:,}-email corpus for a fast check")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp dir)")
    parser.add_argument("--child", choices=("baseline", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dataset, args.db)
        return 0
    emails = QUICK_EMAILS if args.quick else args.emails
    if emails < 100:
        parser.error(f"--emails must be at least 100, got {emails}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(emails, args.keep)
    with tempfile.TemporaryDirectory(prefix="bench-email-db-") as tmp:
        return run(emails, Path(tmp))


def corpus(emails: int, work: Path) -> list[Query]:
    """The corpus in `work`: generated, or reused from an earlier --keep run of the same size and seed."""
    saved = work / "queries.json"
    if saved.is_file() and (work / "emails").is_dir():
        meta = json.loads(saved.read_text())
        if meta["emails"] == emails and meta["seed"] == SEED:
            print(f"corpus: reusing {emails:,} emails in {work}", flush=True)
            return [Query(**q) for q in meta["queries"]]
    shutil.rmtree(work / "emails", ignore_errors=True)
    print(f"corpus: generating {emails:,} emails ...", flush=True)
    queries, seconds = write_corpus(emails, work)
    saved.write_text(json.dumps({"emails": emails, "seed": SEED, "queries": [q.__dict__ for q in queries]}))
    print(f"corpus: {emails:,} emails in {seconds:.1f} s", flush=True)
    return queries


def run(emails: int, work: Path) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    queries = corpus(emails, work)
    dataset_dir = work / "emails"
    base_db, our_db = work / "baseline.db", work / "ours.db"
    print("build: baseline (ART-E's approach) ...", flush=True)
    base = run_child("baseline", dataset_dir, base_db)
    print("build: ours ...", flush=True)
    ours = run_child("ours", dataset_dir, our_db)
    if any(base[k] != ours[k] for k in ("inserted", "skipped_long", "skipped_recipients", "skipped_duplicates")):
        print(f"WARNING: the builds kept different emails: baseline {base}, ours {ours}")
    from trainer.agent.email_db import EmailDB, SearchResult

    base_conn = sqlite3.connect(base_db.resolve().as_uri() + "?mode=ro", uri=True)
    db = EmailDB(our_db)
    try:
        def ours_run(q: Query) -> list[SearchResult]:
            return db.search(inbox=q.inbox, keywords=q.keywords, sent_before=q.sent_before)

        base_figures, base_results = timed_search(lambda q: baseline_search(base_conn, q), queries)
        our_figures, our_results = timed_search(ours_run, queries)
        same_reference = sum(
            r == db.search_reference(inbox=q.inbox, keywords=q.keywords, sent_before=q.sent_before)
            for q, r in zip(queries, our_results))
        same_baseline = sum([(x.message_id, x.snippet) for x in r] == [tuple(x) for x in b]
                            for r, b in zip(our_results, base_results))
        hits = sum(1 for r in our_results if r)
        plan = db.explain_search(inbox=queries[0].inbox, keywords=queries[0].keywords,
                                 sent_before=queries[0].sent_before)
    finally:
        db.close()
        base_conn.close()
    print_report(emails, ours, base, our_figures, base_figures, len(queries), hits, same_reference, same_baseline,
                 plan)
    ok = targets_met(emails, ours, base, our_figures, same_reference, same_baseline, len(queries))
    return 0 if ok else 1


def build_time_met(ours: dict, base: dict, emails: int) -> bool | None:
    """The build-time target, or None below Enron scale, where it is not set (the overlap needs volume)."""
    if emails < FULL_EMAILS:
        return None
    return base["seconds"] / ours["seconds"] >= TARGET_SPEEDUP and ours["seconds"] < TARGET_BUILD_SECONDS


def targets_met(emails: int, ours: dict, base: dict, search: SearchFigures, same_ref: int, same_base: int,
                n: int) -> bool:
    return (build_time_met(ours, base, emails) is not False and ours["peak_bytes"] < TARGET_PEAK_BYTES
            and search.p50_ms < TARGET_P50_MS and search.p99_ms < TARGET_P99_MS and same_ref == n
            and same_base == n)


def print_report(emails: int, ours: dict, base: dict, our_s: SearchFigures, base_s: SearchFigures, n: int,
                 hits: int, same_ref: int, same_base: int, plan: list[str]) -> None:
    print()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    print(f"emails: {emails:,} generated; kept {ours['inserted']:,}, skipped {ours['skipped_long']:,} long, "
          f"{ours['skipped_recipients']:,} with > 30 recipients, {ours['skipped_duplicates']:,} duplicates")
    print(f"{'':24}{'baseline (ART-E)':>18}{'ours':>12}{'ours vs baseline':>20}")
    rows = [
        ("build time", f"{base['seconds']:.1f} s", f"{ours['seconds']:.1f} s",
         f"{base['seconds'] / ours['seconds']:.1f}x faster"),
        ("build peak memory", gb(base["peak_bytes"]), gb(ours["peak_bytes"]),
         f"{base['peak_bytes'] / ours['peak_bytes']:.1f}x less"),
        ("database size", gb(base["size_bytes"]), gb(ours["size_bytes"]),
         f"{ours['size_bytes'] / base['size_bytes']:.2f}x"),
        ("search p50", f"{base_s.p50_ms:.2f} ms", f"{our_s.p50_ms:.2f} ms",
         f"{base_s.p50_ms / our_s.p50_ms:.1f}x faster"),
        ("search p99", f"{base_s.p99_ms:.2f} ms", f"{our_s.p99_ms:.2f} ms",
         f"{base_s.p99_ms / our_s.p99_ms:.1f}x faster"),
    ]
    for name, b, o, ratio in rows:
        print(f"{name:24}{b:>18}{o:>12}{ratio:>20}")
    print(f"queries: {n} (1-3 keywords, one inbox, before a date); {hits} with at least one hit")
    print(f"same results as the straightforward query on our database: {same_ref}/{n}")
    print(f"same results as ART-E's query on its database:            {same_base}/{n}")
    print("our search plan: " + " | ".join(plan))
    build_ok = build_time_met(ours, base, emails)
    print(f"target build >= {TARGET_SPEEDUP:.0f}x faster and < {TARGET_BUILD_SECONDS:.0f} s: "
          + (f"not judged at {emails:,} emails (set for {FULL_EMAILS:,})" if build_ok is None else verdict(build_ok)))
    print(f"target build peak < {gb(TARGET_PEAK_BYTES)}:        {verdict(ours['peak_bytes'] < TARGET_PEAK_BYTES)}")
    print(f"target search p50 < {TARGET_P50_MS:.0f} ms, p99 < {TARGET_P99_MS:.0f} ms: "
          f"{verdict(our_s.p50_ms < TARGET_P50_MS and our_s.p99_ms < TARGET_P99_MS)}")
    print(f"target same results:                {verdict(same_ref == n and same_base == n)}")


if __name__ == "__main__":
    sys.exit(main())
