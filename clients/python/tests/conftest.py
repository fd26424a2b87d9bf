"""One suite, run once per database: every test that takes ``database`` runs on SQLite (a
temporary file, in WAL mode) and on PostgreSQL (a scratch database made for this session
and dropped after it; see ``databases.py``). An unreachable PostgreSQL fails its tests
rather than skipping them, so a green run means both databases ran.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

import inlet_inbox.sqlalchemy as inbox_sqlalchemy
from databases import DATABASES, scratch_postgres

# The application's own table in the tests: no unique key, on purpose, so a handler that
# ran twice shows as two rows. Only the inbox keeps it to one.
LEDGER = (
    "CREATE TABLE IF NOT EXISTS ledger"
    " (consumer TEXT NOT NULL, message_id TEXT NOT NULL, amount INTEGER NOT NULL)"
)


@dataclass
class Database:
    """A test database: its dialect, a SQLAlchemy engine (no pool, so each thread has its
    own connection) and how to open a raw driver connection."""

    dialect: str
    sqlalchemy_url: str
    driver_target: str  # a file path (sqlite) or a libpq URL (postgresql)
    engine: Engine

    def connect(self, **options: Any) -> Any:
        """A new raw driver connection: sqlite3 (waiting up to 30 s on the write lock) or
        psycopg."""
        if self.dialect == "sqlite":
            options.setdefault("timeout", 30)
            return sqlite3.connect(self.driver_target, check_same_thread=False, **options)
        return psycopg.connect(self.driver_target, **options)

    def count(self, query: str, **params: Any) -> int:
        """One number from a fresh connection: what is committed, not what a test holds."""
        with self.engine.connect() as connection:
            return connection.execute(text(query), params).scalar_one()


def _engine(url: str, dialect: str) -> Engine:
    connect_args = {"timeout": 30} if dialect == "sqlite" else {}
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)


@contextlib.contextmanager
def _database(dialect: str, tmp_dir: Path) -> Iterator[Database]:
    if dialect == "sqlite":
        path = tmp_dir / "inbox.db"
        # WAL, as most SQLite deployments run: the mode where a deferred transaction's
        # stale snapshot fails instead of waiting, so the tests see that case.
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
        yield _prepared(
            Database(
                "sqlite", f"sqlite:///{path}", str(path), _engine(f"sqlite:///{path}", "sqlite")
            )
        )
        return
    with scratch_postgres("inlet_inbox_test") as url:
        sa_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
        database = _prepared(Database("postgresql", sa_url, url, _engine(sa_url, "postgresql")))
        try:
            yield database
        finally:
            database.engine.dispose()


def _prepared(database: Database) -> Database:
    """Creates the inbox (through the library, as an application would) and the ledger."""
    inbox_sqlalchemy.create_table(database.engine)
    with database.engine.begin() as connection:
        connection.exec_driver_sql(LEDGER)
    return database


@pytest.fixture(scope="session", params=DATABASES)
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    with _database(request.param, tmp_path_factory.mktemp(request.param)) as prepared:
        yield prepared


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Iterator[Database]:
    """A SQLite database of its own, for the tests of SQLite's locking alone."""
    with _database("sqlite", tmp_path) as prepared:
        yield prepared


@pytest.fixture
def message_id() -> str:
    """A fresh Inlet-shaped webhook-id (``<source>:<event id>``), so tests share tables
    without cleaning them."""
    return f"stripe:evt_{uuid.uuid4().hex}"
