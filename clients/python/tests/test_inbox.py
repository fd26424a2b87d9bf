"""The claim's contract, run through every adapter on every database it supports: the
handler's writes and the claim commit together; a copy is a duplicate; fifty concurrent
copies run the handler once; a crash after the commit makes the redelivery a duplicate; a
rollback makes it new; ``force`` re-runs on purpose; purge keeps rows for its window."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, List, Optional

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, scoped_session, sessionmaker
from sqlalchemy.pool import NullPool

import inlet_inbox
import inlet_inbox.psycopg as inbox_psycopg
import inlet_inbox.sqlalchemy as inbox_sqlalchemy
import inlet_inbox.sqlite as inbox_sqlite
from inlet_inbox import DEFAULT_PURGE_WINDOW, Claim, TransactionError, Verified

CONSUMER = "payments"

ADAPTERS = {"sqlite": ["sqlalchemy", "sqlite3"], "postgresql": ["sqlalchemy", "psycopg"]}


class Crash(Exception):
    """A failure the test injects."""


class Way:
    """One adapter on one database, driven like a web handler would: ``deliver`` claims and
    runs the handler (which writes a ledger row in the same transaction) and returns only
    after the commit. It counts the handler's runs, whatever became of their transaction."""

    def __init__(self, database: Any, adapter: str) -> None:
        self.database = database
        self.adapter = adapter
        self.runs = 0
        self._lock = threading.Lock()

    def deliver(
        self,
        message_id: str,
        *,
        consumer: str = CONSUMER,
        force: bool = False,
        during: Optional[Callable[[], None]] = None,
    ) -> Claim:
        """Delivers once; ``during`` runs inside the handler after its write (to hold the
        transaction open, or to raise and roll it back)."""
        delivery = Verified(message_id, 0, b'{"amount": 100}')

        def handler(bind: Any, verified: Verified) -> None:
            with self._lock:
                self.runs += 1
            self._write_ledger(bind, consumer, verified.message_id)
            if during:
                during()

        return self._process(consumer, delivery, handler, force)

    def _process(self, consumer: str, delivery: Verified, handler: Any, force: bool) -> Claim:
        if self.adapter == "sqlalchemy":
            return inbox_sqlalchemy.process(
                sessionmaker(self.database.engine), consumer, delivery, handler, force=force
            )
        # closing(), not the connection's own context, which would also commit.
        with contextlib.closing(self.database.connect()) as conn:
            module = inbox_psycopg if self.adapter == "psycopg" else inbox_sqlite
            return module.process(conn, consumer, delivery, handler, force=force)

    def _write_ledger(self, bind: Any, consumer: str, message_id: str) -> None:
        if isinstance(bind, Session):
            bind.execute(
                text("INSERT INTO ledger (consumer, message_id, amount) VALUES (:c, :m, 100)"),
                {"c": consumer, "m": message_id},
            )
            return
        mark = "?" if isinstance(bind, sqlite3.Connection) else "%s"
        bind.execute(
            f"INSERT INTO ledger (consumer, message_id, amount) VALUES ({mark}, {mark}, 100)",
            (consumer, message_id),
        )

    def ledger_rows(self, message_id: str, consumer: str = CONSUMER) -> int:
        return self.database.count(
            "SELECT count(*) FROM ledger WHERE consumer = :c AND message_id = :m",
            c=consumer,
            m=message_id,
        )

    def inbox_rows(self, message_id: str, consumer: str = CONSUMER) -> int:
        return self.database.count(
            "SELECT count(*) FROM inlet_inbox WHERE consumer = :c AND message_id = :m",
            c=consumer,
            m=message_id,
        )


@pytest.fixture(params=["sqlalchemy", "dbapi"])
def way(request: pytest.FixtureRequest, database: Any) -> Way:
    """SQLAlchemy, or the plain driver: sqlite3 on SQLite, psycopg on PostgreSQL."""
    adapter = "sqlalchemy" if request.param == "sqlalchemy" else ADAPTERS[database.dialect][1]
    return Way(database, adapter)


def test_the_first_delivery_is_new_and_a_copy_is_a_duplicate(way: Way, message_id: str):
    assert way.deliver(message_id) is Claim.NEW
    assert way.deliver(message_id) is Claim.DUPLICATE
    assert (way.runs, way.ledger_rows(message_id), way.inbox_rows(message_id)) == (1, 1, 1)


def test_each_consumer_claims_a_message_for_itself(way: Way, message_id: str):
    assert way.deliver(message_id, consumer="payments") is Claim.NEW
    assert way.deliver(message_id, consumer="emails") is Claim.NEW
    assert way.deliver(message_id, consumer="emails") is Claim.DUPLICATE
    assert way.runs == 2


