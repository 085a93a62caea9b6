"""trainer.agent.email_db: build (filters, atomicity), read (with recipients), search (scoping,
order, filters, escaping) checked against ART-E's straightforward query and a
pure-Python oracle over the fixture corpus."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import unicodedata
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainer.conftest import fixture_rows
from trainer.agent.email_db import (
    DB_FILENAME,
    MAX_BODY_CHARS,
    MAX_RECIPIENTS,
    Email,
    EmailDB,
    SearchResult,
    fts_match_expression,
    order_key,
)
from trainer.agent.email_db_build import build_database

REPO = Path(__file__).resolve().parents[3]
INBOXES = ("vince.kaminski@enron.com", "jeff.dasovich@enron.com", "kay.mann@enron.com", "sara.shackleton@enron.com")
HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------------------
# An oracle: ART-E's rules applied to the fixture rows in plain Python


def _tokens(text: str | None) -> list[str]:
    """unicode61's tokens for the fixture's text: letter/digit runs, case and accents folded."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", text or "") if not unicodedata.combining(c))
    return re.findall(r"[^\W_]+", folded.lower())


def _kept_rows() -> list[dict[str, Any]]:
    """The fixture rows ART-E keeps, in source order, with their dates normalized."""
    kept, seen = [], set()
    for row in fixture_rows():
        recipients = len(row["to"]) + len(row["cc"]) + len(row["bcc"])
        key = (row["subject"], row["body"], row["from"])
        if len(row["body"]) > MAX_BODY_CHARS or recipients > MAX_RECIPIENTS or key in seen:
            continue
        seen.add(key)
        kept.append({**row, "date": row["date"].replace("T", " ")})
    return kept


KEPT = _kept_rows()


def _has_phrase(row: dict[str, Any], keyword: str) -> bool:
    phrase = _tokens(keyword)
    if not phrase:
        return False
    for field in ("subject", "body"):
        tokens = _tokens(row[field])
        if any(tokens[i:i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1)):
            return True
    return False


def oracle_search(*, inbox: str, keywords: list[str], from_addr: str | None = None, to_addr: str | None = None,
                  sent_after: str | None = None, sent_before: str | None = None, max_results: int = 10) -> list[str]:
    """Message ids ART-E's rules select, newest first, equal dates in source order."""
    def wanted(row: dict[str, Any]) -> bool:
        everyone = row["to"] + row["cc"] + row["bcc"]
        return ((row["from"] == inbox or inbox in everyone)
                and (not from_addr or row["from"] == from_addr)
                and (not to_addr or to_addr in everyone)
                and (not sent_after or row["date"] >= f"{sent_after} 00:00:00")
                and (not sent_before or row["date"] < f"{sent_before} 00:00:00")
                and bool(keywords) and all(_has_phrase(row, k) for k in keywords))

    hits = [(row["date"], i, row["message_id"]) for i, row in enumerate(KEPT) if wanted(row)]
    hits.sort(key=lambda hit: (hit[0], -hit[1]), reverse=True)
    return [message_id for _, _, message_id in hits[:max_results]]


def row_by_key(key: str) -> dict[str, Any]:
    """A fixture row by the key make_fixture.py gives it (the end of its file_name)."""
    return next(row for row in fixture_rows() if row["file_name"].endswith(f"/{key}."))


def ids(results: list[SearchResult]) -> list[str]:
    return [r.message_id for r in results]


# ---------------------------------------------------------------------------
# Build


def test_build_report_counts_each_of_arte_filters(tmp_path: Path) -> None:
    report = build_database(fixture_rows(), tmp_path / DB_FILENAME, show_progress=False)
    assert (report.inserted, report.skipped_long, report.skipped_recipients, report.skipped_duplicates) == \
        (len(KEPT), 1, 1, 8)
    assert report.rebuilt and report.path == tmp_path / DB_FILENAME and report.seconds > 0


def test_body_of_exactly_5000_characters_is_kept_and_5001_is_not(email_db: EmailDB) -> None:
    assert email_db.read(row_by_key("long_5000")["message_id"]) is not None
    assert email_db.read(row_by_key("long_5001")["message_id"]) is None


def test_30_recipients_are_kept_and_31_are_not(email_db: EmailDB) -> None:
    kept = email_db.read(row_by_key("wide_30")["message_id"])
    assert kept is not None and len(kept.to_addresses + kept.cc_addresses + kept.bcc_addresses) == 30
    assert email_db.read(row_by_key("wide_31")["message_id"]) is None


