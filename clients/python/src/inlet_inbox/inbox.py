"""The inbox: one row per (consumer, message id) in the application's own database, claimed
inside the transaction that applies the message, so the handler's writes and the claim
commit together or not at all.

Why this closes Inlet's last hop: Inlet delivers at least once (a lost 2xx is retried, an
operator's replay sends the same ``webhook-id`` again). The claim is an ``INSERT … ON
CONFLICT DO NOTHING`` on the primary key: the first transaction inserts and runs the
handler; a later delivery finds the committed row and is a duplicate; a concurrent one
waits on the key until the first commits (then it is a duplicate) or rolls back (then it
inserts and runs). A crash before the commit leaves no row, so the retry runs the handler;
a crash after it leaves the row, so the retry is a duplicate.

This module holds what every adapter shares: the table's DDL per dialect, the statements,
the purge window, and :func:`claim` / :func:`purge`, which hand the connection to the
adapter of its kind (SQLAlchemy, psycopg, Django, or a stdlib ``sqlite3`` connection).
"""

from __future__ import annotations

import enum
import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Tuple

from .errors import TransactionError

#: The table every adapter uses.
TABLE = "inlet_inbox"

#: How long a claimed row is kept. A row is what makes a late copy a duplicate, so it must
#: outlive the last copy Inlet can send. The latest: an operator replays an event on the
#: last day Inlet keeps it (``retention.events``, default 35 days); that delivery fails
#: until its ``deadline`` (default 3 days) and becomes a dead letter, which keeps its own
#: copy of the payload and can be requeued for ``retention.dead_letters`` after it died
#: (default 30 days), even once the event itself is swept: 68 days after the claim by
#: default. So the window must be longer than ``retention.events + deadline +
#: retention.dead_letters``; 75 days leaves a week of margin over the defaults. Raise it
#: with any of the three. (A requeued dead letter that dies again starts its 30 days
#: afresh: an operator requeueing the same letter over months outruns any window.)
DEFAULT_PURGE_WINDOW = timedelta(days=75)

#: The shortest window :func:`purge` accepts: a floor against a unit mistake (seconds for
#: days), not a safe value. Safe is longer than ``retention.events + deadline +
#: retention.dead_letters``.
MIN_PURGE_WINDOW = timedelta(days=1)

_DIALECTS = {"postgresql": "postgresql", "postgres": "postgresql", "sqlite": "sqlite"}

_DDL = {
    "postgresql": (
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
)""",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_claimed_at ON {TABLE} (claimed_at)",
    ),
    # SQLite keeps the time as UTC text ('YYYY-MM-DD HH:MM:SS'), which sorts as it reads.
    "sqlite": (
        f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    consumer   TEXT NOT NULL,
    message_id TEXT NOT NULL,
    claimed_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (consumer, message_id)
)""",
        f"CREATE INDEX IF NOT EXISTS {TABLE}_claimed_at ON {TABLE} (claimed_at)",
    ),
}


class Claim(enum.Enum):
    """What a claim found: ``NEW`` — this transaction owns the message, run the handler;
    ``DUPLICATE`` — a committed transaction already applied it, answer 2xx and do nothing."""

    NEW = "new"
    DUPLICATE = "duplicate"


def dialect_of(name: str) -> str:
    """The canonical dialect name (``postgresql`` or ``sqlite``); others are refused, since
    the claim relies on ``ON CONFLICT DO NOTHING``."""
    try:
        return _DIALECTS[name.lower()]
    except KeyError:
        raise ValueError(f"inlet_inbox supports postgresql and sqlite, not {name!r}") from None


def ddl(dialect: str) -> Tuple[str, ...]:
    """The statements that create the inbox table and its purge index, one per item (so
    drivers that run one statement at a time can take them); idempotent."""
    return _DDL[dialect_of(dialect)]


