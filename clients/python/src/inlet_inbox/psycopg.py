"""The inbox on a psycopg 3 connection (PostgreSQL).

The claim runs in the connection's transaction: psycopg opens one implicitly on the first
statement unless the connection is in autocommit mode, where the claim must sit inside
``with conn.transaction():``. Under READ COMMITTED (PostgreSQL's default) a concurrent
duplicate blocks on the primary key until the first transaction ends, then sees its row;
under REPEATABLE READ or SERIALIZABLE it gets a serialization failure instead, which
answers 5xx, and Inlet's retry then finds the row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable, Optional

from psycopg import pq

from ._dbapi import claim_with, purge_with
from .inbox import DEFAULT_PURGE_WINDOW, Claim, already_in_transaction, ddl, not_in_transaction
from .verify import Verified

_IDLE = pq.TransactionStatus.IDLE


def create_table(conn: Any) -> None:
    """Creates the inbox table and its index if missing, in their own transaction."""
    with conn.transaction():
        for statement in ddl("postgresql"):
            conn.execute(statement)


def claim(conn: Any, consumer: str, message_id: str, *, force: bool = False) -> Claim:
    """Claims inside the connection's transaction; refused on an autocommit connection with
    no transaction block open (the insert would commit alone)."""
    if conn.autocommit and conn.info.transaction_status == _IDLE:
        raise not_in_transaction("psycopg")
    with conn.cursor() as cursor:
        return claim_with(cursor, "%s", consumer, message_id, force)


def purge(
    conn: Any,
    *,
    older_than: timedelta = DEFAULT_PURGE_WINDOW,
    now: Optional[datetime] = None,
) -> int:
    """Deletes rows older than the window, in the caller's transaction (or at once on an
    autocommit connection); the count deleted."""
    with conn.cursor() as cursor:
        return purge_with(cursor, "%s", "postgresql", older_than, now)


def process(
    conn: Any,
    consumer: str,
    delivery: Verified,
    handler: Callable[[Any, Verified], object],
    *,
    force: bool = False,
) -> Claim:
    """Claims and runs ``handler(conn, delivery)`` in one transaction and returns only once
    it is committed: answer 2xx on return, 5xx on an exception (rolled back, so Inlet's
    retry runs the handler again). A duplicate returns at once without the handler."""
    if conn.info.transaction_status != _IDLE:
        # conn.transaction() would then be a savepoint and its exit no commit.
        raise already_in_transaction("psycopg")
    with conn.transaction():
        found = claim(conn, consumer, delivery.message_id, force=force)
        if found is Claim.NEW:
            handler(conn, delivery)
    return found
