"""The README's handler is the real thing: under 25 lines, and it runs and dedupes on both
databases."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from pathlib import Path
from typing import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from databases import DATABASES, scratch_postgres
from inlet_inbox import sign
from inlet_inbox.sqlalchemy import create_table

README = Path(__file__).resolve().parents[1] / "README.md"
SECRET = "whsec_" + base64.b64encode(b"the readme's secret, of 32 bytes").decode()


def handler_code() -> str:
    text_ = README.read_text()
    return re.search(r"## The whole handler.*?```python\n(.*?)```", text_, re.S).group(1)


def test_the_readme_handler_is_under_25_lines():
    assert len(handler_code().splitlines()) < 25


@contextlib.contextmanager
def sqlalchemy_url(dialect: str, tmp_path: Path) -> Iterator[str]:
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'readme.db'}"
        return
    with scratch_postgres("inlet_inbox_readme") as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.mark.parametrize("dialect", DATABASES)
def test_the_readme_handler_records_a_payment_once(
    dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    with sqlalchemy_url(dialect, tmp_path) as url:
        engine = create_engine(url)
        create_table(engine)
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE payments (customer TEXT, amount INTEGER)")
        monkeypatch.setenv("DATABASE_URL", url)
        monkeypatch.setenv("INLET_SECRETS", SECRET)
        namespace: dict = {}
        exec(compile(handler_code(), str(README), "exec"), namespace)
        body = json.dumps({"type": "payment.succeeded", "data": {"customer": "c", "amount": 5}})
        headers = sign(SECRET, "stripe:evt_readme", body.encode())
        with TestClient(namespace["app"]) as client:
            answers = [
                client.post("/webhooks/inlet", content=body, headers=headers).json()
                for _ in range(2)
            ]
        assert answers == [{"claim": "new"}, {"claim": "duplicate"}]
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM payments")).scalar_one() == 1
        namespace["sessions"].kw["bind"].dispose()
        engine.dispose()
