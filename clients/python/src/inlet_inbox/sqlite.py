"""The inbox on a stdlib ``sqlite3`` connection: no dependency at all.

A concurrent duplicate waits (up to the connection's ``timeout``) for the write lock and
then sees the first transaction's row, provided the claim is the first statement of its
transaction, or the transaction began IMMEDIATE: :func:`process` does both. A deferred
transaction that read before claiming holds a snapshot the winner's commit makes stale and
fails "database is locked" instead (safe — the delivery answers 5xx and Inlet's retry is a
duplicate — but noisy).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Callable, Optional

from ._dbapi import claim_with, purge_with
from .inbox import DEFAULT_PURGE_WINDOW, Claim, already_in_transaction, ddl, not_in_transaction
from .verify import Verified


def create_table(conn: sqlite3.Connection) -> None:
    """Creates the inbox table if it is missing (and commits, as DDL should stand alone)."""
    with conn:
        for statement in ddl("sqlite"):
            conn.execute(statement)


def claim(
    conn: sqlite3.Connection, consumer: str, message_id: str, *, force: bool = False
) -> Claim:
    """Claims inside the connection's transaction (begun here by the module if none is
    open); an autocommit connection outside ``BEGIN`` is refused."""
    if conn.isolation_level is None and not conn.in_transaction:
        raise not_in_transaction("sqlite3")
    return claim_with(conn.cursor(), "?", consumer, message_id, force)


def purge(
    conn: sqlite3.Connection,
    *,
    older_than: timedelta = DEFAULT_PURGE_WINDOW,
    now: Optional[datetime] = None,
) -> int:
    """Deletes rows older than the window within the caller's transaction."""
    return purge_with(conn.cursor(), "?", "sqlite", older_than, now)


def process(
    conn: sqlite3.Connection,
    consumer: str,
    delivery: Verified,
    handler: Callable[[sqlite3.Connection, Verified], object],
    *,
    force: bool = False,
) -> Claim:
    """Claims and runs ``handler`` in one transaction and returns once it is committed:
    the caller answers 2xx on return, 5xx on an exception (rolled back, so Inlet's retry
    runs it again).

    It begins the transaction itself with ``BEGIN IMMEDIATE`` (the write lock at once),
    whatever the connection's isolation level.
    """
    if conn.in_transaction:
        # Committing here would commit the caller's unrelated work too; refuse instead.
        raise already_in_transaction("sqlite3")
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = claim(conn, consumer, delivery.message_id, force=force)
        if found is Claim.NEW:
            handler(conn, delivery)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found
