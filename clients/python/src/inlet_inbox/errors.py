"""The errors the library raises: one base, and one type for every delivery that does not
verify, so a web adapter maps a single exception to its refusal and never leaks which check
failed to the sender."""


class InboxError(Exception):
    """Base of every error raised by ``inlet_inbox``."""


class InvalidSignature(InboxError):
    """The delivery does not verify: a header is missing or malformed, no signature matches
    any secret, or the signed time is outside the tolerance. The message says which, for the
    application's logs; the answer to the sender should not."""


class TransactionError(InboxError):
    """The inbox was used where its transaction guarantee cannot hold: ``claim`` on an
    autocommit connection outside a transaction (its insert would commit on its own, apart
    from the handler's writes), or ``process`` on a connection that already has a
    transaction open (its commit would not be the one that ends the work)."""