def test_a_rollback_leaves_no_claim_so_the_redelivery_is_new(way: Way, message_id: str):
    def fail() -> None:
        raise Crash("the handler failed after its write")

    with pytest.raises(Crash):
        way.deliver(message_id, during=fail)  # the adapter answers 5xx: Inlet retries
    assert (way.ledger_rows(message_id), way.inbox_rows(message_id)) == (0, 0)
    assert way.deliver(message_id) is Claim.NEW
    assert (way.runs, way.ledger_rows(message_id)) == (2, 1)


def test_a_crash_after_the_commit_makes_the_redelivery_a_duplicate(way: Way, message_id: str):
    def deliver_then_lose_the_answer() -> None:
        way.deliver(message_id)  # committed
        raise ConnectionResetError("the process died before its 2xx left")

    with pytest.raises(ConnectionResetError):
        deliver_then_lose_the_answer()
    assert way.deliver(message_id) is Claim.DUPLICATE  # Inlet's retry
    assert (way.runs, way.ledger_rows(message_id), way.inbox_rows(message_id)) == (1, 1, 1)


def test_fifty_concurrent_duplicates_run_the_handler_once(way: Way, message_id: str):
    copies = 50
    start = threading.Barrier(copies)

    def one_copy(_: int) -> Claim:
        start.wait()
        # The winner holds its transaction open a while, so the others pile up behind it.
        return way.deliver(message_id, during=lambda: time.sleep(0.3))

    with ThreadPoolExecutor(copies) as pool:
        claims = list(pool.map(one_copy, range(copies)))
    assert claims.count(Claim.NEW) == 1
    assert claims.count(Claim.DUPLICATE) == copies - 1
    assert (way.runs, way.ledger_rows(message_id), way.inbox_rows(message_id)) == (1, 1, 1)


def test_a_concurrent_copy_waits_and_runs_when_the_first_rolls_back(way: Way, message_id: str):
    claimed = threading.Event()

    def first_then_fail() -> None:
        claimed.set()
        time.sleep(0.5)
        raise Crash("rolled back while a copy waits")

    def first() -> None:
        with pytest.raises(Crash):
            way.deliver(message_id, during=first_then_fail)

    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(first)
        assert claimed.wait(10)
        started = time.monotonic()
        second = pool.submit(way.deliver, message_id).result(timeout=30)
        failing.result()
    assert second is Claim.NEW
    assert time.monotonic() - started >= 0.3  # it waited for the first transaction
    assert (way.runs, way.ledger_rows(message_id), way.inbox_rows(message_id)) == (2, 1, 1)


def test_force_re_runs_under_the_same_key_and_later_copies_stay_duplicates(
    way: Way, message_id: str
):
    assert way.deliver(message_id) is Claim.NEW
    assert way.deliver(message_id, force=True) is Claim.NEW
    assert way.deliver(message_id) is Claim.DUPLICATE
    assert (way.runs, way.ledger_rows(message_id), way.inbox_rows(message_id)) == (2, 2, 1)


def test_a_forced_re_run_that_rolls_back_keeps_the_first_claim(way: Way, message_id: str):
    assert way.deliver(message_id) is Claim.NEW

    def fail() -> None:
        raise Crash("the re-run failed")

    with pytest.raises(Crash):
        way.deliver(message_id, force=True, during=fail)
    assert way.deliver(message_id) is Claim.DUPLICATE  # the delete was rolled back too
    assert (way.ledger_rows(message_id), way.inbox_rows(message_id)) == (1, 1)


def test_force_on_a_new_message_is_new(way: Way, message_id: str):
    assert way.deliver(message_id, force=True) is Claim.NEW
    assert way.inbox_rows(message_id) == 1


# --- claim in the caller's own transaction -------------------------------------------


def test_claim_in_a_session_commits_and_rolls_back_with_the_session(database: Any, message_id: str):
    sessions = sessionmaker(database.engine)
    with pytest.raises(Crash), sessions.begin() as session:
        assert inlet_inbox.claim(session, CONSUMER, message_id) is Claim.NEW
        raise Crash("rolled back")
    with sessions.begin() as session:
        assert inlet_inbox.claim(session, CONSUMER, message_id) is Claim.NEW
    with sessions.begin() as session:
        assert inlet_inbox.claim(session, CONSUMER, message_id) is Claim.DUPLICATE