def test_a_duplicate_keeps_the_first_copy_in_source_order_only(email_db: EmailDB) -> None:
    copy = row_by_key("dup0")
    key = (copy["subject"], copy["body"], copy["from"])
    same = [r for r in fixture_rows() if (r["subject"], r["body"], r["from"]) == key]
    assert len(same) == 2
    assert email_db.read(same[0]["message_id"]) is not None
    assert email_db.read(same[1]["message_id"]) is None


def test_a_repeated_message_id_is_skipped_as_a_duplicate(tmp_path: Path) -> None:
    first, second = fixture_rows()[:2]
    rows = [first, {**second, "message_id": first["message_id"]}]
    report = build_database(rows, tmp_path / "db", show_progress=False)
    assert (report.inserted, report.skipped_duplicates) == (1, 1)


def test_an_existing_database_is_kept_without_reading_rows(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    build_database(fixture_rows()[:5], path, show_progress=False)
    before = path.read_bytes()

    def untouchable():
        raise AssertionError("rows were read")
        yield  # pragma: no cover

    report = build_database(untouchable(), path, show_progress=False)
    assert not report.rebuilt and report.inserted == 0 and path.read_bytes() == before


def test_force_rebuilds_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    build_database(fixture_rows()[:5], path, show_progress=False)
    report = build_database(fixture_rows()[:9], path, force=True, show_progress=False)
    assert report.rebuilt and report.inserted == 9
    with EmailDB(path) as db:
        assert db.count() == 9


def _failing_rows(after: int):
    yield from fixture_rows()[:after]
    raise RuntimeError("source broke")


def test_a_failed_build_leaves_no_file_behind(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="source broke"):
        build_database(_failing_rows(150), tmp_path / DB_FILENAME, show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rebuild_keeps_the_previous_database(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    build_database(fixture_rows()[:5], path, show_progress=False)
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        build_database(_failing_rows(150), path, force=True, show_progress=False)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [DB_FILENAME]


def test_dates_may_be_datetimes_or_iso_text(tmp_path: Path) -> None:
    base = fixture_rows()[0]
    dates = [datetime(2001, 5, 23, 14, 3, 9), "2001-05-23T14:03:08", "2001-05-23 14:03:07",
             datetime(2001, 5, 23, 14, 3, 6, 999, tzinfo=timezone.utc), "2001-05-23T14:03:05+02:00"]
    rows = [{**base, "message_id": f"<m{i}>", "body": f"body {i}", "date": d} for i, d in enumerate(dates)]
    build_database(rows, tmp_path / "db", show_progress=False)
    with EmailDB(tmp_path / "db") as db:
        assert [db.read(f"<m{i}>").date for i in range(5)] == [f"2001-05-23 14:03:0{9 - i}" for i in range(5)]


def test_an_unreadable_date_is_one_error_naming_the_email(tmp_path: Path) -> None:
    row = {**fixture_rows()[0], "date": "last Tuesday"}
    with pytest.raises(ValueError, match=r"<10000\..*'last Tuesday'.*ISO 8601"):
        build_database([row], tmp_path / "db", show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_progress_bars_are_shown_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_database(fixture_rows(), tmp_path / "quiet", show_progress=False)
    assert capsys.readouterr().err == ""
    build_database(fixture_rows(), tmp_path / "loud", show_progress=True, total=214)
    err = capsys.readouterr().err
    assert "emails" in err and "214" in err and "finishing 4/4" in err


def test_the_database_file_gets_umask_permissions_not_mkstemps_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        build_database(fixture_rows()[:3], tmp_path / "db", show_progress=False)
    finally:
        os.umask(old)
    assert (tmp_path / "db").stat().st_mode & 0o777 == 0o644


def test_the_full_text_index_agrees_with_its_content(art_e_data_dir: Path, tmp_path: Path) -> None:
    """The index copied in from the side file passes FTS5's own integrity check against the emails."""
    copy = tmp_path / "copy.db"
    shutil.copy(art_e_data_dir / DB_FILENAME, copy)
    conn = sqlite3.connect(copy)
    try:
        conn.execute("INSERT INTO emails_fts (emails_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


def test_the_built_file_is_not_left_in_wal_mode(art_e_data_dir: Path) -> None:
    conn = sqlite3.connect(art_e_data_dir / DB_FILENAME)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal"
    finally:
        conn.close()


def test_order_key_sorts_newest_first_then_source_order() -> None:
    keys = [order_key("2001-05-23 10:00:00", 0), order_key("2001-05-23 10:00:00", 1),
            order_key("2001-05-23 09:59:59", 0), order_key("2000-01-01 00:00:00", 0),
            order_key("0001-01-01 00:00:00", 0)]
    assert keys == sorted(keys) and len(set(keys)) == len(keys) and keys[-1] < 2 ** 63


# ---------------------------------------------------------------------------
# Open and read


def test_opening_a_missing_database_names_it_and_the_prepare_command(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.db.*python -m trainer\.data prepare"):
        EmailDB(tmp_path / "missing.db")


def test_opening_a_file_that_is_not_our_database_says_to_rebuild(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_text("not sqlite at all" * 100)
    with pytest.raises(ValueError, match=r"junk\.db.*prepare --force"):
        EmailDB(tmp_path / "junk.db")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ValueError, match=r"missing emails.*prepare --force"):
        EmailDB(tmp_path / "other.db")


def test_read_returns_to_cc_and_bcc_recipients(email_db: EmailDB) -> None:
    """ART-E looked recipients up by message_id instead of the row id, so they came back empty."""
    for key in ("vk_offsite", "vk_interview", "wide_30"):
        row = row_by_key(key)
        email = email_db.read(row["message_id"])
        assert email is not None
        assert (email.to_addresses, email.cc_addresses, email.bcc_addresses) == (row["to"], row["cc"], row["bcc"])
        assert email.to_addresses or email.cc_addresses or email.bcc_addresses


def test_read_returns_every_field_as_stored(email_db: EmailDB) -> None:
    row = row_by_key("jd_caf")
    assert email_db.read(row["message_id"]) == Email(
        message_id=row["message_id"], date=row["date"].replace("T", " "), subject=row["subject"],
        from_address=row["from"], to_addresses=row["to"], cc_addresses=[], bcc_addresses=[], body=row["body"],
        file_name=row["file_name"])


def test_reading_an_unknown_message_id_returns_none(email_db: EmailDB) -> None:
    assert email_db.read("<no such message>") is None
    assert email_db.read("") is None


def test_email_to_dict_is_what_json_can_carry(email_db: EmailDB) -> None:
    data = email_db.read(row_by_key("ss_isda")["message_id"]).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == ["message_id", "date", "subject", "from_address", "to_addresses", "cc_addresses",
                          "bcc_addresses", "body", "file_name"]
    assert data["cc_addresses"] == ["mark.taylor@enron.com"]


def test_count_is_the_number_of_kept_emails(email_db: EmailDB) -> None:
    assert email_db.count() == len(KEPT)


# ---------------------------------------------------------------------------
# Search: behaviour


def test_search_finds_an_email_sent_to_the_inbox(email_db: EmailDB) -> None:
    results = email_db.search(inbox="vince.kaminski@enron.com", keywords=["offsite", "Woodlands"])
    assert ids(results) == [row_by_key("vk_offsite")["message_id"]]
    assert "<b>Woodlands</b>" in results[0].snippet and "<b>offsite</b>" in results[0].snippet


def test_search_finds_emails_the_inbox_sent_or_got_by_cc_or_bcc(email_db: EmailDB) -> None:
    assert ids(email_db.search(inbox="vince.kaminski@enron.com", keywords=["Ana Ortiz"])) == \
        [row_by_key("vk_interview")["message_id"]]  # sent by the inbox
    assert ids(email_db.search(inbox="vasant.shanbhogue@enron.com", keywords=["Ana Ortiz"])) == \
        [row_by_key("vk_interview")["message_id"]]  # bcc
    assert ids(email_db.search(inbox="sara.shackleton@enron.com", keywords=["DWR"])) == \
        [row_by_key("jd_dwr")["message_id"]]  # cc


def test_search_does_not_see_other_inboxes(email_db: EmailDB) -> None:
    assert email_db.search(inbox="kay.mann@enron.com", keywords=["Woodlands"]) == []


def test_search_needs_every_keyword(email_db: EmailDB) -> None:
    assert email_db.search(inbox="vince.kaminski@enron.com", keywords=["Woodlands", "turbine"]) == []


def test_a_keyword_of_several_words_is_a_phrase(email_db: EmailDB) -> None:
    vince = "vince.kaminski@enron.com"
    assert len(email_db.search(inbox=vince, keywords=["research group offsite"])) == 1
    assert email_db.search(inbox=vince, keywords=["offsite group research"]) == []


def test_search_returns_newest_first_and_equal_dates_in_source_order(email_db: EmailDB) -> None:
    vince = "vince.kaminski@enron.com"
    results = ids(email_db.search(inbox=vince, keywords=["analysts", "August"]))
    a, b = row_by_key("vk_thread_a"), row_by_key("vk_thread_b")
    assert a["date"] == b["date"]
    first, second = sorted((a, b), key=lambda r: [x["message_id"] for x in KEPT].index(r["message_id"]))
    assert results == [first["message_id"], second["message_id"]]
    dated = email_db.search(inbox=vince, keywords=["the"])
    dates = [email_db.read(r.message_id).date for r in dated]
    assert len(dated) == 10 and dates == sorted(dates, reverse=True)


def test_sent_after_is_inclusive_and_sent_before_exclusive(email_db: EmailDB) -> None:
    jeff, offsite_day = "jeff.dasovich@enron.com", "2001-01-17"  # both blackout emails are dated that day
    thread = {row_by_key("jd_thread_a")["message_id"], row_by_key("jd_thread_b")["message_id"]}
    assert set(ids(email_db.search(inbox=jeff, keywords=["blackouts"], sent_after=offsite_day))) == thread
    assert email_db.search(inbox=jeff, keywords=["blackouts"], sent_before=offsite_day) == []
    assert set(ids(email_db.search(inbox=jeff, keywords=["blackouts"], sent_before="2001-01-18"))) == thread
    assert email_db.search(inbox=jeff, keywords=["blackouts"], sent_after="2001-01-18") == []


def test_from_and_to_filters_narrow_the_inbox(email_db: EmailDB) -> None:
    jeff = "jeff.dasovich@enron.com"
    a, b = row_by_key("jd_thread_a")["message_id"], row_by_key("jd_thread_b")["message_id"]
    assert ids(email_db.search(inbox=jeff, keywords=["blackouts"], from_addr="richard.shapiro@enron.com")) == [a]
    assert ids(email_db.search(inbox=jeff, keywords=["blackouts"], to_addr="richard.shapiro@enron.com")) == [b]
    assert email_db.search(inbox=jeff, keywords=["blackouts"], from_addr="nobody@enron.com") == []


def test_max_results_caps_the_list(email_db: EmailDB) -> None:
    assert len(email_db.search(inbox="kay.mann@enron.com", keywords=["the"], max_results=3)) == 3


@pytest.mark.parametrize("bad", [0, 11, -1, True, "5", 2.0])
def test_max_results_outside_1_to_10_is_an_error_naming_the_value(email_db: EmailDB, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"max_results.*1 to 10.*{re.escape(repr(bad))}"):
        email_db.search(inbox="kay.mann@enron.com", keywords=["the"], max_results=bad)


@pytest.mark.parametrize("bad", ["2001-13-01", "May 2001", "2001-05-01T00:00:00", "20010501"])
def test_a_malformed_date_is_an_error_naming_it(email_db: EmailDB, bad: str) -> None:
    with pytest.raises(ValueError, match=rf"sent_before.*YYYY-MM-DD.*{re.escape(bad)}"):
        email_db.search(inbox="kay.mann@enron.com", keywords=["the"], sent_before=bad)


def test_no_keywords_find_nothing(email_db: EmailDB) -> None:
    assert email_db.search(inbox="kay.mann@enron.com", keywords=[]) == []


def test_search_syntax_inside_keywords_is_plain_text(email_db: EmailDB) -> None:
    vince, sara = "vince.kaminski@enron.com", "sara.shackleton@enron.com"
    var, swap = row_by_key("vk_var")["message_id"], row_by_key("ss_swap")["message_id"]
    assert ids(email_db.search(inbox=vince, keywords=["(NOT 1.2)"])) == [var]
    assert ids(email_db.search(inbox=vince, keywords=['"fat tails"', "natural-gas"])) == [var]
    assert ids(email_db.search(inbox=sara, keywords=["AND/OR"])) == [swap]
    assert ids(email_db.search(inbox=sara, keywords=["powder*"])) == [row_by_key("ss_recipes")["message_id"]]
    assert ids(email_db.search(inbox=vince, keywords=['Chapter 3: "Pricing & Hedging"'])) == \
        [row_by_key("vk_book")["message_id"]]
    assert email_db.search(inbox=vince, keywords=["Woodlands OR turbine"]) == []
    assert email_db.search(inbox=vince, keywords=["NEAR(Woodlands offsite)"]) == []


def test_accents_are_folded_as_in_art_e(email_db: EmailDB) -> None:
    jeff, cafe = "jeff.dasovich@enron.com", row_by_key("jd_caf")["message_id"]
    assert ids(email_db.search(inbox=jeff, keywords=["cafe rouge"])) == [cafe]
    assert ids(email_db.search(inbox=jeff, keywords=["CAFÉ"])) == [cafe]


def test_the_snippet_highlights_keywords_even_when_address_terms_score_higher(tmp_path: Path) -> None:
    """With the inbox and to_addr both among the recipients, the recipients column outscores a one-keyword
    subject in the search's own snippet; the result must still be ART-E's keyword-only snippet."""
    row = {"message_id": "<m1>", "subject": "Quarterly hello", "from": "a@enron.com", "date": "2001-01-01 10:00:00",
           "to": ["b@enron.com", "c@enron.com", "d@enron.com"], "cc": [], "bcc": [], "body": "", "file_name": "f"}
    build_database([row], tmp_path / "db", show_progress=False)
    with EmailDB(tmp_path / "db") as db:
        query = {"inbox": "d@enron.com", "keywords": ["hello"], "to_addr": "c@enron.com"}
        results = db.search(**query)
        assert results == db.search_reference(**query)
        assert results[0].snippet == "Quarterly <b>hello</b>"


def test_keywords_never_match_the_address_tokens(email_db: EmailDB) -> None:
    token = "x" + "vince.kaminski@enron.com".encode().hex()
    assert email_db.search(inbox="vince.kaminski@enron.com", keywords=[token]) == []


def test_search_is_one_full_text_scan_with_no_sort(email_db: EmailDB) -> None:
    plan = " | ".join(email_db.explain_search(inbox="kay.mann@enron.com", keywords=["turbine"],
                                              sent_before="2001-01-01"))
    assert "SCAN emails_fts VIRTUAL TABLE" in plan and "emails_pos" in plan
    assert "TEMP B-TREE" not in plan and "SCAN e " not in plan


def test_search_is_usable_from_threads_and_asyncio(email_db: EmailDB) -> None:
    queries = [(inbox, kw) for inbox in INBOXES for kw in (["the"], ["meeting"], ["agreement"], ["price"])]
    expected = [email_db.search(inbox=i, keywords=k) for i, k in queries]

    async def all_at_once() -> list[list[SearchResult]]:
        return await asyncio.gather(*(asyncio.to_thread(email_db.search, inbox=i, keywords=k) for i, k in queries * 5))

    assert asyncio.run(all_at_once()) == expected * 5


# ---------------------------------------------------------------------------
# Search: the same results as the straightforward query, and as the oracle

FIXTURE_WORDS = sorted({t for row in KEPT for t in _tokens(row["subject"]) + _tokens(row["body"])})
ADDRESSES = sorted({a for row in KEPT for a in [row["from"]] + row["to"] + row["cc"] + row["bcc"]})
DAYS = ["2000-01-01", "2000-03-14", "2000-07-01", "2000-10-02", "2001-01-17", "2001-01-18", "2001-06-15",
        "2001-09-10", "2002-01-01"]


def _check_against_reference_and_oracle(db: EmailDB, **query: Any) -> None:
    ours = db.search(**query)
    assert ours == db.search_reference(**query), query
    if all(k.isascii() for k in query["keywords"]):
        assert ids(ours) == oracle_search(**query), query


@pytest.mark.parametrize("inbox", INBOXES)
@pytest.mark.parametrize("keywords", [["the"], ["meeting"], ["please", "review"], ["price"], ["power prices"],
                                      ["the", "agreement", "draft"], ["enron"], ["ISDA"]])
def test_search_equals_the_straightforward_query(email_db: EmailDB, inbox: str, keywords: list[str]) -> None:
    for after, before in [(None, None), ("2000-06-01", None), (None, "2001-01-01"), ("2000-06-01", "2001-06-01")]:
        for max_results in (1, 4, 10):
            _check_against_reference_and_oracle(email_db, inbox=inbox, keywords=keywords, sent_after=after,
                                                sent_before=before, max_results=max_results)


keyword = st.one_of(st.sampled_from(FIXTURE_WORDS),
                    st.builds(" ".join, st.lists(st.sampled_from(FIXTURE_WORDS), min_size=2, max_size=3)),
                    st.text(alphabet="abcdeiorstn -*:^()\"", max_size=10))


@HYPOTHESIS
@given(keywords=st.lists(keyword, min_size=1, max_size=3),
       inbox=st.sampled_from(INBOXES + tuple(ADDRESSES[:6])),
       from_addr=st.none() | st.sampled_from(ADDRESSES), to_addr=st.none() | st.sampled_from(ADDRESSES),
       sent_after=st.none() | st.sampled_from(DAYS), sent_before=st.none() | st.sampled_from(DAYS),
       max_results=st.integers(1, 10))
def test_search_equals_the_straightforward_query_for_generated_queries(email_db: EmailDB, **query: Any) -> None:
    _check_against_reference_and_oracle(email_db, **query)


# ---------------------------------------------------------------------------
# Escaping: arbitrary text is never an error and never an operator


def _fts_ids(db: EmailDB, expression: str) -> set[str]:
    rows = db._conn.execute(
        "SELECT e.message_id FROM emails_fts JOIN emails e ON e.pos = emails_fts.rowid WHERE emails_fts MATCH ?",
        (expression,))
    return {row[0] for row in rows}


@HYPOTHESIS
@given(st.lists(st.text(), min_size=1, max_size=4))
def test_any_keywords_make_a_valid_query(email_db: EmailDB, keywords: list[str]) -> None:
    _fts_ids(email_db, fts_match_expression(keywords))
    email_db.search(inbox="kay.mann@enron.com", keywords=keywords)


@pytest.mark.parametrize("keyword", ["\x00", "a\x00b", "\ud800", "\"", '""', "\\", "'", "{subject}: x", "*", "^x",
                                     "NEAR(", "body:", "- -", "AND", "OR", "NOT", ")", "x\n\"y"])
def test_awkward_keywords_make_a_valid_query(email_db: EmailDB, keyword: str) -> None:
    _fts_ids(email_db, fts_match_expression([keyword, "the"]))


operator_text = st.builds("".join, st.lists(st.sampled_from(
    ["the", "price", "power", "agreement", "meeting", "AND", "OR", "NOT", "NEAR", " ", "*", ":", "^", "(", ")",
     "-", "+", '"', "{", "}", ",", "."]), min_size=1, max_size=8))


@HYPOTHESIS
@given(st.lists(operator_text, min_size=1, max_size=3))
def test_keywords_match_as_literal_phrases_never_as_operators(email_db: EmailDB, keywords: list[str]) -> None:
    expected = {row["message_id"] for row in KEPT if all(_has_phrase(row, k) for k in keywords)}
    assert _fts_ids(email_db, fts_match_expression(keywords)) == expected


def test_an_empty_keyword_list_is_not_a_query() -> None:
    with pytest.raises(ValueError, match="keywords"):
        fts_match_expression([])


# ---------------------------------------------------------------------------
# The benchmark


def test_the_benchmark_runs_on_a_small_corpus_and_checks_its_results(tmp_path: Path) -> None:
    """bench/email_db.py is not a test; this only checks it runs and reports (targets need full scale)."""
    run = subprocess.run([sys.executable, "-m", "bench.email_db", "--emails", "2000", "--keep", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode in (0, 1), run.stderr[-2000:]
    for line in ("build time", "build peak memory", "database size", "search p50", "search p99"):
        assert line in run.stdout
    assert re.search(r"straightforward query on our database: (\d+)/\1\b", run.stdout), run.stdout
    assert re.search(r"ART-E's query on its database: +(\d+)/\1\b", run.stdout), run.stdout


def test_keywords_that_are_not_strings_are_an_error_naming_them(email_db: EmailDB) -> None:
    with pytest.raises(ValueError, match=r"keywords must be strings.*\[3\]"):
        email_db.search(inbox="kay.mann@enron.com", keywords=[3])


def test_the_database_uses_8k_pages(art_e_data_dir: Path) -> None:
    conn = sqlite3.connect(art_e_data_dir / DB_FILENAME)
    try:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 8192
    finally:
        conn.close()