def claim_statements(placeholder: str, force: bool) -> Tuple[str, ...]:
    """The claim as SQL with the driver's placeholders (``%s``, ``?``, or ``:consumer`` and
    ``:message_id`` when ``placeholder`` is ``":"``); each takes (consumer, message_id).

    ``force`` deletes the row first, in the same transaction: the message is claimed again
    under its own ``webhook-id``, so later copies of it still count as duplicates.
    """
    consumer, message_id = _placeholders(placeholder)
    insert = (
        f"INSERT INTO {TABLE} (consumer, message_id) VALUES ({consumer}, {message_id}) "
        "ON CONFLICT DO NOTHING"
    )
    if not force:
        return (insert,)
    delete = f"DELETE FROM {TABLE} WHERE consumer = {consumer} AND message_id = {message_id}"
    return (delete, insert)


def purge_statement(placeholder: str) -> str:
    """Deletes the rows claimed before a cutoff (one parameter)."""
    cutoff = ":cutoff" if placeholder == ":" else placeholder
    return f"DELETE FROM {TABLE} WHERE claimed_at < {cutoff}"


def purge_cutoff(dialect: str, older_than: timedelta, now: Optional[datetime]) -> Any:
    """The purge's cutoff as the dialect stores ``claimed_at``. ``now`` is injectable so a
    test moves time instead of waiting 75 days."""
    if older_than < MIN_PURGE_WINDOW:
        raise ValueError(
            f"a purge window of {older_than} is shorter than {MIN_PURGE_WINDOW}; it must "
            "exceed Inlet's retention.events + deadline + retention.dead_letters (68 days by "
            "default)"
        )
    moment = _utc(now or datetime.now(timezone.utc)) - older_than
    if dialect_of(dialect) == "sqlite":
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment


def check_names(consumer: str, message_id: str) -> None:
    """Refuses empty keys: every message claimed under an empty id would be one message."""
    for label, value in (("consumer", consumer), ("message_id", message_id)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{label} must be a non-empty string")


def claim(conn: Any, consumer: str, message_id: str, *, force: bool = False) -> Claim:
    """Claims ``message_id`` for ``consumer`` inside the caller's open transaction.

    ``conn``: a SQLAlchemy ``Session`` or ``Connection``, a psycopg 3 connection, a Django
    connection (``django.db.connection``), or a ``sqlite3`` connection. Nothing is committed
    here: the caller commits the claim with the handler's writes. ``force=True`` re-runs a
    message on purpose (see :func:`claim_statements`).
    """
    return _adapter(conn).claim(conn, consumer, message_id, force=force)


def purge(
    conn: Any,
    *,
    older_than: timedelta = DEFAULT_PURGE_WINDOW,
    now: Optional[datetime] = None,
) -> int:
    """Deletes rows claimed more than ``older_than`` ago (default
    :data:`DEFAULT_PURGE_WINDOW`, which must exceed Inlet's ``retention.events + deadline +
    retention.dead_letters``) within the
    caller's transaction; returns how many."""
    return _adapter(conn).purge(conn, older_than=older_than, now=now)


def _adapter(conn: Any) -> Any:
    """The adapter module for a connection, imported only when used, so the core needs none
    of the optional packages."""
    if isinstance(conn, sqlite3.Connection):
        from . import sqlite

        return sqlite
    root = type(conn).__module__.split(".")[0]
    if root == "sqlalchemy":
        from . import sqlalchemy

        return sqlalchemy
    if root == "psycopg":
        from . import psycopg

        return psycopg
    if root == "django":
        from .django import inbox

        return inbox
    raise TypeError(f"inlet_inbox cannot claim through a {type(conn).__qualname__}")


def _utc(moment: datetime) -> datetime:
    """An aware UTC time; a naive one is taken as UTC already (never as local time)."""
    return moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _placeholders(placeholder: str) -> Tuple[str, str]:
    """The two parameters' markers in the driver's style."""
    if placeholder == ":":
        return ":consumer", ":message_id"
    return placeholder, placeholder


def not_in_transaction(kind: str) -> TransactionError:
    """The refusal of a claim whose insert would autocommit on its own."""
    return TransactionError(
        f"claim needs an open transaction on the {kind} connection: in autocommit mode the "
        "claim would commit before the handler's writes"
    )


def already_in_transaction(kind: str) -> TransactionError:
    """The refusal of a ``process`` that could not own its transaction: its commit would
    not be the one that makes the work durable, so its 2xx could come too early."""
    return TransactionError(
        f"process needs the {kind} connection with no transaction open, to begin and "
        "commit its own before the answer"
    )
