"""Exactly once into the application: verify an Inlet delivery (Standard Webhooks) and
claim its ``webhook-id`` in the application's own transaction, so the handler's writes and
the claim commit together and every copy after the first is a duplicate.

The core needs nothing beyond the standard library; the adapters need their extra:
``inlet_inbox.sqlalchemy``, ``inlet_inbox.psycopg``, ``inlet_inbox.django`` and
``inlet_inbox.fastapi`` (``inlet_inbox.sqlite`` needs nothing)."""

from .errors import InboxError, InvalidSignature, TransactionError
from .inbox import (
    DEFAULT_PURGE_WINDOW,
    MIN_PURGE_WINDOW,
    TABLE,
    Claim,
    claim,
    ddl,
    purge,
)
from .verify import DEFAULT_TOLERANCE, MAX_SIGNATURES, Verified, Verifier, sign, verify

__version__ = "0.1.0"

__all__ = [
    "Claim",
    "DEFAULT_PURGE_WINDOW",
    "DEFAULT_TOLERANCE",
    "InboxError",
    "InvalidSignature",
    "MAX_SIGNATURES",
    "MIN_PURGE_WINDOW",
    "TABLE",
    "TransactionError",
    "Verified",
    "Verifier",
    "claim",
    "ddl",
    "purge",
    "sign",
    "verify",
]