def test_claim_on_a_core_connection(database: Any, message_id: str):
    with database.engine.begin() as connection:
        assert inbox_sqlalchemy.claim(connection, CONSUMER, message_id) is Claim.NEW
        assert inbox_sqlalchemy.claim(connection, CONSUMER, message_id) is Claim.DUPLICATE


def test_claim_on_a_driver_connection_through_the_core_dispatch(database: Any, message_id: str):
    conn = database.connect()
    try:
        assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.NEW
        conn.rollback()
        assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.NEW
        conn.commit()
        assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.DUPLICATE
        conn.rollback()
    finally:
        conn.close()


def test_an_autocommit_claim_is_refused_and_writes_nothing(database: Any, message_id: str):
    autocommit = create_engine(
        database.sqlalchemy_url, poolclass=NullPool, isolation_level="AUTOCOMMIT"
    )
    with Session(autocommit) as session, pytest.raises(TransactionError):
        inlet_inbox.claim(session, CONSUMER, message_id)
    options = {"isolation_level": None} if database.dialect == "sqlite" else {"autocommit": True}
    conn = database.connect(**options)
    try:
        with pytest.raises(TransactionError):
            inlet_inbox.claim(conn, CONSUMER, message_id)
    finally:
        conn.close()
    assert (
        database.count("SELECT count(*) FROM inlet_inbox WHERE message_id = :m", m=message_id) == 0
    )


def test_an_autocommit_connection_claims_inside_an_explicit_transaction(
    database: Any, message_id: str
):
    if database.dialect == "sqlite":
        conn = database.connect(isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.NEW
        conn.execute("ROLLBACK")
        conn.close()
        return
    with psycopg.connect(database.driver_target, autocommit=True) as conn:
        with conn.transaction():
            assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.NEW
        with conn.transaction():
            assert inlet_inbox.claim(conn, CONSUMER, message_id) is Claim.DUPLICATE


@pytest.mark.parametrize("given", ["engine", "sessionmaker", "session"])
def test_process_takes_an_engine_a_sessionmaker_or_a_fresh_session(
    database: Any, message_id: str, given: str
):
    factory = sessionmaker(database.engine)
    make = {"engine": lambda: database.engine, "sessionmaker": lambda: factory, "session": factory}
    delivery = Verified(message_id, 0, b"{}")
    seen: List[Session] = []
    for _ in range(2):
        sessions = make[given]()
        found = inbox_sqlalchemy.process(sessions, CONSUMER, delivery, lambda s, d: seen.append(s))
        if isinstance(sessions, Session):
            sessions.close()
    assert found is Claim.DUPLICATE
    assert len(seen) == 1 and isinstance(seen[0], Session)
    assert (
        database.count("SELECT count(*) FROM inlet_inbox WHERE message_id = :m", m=message_id) == 1
    )


def test_claim_through_a_scoped_session(database: Any, message_id: str):
    registry = scoped_session(sessionmaker(database.engine))
    try:
        with registry.begin():
            assert inlet_inbox.claim(registry, CONSUMER, message_id) is Claim.NEW
        with registry.begin():
            assert inlet_inbox.claim(registry, CONSUMER, message_id) is Claim.DUPLICATE
    finally:
        registry.remove()


def test_process_refuses_a_transaction_it_does_not_own(database: Any, message_id: str):
    delivery = Verified(message_id, 0, b"{}")
    with Session(database.engine) as session:
        session.execute(text("SELECT 1"))
        with pytest.raises(TransactionError):
            inbox_sqlalchemy.process(session, CONSUMER, delivery, lambda s, d: None)
    conn = database.connect()
    try:
        conn.execute("INSERT INTO ledger (consumer, message_id, amount) VALUES ('x', 'y', 1)")
        module = inbox_sqlite if database.dialect == "sqlite" else inbox_psycopg
        with pytest.raises(TransactionError):
            module.process(conn, CONSUMER, delivery, lambda c, d: None)
        conn.rollback()
    finally:
        conn.close()


@pytest.mark.parametrize("read_first", [False, True], ids=["claim-first", "read-first"])
def test_sqlite_deferred_transactions_wait_when_they_claim_first(
    sqlite_database: Any, message_id: str, read_first: bool
):
    """A deferred SQLite transaction whose first statement is the claim waits for the
    winner like any other; one that read first holds a stale snapshot and fails "database
    is locked" (answered 5xx, retried): noisy, but never a second run."""
    runs: List[int] = []
    start = threading.Barrier(10)

    def one_copy(_: int) -> Any:
        conn = sqlite3.connect(sqlite_database.driver_target, timeout=30)  # deferred
        try:
            start.wait()
            if read_first:
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM ledger").fetchone()
            found = inlet_inbox.claim(conn, CONSUMER, message_id)
            if found is Claim.NEW:
                runs.append(1)
                time.sleep(0.2)
            conn.commit()
            return found
        except sqlite3.OperationalError as locked:
            conn.rollback()
            return str(locked)
        finally:
            conn.close()

    with ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(one_copy, range(10)))
    assert outcomes.count(Claim.NEW) == 1 and len(runs) == 1
    others = [o for o in outcomes if o is not Claim.NEW]
    if read_first:
        assert all(o is Claim.DUPLICATE or "locked" in o for o in others)
    else:
        assert others == [Claim.DUPLICATE] * 9


