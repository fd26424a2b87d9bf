"""The claim and purge through a DB-API cursor, shared by the adapters whose drivers take
plain SQL with positional parameters (stdlib sqlite3, psycopg, Django's cursor)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Optional

from .inbox import Claim, check_names, claim_statements, purge_cutoff, purge_statement


def claim_with(cursor: Any, placeholder: str, consumer: str, message_id: str, force: bool) -> Claim:
    """Runs the claim's statements on ``cursor``; the insert's row count says who won: 1
    when this transaction inserted, 0 when the key was already committed (or was committed
    by the transaction this one waited for)."""
    check_names(consumer, message_id)
    inserted = 0
    for statement in claim_statements(placeholder, force):
        cursor.execute(statement, (consumer, message_id))
        inserted = cursor.rowcount
    return Claim.NEW if inserted == 1 else Claim.DUPLICATE


def purge_with(
    cursor: Any, placeholder: str, dialect: str, older_than: timedelta, now: Optional[datetime]
) -> int:
    """Deletes the rows claimed before the cutoff; the count deleted."""
    cursor.execute(purge_statement(placeholder), (purge_cutoff(dialect, older_than, now),))
    return cursor.rowcount
