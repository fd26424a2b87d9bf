"""The FastAPI example app, driven through its test client on both databases, with
deliveries signed by the library's ``sign`` and by the official ``standardwebhooks``."""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import standardwebhooks
from fastapi.testclient import TestClient

from inlet_inbox import sign

APP_PATH = Path(__file__).resolve().parents[1] / "examples" / "fastapi_app" / "app.py"
SECRET = "whsec_" + base64.b64encode(b"fastapi example secret, 32 bytes").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"the secret before the rotation!!").decode()


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("fastapi_example_app", APP_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example() -> Any:
    """A fresh copy of the module, so a test's monkeypatching stays its own."""
    return load_example()


@pytest.fixture
def client(example: Any, database: Any) -> Iterator[TestClient]:
    app = example.create_app(database.sqlalchemy_url, [SECRET, OLD_SECRET])
    # raise_server_exceptions=False: see the 500 Inlet would see.
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def payment(customer: str = "cus_1", amount: int = 1200) -> bytes:
    return json.dumps(
        {"type": "payment.succeeded", "data": {"customer": customer, "amount": amount}}
    ).encode()


def new_id() -> str:
    return f"stripe:evt_{uuid.uuid4().hex}"


def post(client: TestClient, body: bytes, headers: dict) -> Any:
    return client.post(
        "/webhooks/inlet", content=body, headers={**headers, "content-type": "application/json"}
    )


def payments(database: Any, message_id: str) -> int:
    return database.count("SELECT count(*) FROM payments WHERE message_id = :m", m=message_id)


def test_a_delivery_signed_by_sign_is_recorded_once(client: TestClient, database: Any):
    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    first, copy = post(client, body, headers), post(client, body, headers)
    assert (first.status_code, first.json()) == (200, {"claim": "new"})
    assert (copy.status_code, copy.json()) == (200, {"claim": "duplicate"})
    assert payments(database, message_id) == 1


def test_a_delivery_signed_by_the_official_library_is_recorded(client: TestClient, database: Any):
    message_id, body = new_id(), payment()
    webhook = standardwebhooks.Webhook(OLD_SECRET)  # a secret still in rotation
    now = datetime.now(timezone.utc)
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": webhook.sign(message_id, now, body),
    }
    assert post(client, body, headers).json() == {"claim": "new"}
    assert payments(database, message_id) == 1


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: ({**h, "webhook-signature": "v1,"}, b),
        lambda h, b: ({k: v for k, v in h.items() if k != "webhook-signature"}, b),
        lambda h, b: ({k: v for k, v in h.items() if k != "webhook-id"}, b),
        lambda h, b: (h, b.replace(b"1200", b"9999")),
        lambda h, b: (sign("whsec_" + base64.b64encode(b"w" * 32).decode(), h["webhook-id"], b), b),
        lambda h, b: (sign(SECRET, h["webhook-id"], b, timestamp=int(time.time()) - 301), b),
        lambda h, b: (sign(SECRET, h["webhook-id"], b, timestamp=int(time.time()) + 301), b),
    ],
    ids=["empty-v1", "no-signature", "no-id", "tampered-body", "wrong-secret", "old", "future"],
)
def test_a_delivery_that_does_not_verify_gets_401_and_records_nothing(
    client: TestClient, database: Any, tamper: Any
):
    message_id, body = new_id(), payment()
    headers, sent = tamper(sign(SECRET, message_id, body), body)
    assert post(client, sent, headers).status_code == 401
    assert payments(database, message_id) == 0


def test_a_crash_after_commit_is_a_500_and_the_redelivery_a_duplicate(
    example: Any, client: TestClient, database: Any, monkeypatch: pytest.MonkeyPatch
):
    real_process = example.process

    def commit_then_crash(*args: Any, **kwargs: Any) -> Any:
        real_process(*args, **kwargs)  # committed
        raise RuntimeError("died before the answer left")

    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    monkeypatch.setattr(example, "process", commit_then_crash)
    assert post(client, body, headers).status_code == 500
    monkeypatch.setattr(example, "process", real_process)
    assert post(client, body, headers).json() == {"claim": "duplicate"}
    assert payments(database, message_id) == 1


def test_a_rollback_is_a_500_and_the_redelivery_runs(
    example: Any, client: TestClient, database: Any, monkeypatch: pytest.MonkeyPatch
):
    real_record = example.record_payment

    def record_then_fail(session: Any, delivery: Any) -> None:
        real_record(session, delivery)
        raise RuntimeError("a downstream call failed after the write")

    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    monkeypatch.setattr(example, "record_payment", record_then_fail)
    assert post(client, body, headers).status_code == 500
    assert payments(database, message_id) == 0
    monkeypatch.setattr(example, "record_payment", real_record)
    assert post(client, body, headers).json() == {"claim": "new"}
    assert payments(database, message_id) == 1


def test_concurrent_copies_through_the_app_record_once(client: TestClient, database: Any):
    copies = 20
    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    start = threading.Barrier(copies)

    def one_copy(_: int) -> Any:
        start.wait()
        response = post(client, body, headers)
        return response.status_code, response.json()["claim"]

    with ThreadPoolExecutor(copies) as pool:
        answers = list(pool.map(one_copy, range(copies)))
    assert sorted(answers) == [(200, "duplicate")] * (copies - 1) + [(200, "new")]
    assert payments(database, message_id) == 1
