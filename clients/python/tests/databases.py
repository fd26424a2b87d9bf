"""Where the test databases are: PostgreSQL at ``INLET_INBOX_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, trust auth) and a scratch database per
use, dropped after; ``skip`` as the value leaves PostgreSQL out on purpose."""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

POSTGRES_ADMIN = os.environ.get(
    "INLET_INBOX_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
DATABASES = ["sqlite"] + ([] if POSTGRES_ADMIN == "skip" else ["postgresql"])


@contextlib.contextmanager
def scratch_postgres(prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL database for the duration of the block (its libpq URL); dropped
    after, with any connection left open."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(POSTGRES_ADMIN)._replace(path="/" + name))
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