# --- purge ---------------------------------------------------------------------------


def test_purge_keeps_rows_inside_the_window_and_deletes_older_ones(way: Way, message_id: str):
    assert way.deliver(message_id) is Claim.NEW
    now = datetime.now(timezone.utc)
    with way.database.engine.begin() as connection:
        assert (
            inbox_sqlalchemy.purge(connection, now=now + DEFAULT_PURGE_WINDOW - timedelta(hours=1))
            >= 0
        )
    assert way.inbox_rows(message_id) == 1
    conn = way.database.connect()
    try:
        deleted = inlet_inbox.purge(conn, now=now + DEFAULT_PURGE_WINDOW + timedelta(hours=1))
        conn.commit()
    finally:
        conn.close()
    assert deleted >= 1 and way.inbox_rows(message_id) == 0
    # Which is why the window must outlast every copy Inlet can still send:
    assert way.deliver(message_id) is Claim.NEW


def test_purge_counts_what_it_deletes(database: Any, message_id: str):
    with Session(database.engine) as session, session.begin():
        for index in range(3):
            inbox_sqlalchemy.claim(session, "purge-count", f"{message_id}:{index}")
    later = datetime.now(timezone.utc) + timedelta(days=400)
    with Session(database.engine) as session, session.begin():
        assert inbox_sqlalchemy.purge(session, now=later) >= 3
        assert inbox_sqlalchemy.purge(session, now=later) == 0


def test_the_default_purge_window_outlasts_inlets_default_horizons():
    # The last copy: a replay on the event's last day, dead after its deadline, requeued on
    # the dead letter's last day.
    deadline, retention_events, dead_letters = timedelta(days=3), timedelta(days=35), timedelta(days=30)
    assert DEFAULT_PURGE_WINDOW > retention_events + deadline + dead_letters
    assert DEFAULT_PURGE_WINDOW == timedelta(days=75)


@pytest.mark.parametrize("window", [timedelta(hours=23), timedelta(seconds=40), timedelta(0)])
def test_purge_refuses_a_window_shorter_than_a_day(database: Any, window: timedelta):
    with Session(database.engine) as session, pytest.raises(ValueError):
        inbox_sqlalchemy.purge(session, older_than=window)


# --- DDL and names -------------------------------------------------------------------


def test_ddl_for_each_dialect_and_refusals():
    assert inlet_inbox.ddl("postgres") == inlet_inbox.ddl("postgresql")
    assert all("IF NOT EXISTS" in statement for statement in inlet_inbox.ddl("sqlite"))
    with pytest.raises(ValueError):
        inlet_inbox.ddl("mysql")


def test_the_purge_cutoff_is_utc_in_each_dialects_form():
    from inlet_inbox.inbox import purge_cutoff

    naive = datetime(2024, 3, 1, 12, 0, 0)
    aware = naive.replace(tzinfo=timezone.utc)
    in_paris = aware.astimezone(timezone(timedelta(hours=1)))
    window = timedelta(days=40)
    assert purge_cutoff("sqlite", window, naive) == "2024-01-21 12:00:00"
    assert purge_cutoff("sqlite", window, in_paris) == "2024-01-21 12:00:00"
    assert purge_cutoff("postgresql", window, naive) == aware - window


def test_the_ddl_is_idempotent(database: Any):
    inbox_sqlalchemy.create_table(database.engine)
    inbox_sqlalchemy.create_table(database.engine)


@pytest.mark.parametrize(
    "consumer,message", [("", "stripe:evt_1"), ("payments", ""), ("payments", None)]
)
def test_empty_keys_are_refused(database: Any, consumer: str, message: Any):
    with Session(database.engine) as session, pytest.raises(ValueError):
        inlet_inbox.claim(session, consumer, message)


def test_an_unknown_connection_is_refused():
    with pytest.raises(TypeError):
        inlet_inbox.claim(object(), CONSUMER, "stripe:evt_1")
