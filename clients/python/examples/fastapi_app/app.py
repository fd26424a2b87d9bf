"""An Inlet destination in FastAPI + SQLAlchemy: each payment Inlet delivers is recorded
once, however often it is delivered.

Run it: ``INLET_INBOX_DATABASE_URL=sqlite:///payments.db INLET_WEBHOOK_SECRETS=whsec_...
uvicorn --factory app:from_environment`` and point an Inlet destination (its ``secret``
one of the listed ones; several, space-separated, while rotating) at ``/webhooks/inlet``.

The answers: 200 once the payment and the claim are committed, 200 again for a copy
(``"duplicate"``: nothing done), 401 for a delivery that does not verify, and 500 when
anything fails before the commit, rolled back, so Inlet retries.
"""

# No `from __future__ import annotations`: FastAPI must see the endpoint's Depends(webhook)
# as an object, and `webhook` is local to create_app, out of reach of a string annotation.
import contextlib
import os
from typing import Annotated, AsyncIterator, Sequence

from fastapi import Depends, FastAPI
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from inlet_inbox import Verified, Verifier
from inlet_inbox.fastapi import verified_webhook
from inlet_inbox.sqlalchemy import create_table, process

PAYMENTS = """CREATE TABLE IF NOT EXISTS payments (
    message_id text    NOT NULL,
    customer   text    NOT NULL,
    amount     integer NOT NULL
)"""


def record_payment(session: Session, delivery: Verified) -> None:
    """The application's effect: runs inside the claim's transaction."""
    event = delivery.json()
    session.execute(
        text("INSERT INTO payments (message_id, customer, amount) VALUES (:m, :c, :a)"),
        {"m": delivery.message_id, "c": event["data"]["customer"], "a": event["data"]["amount"]},
    )


def create_app(database_url: str, secrets: Sequence[str]) -> FastAPI:
    """The app on its database; the inbox and payments tables are made if missing."""
    engine = create_engine(database_url, connect_args=_connect_args(database_url))
    create_table(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql(PAYMENTS)
    sessions = sessionmaker(engine)
    webhook = verified_webhook(Verifier(secrets))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()  # close pooled connections when the app stops

    app = FastAPI(lifespan=lifespan)

    @app.post("/webhooks/inlet")
    def receive(delivery: Annotated[Verified, Depends(webhook)]) -> dict:
        # Returns after the commit; any exception is a 500 and a rollback.
        claim = process(sessions, "payments", delivery, record_payment)
        return {"claim": claim.value}

    return app


def from_environment() -> FastAPI:
    """``uvicorn --factory``: the database URL and the secrets from the environment."""
    return create_app(
        os.environ["INLET_INBOX_DATABASE_URL"], os.environ["INLET_WEBHOOK_SECRETS"].split()
    )


def _connect_args(database_url: str) -> dict:
    # SQLite: wait up to 30 s for the write lock, so a concurrent copy waits its turn.
    return {"timeout": 30, "check_same_thread": False} if database_url.startswith("sqlite") else {}
