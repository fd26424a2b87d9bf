"""The inbox through SQLAlchemy 2 (Core ``Connection`` or ORM ``Session``), on PostgreSQL
(psycopg 3) and SQLite (the stdlib driver).

:func:`claim` runs in the session's or connection's current transaction; :func:`process`
owns one: claim, handler, commit, and only then return, which is when the web adapter may
answer 2xx.

A concurrent duplicate waits for the first transaction: on PostgreSQL on the primary key,
on SQLite for the write lock (up to the connection's ``timeout``). On SQLite that holds when
the claim is the transaction's first statement, as in ``process``; a transaction that read
first holds a snapshot the winner's commit makes stale, and fails "database is locked"
instead (safe: 5xx, and Inlet's retry is a duplicate). Claim first, or begin IMMEDIATE.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import datetime, timedelta
from typing import Callable, Iterator, Optional, Union

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from .inbox import (
    DEFAULT_PURGE_WINDOW,
    Claim,
    already_in_transaction,
    check_names,
    claim_statements,
    ddl,
    not_in_transaction,
    purge_cutoff,
    purge_statement,
)
from .verify import Verified

Bind = Union[Session, Connection]
Sessions = Union[sessionmaker, Engine, Session]


def create_table(bind: Union[Engine, Connection]) -> None:
    """Creates the inbox table and index for the dialect if missing: committed at once on
    an engine, in the caller's transaction on a connection. With Alembic, put
    ``inlet_inbox.ddl(dialect)`` in a migration instead."""
    if isinstance(bind, Engine):
        with bind.begin() as connection:
            create_table(connection)
        return
    for statement in ddl(bind.dialect.name):
        bind.exec_driver_sql(statement)


def claim(bind: Bind, consumer: str, message_id: str, *, force: bool = False) -> Claim:
    """Claims inside the session's or connection's transaction; nothing is committed here.
    Refused when the driver connection autocommits outside a transaction."""
    check_names(consumer, message_id)
    connection = _connection(bind)
    if _autocommits(connection):
        raise not_in_transaction("SQLAlchemy")
    inserted = 0
    for statement in claim_statements(":", force):
        result = connection.execute(
            text(statement), {"consumer": consumer, "message_id": message_id}
        )
        inserted = result.rowcount
    return Claim.NEW if inserted == 1 else Claim.DUPLICATE


def purge(
    bind: Bind,
    *,
    older_than: timedelta = DEFAULT_PURGE_WINDOW,
    now: Optional[datetime] = None,
) -> int:
    """Deletes rows older than the window in the caller's transaction (commit it); the
    count deleted. The window must exceed Inlet's ``retention.events + deadline +
    retention.dead_letters``: see :data:`inlet_inbox.DEFAULT_PURGE_WINDOW`."""
    connection = _connection(bind)
    cutoff = purge_cutoff(connection.dialect.name, older_than, now)
    return connection.execute(text(purge_statement(":")), {"cutoff": cutoff}).rowcount


def process(
    sessions: Sessions,
    consumer: str,
    delivery: Verified,
    handler: Callable[[Session, Verified], object],
    *,
    force: bool = False,
) -> Claim:
    """Claims ``delivery`` and runs ``handler(session, delivery)`` in one transaction and
    returns only after the commit.

    ``sessions``: a ``sessionmaker``, an ``Engine``, or a ``Session`` with no transaction
    begun. Answer 2xx when it returns (``NEW``: applied now; ``DUPLICATE``: applied before,
    the handler did not run) and 5xx when it raises: the transaction was rolled back, no
    row was kept, and Inlet's retry runs the handler again.
    """
    with _owned_session(sessions) as session:
        # The claim is the first statement, so a concurrent copy waits for the winner.
        found = claim(session, consumer, delivery.message_id, force=force)
        if found is Claim.NEW:
            handler(session, delivery)
    return found


@contextlib.contextmanager
def _owned_session(sessions: Sessions) -> Iterator[Session]:
    """A session in a transaction begun here, committed on a clean exit and rolled back on
    an exception; a given session must not have one begun (its commit would come later)."""
    if isinstance(sessions, Session):
        if sessions.in_transaction():
            raise already_in_transaction("SQLAlchemy session")
        with sessions.begin():
            yield sessions
        return
    factory = sessions if isinstance(sessions, sessionmaker) else sessionmaker(sessions)
    with factory.begin() as session:
        yield session


def _connection(bind: Bind) -> Connection:
    """The connection itself, or the one under a session (``Session``, ``scoped_session``),
    which begins its transaction."""
    return bind if isinstance(bind, Connection) else bind.connection()


def _autocommits(connection: Connection) -> bool:
    """Whether the driver would commit the claim on its own, read from the driver
    connection's flags (asking the database would cost a round trip per claim)."""
    raw = connection.connection.driver_connection
    if isinstance(raw, sqlite3.Connection):
        return raw.isolation_level is None and not raw.in_transaction
    info = getattr(raw, "info", None)
    status = getattr(info, "transaction_status", None)
    # psycopg 3: autocommit with no transaction block open (status 0 is IDLE).
    return bool(getattr(raw, "autocommit", False)) and status == 0
