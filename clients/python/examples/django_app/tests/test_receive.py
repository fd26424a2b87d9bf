"""The Django example app through Django's test client (real transactions: no TestCase
wrapping each test in one), and the Django adapter's own contract."""

import base64
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
import standardwebhooks
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client
from payments import views
from payments.models import Payment

from inlet_inbox import DEFAULT_PURGE_WINDOW, Claim, TransactionError, Verified, sign
from inlet_inbox.django import claim, process, purge

SECRET = settings.INLET_WEBHOOK_SECRETS[0]


def new_id():
    return f"stripe:evt_{uuid.uuid4().hex}"


def payment(amount=1200):
    return json.dumps(
        {"type": "payment.succeeded", "data": {"customer": "cus_1", "amount": amount}}
    ).encode()


def post(body, headers, client=None):
    client = client or Client(raise_request_exception=False)
    return client.post(
        "/webhooks/inlet", data=body, content_type="application/json", headers=headers
    )


def payments(message_id):
    return Payment.objects.filter(message_id=message_id).count()


def test_a_delivery_signed_by_sign_is_recorded_once():
    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    first, copy = post(body, headers), post(body, headers)
    assert (first.status_code, first.json()) == (200, {"claim": "new"})
    assert (copy.status_code, copy.json()) == (200, {"claim": "duplicate"})
    assert payments(message_id) == 1


def test_a_delivery_signed_by_the_official_library_is_recorded():
    message_id, body = new_id(), payment()
    now = datetime.now(timezone.utc)
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(SECRET).sign(message_id, now, body),
    }
    assert post(body, headers).json() == {"claim": "new"}
    assert payments(message_id) == 1


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: ({**h, "webhook-signature": "v1,"}, b),
        lambda h, b: ({k: v for k, v in h.items() if k != "webhook-timestamp"}, b),
        lambda h, b: (h, b.replace(b"1200", b"9999")),
        lambda h, b: (sign("whsec_" + base64.b64encode(b"w" * 32).decode(), h["webhook-id"], b), b),
        lambda h, b: (sign(SECRET, h["webhook-id"], b, timestamp=int(time.time()) - 301), b),
        lambda h, b: (sign(SECRET, h["webhook-id"], b, timestamp=int(time.time()) + 301), b),
    ],
    ids=["empty-v1", "no-timestamp", "tampered-body", "wrong-secret", "old", "future"],
)
def test_a_delivery_that_does_not_verify_gets_401_and_records_nothing(tamper):
    message_id, body = new_id(), payment()
    headers, sent = tamper(sign(SECRET, message_id, body), body)
    assert post(sent, headers).status_code == 401
    assert payments(message_id) == 0


def test_only_post_is_taken():
    assert Client().get("/webhooks/inlet").status_code == 405


def test_a_crash_after_commit_is_a_500_and_the_redelivery_a_duplicate(monkeypatch):
    real_process = views.process

    def commit_then_crash(*args, **kwargs):
        real_process(*args, **kwargs)  # committed
        raise RuntimeError("died before the answer left")

    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    monkeypatch.setattr(views, "process", commit_then_crash)
    assert post(body, headers).status_code == 500
    monkeypatch.setattr(views, "process", real_process)
    assert post(body, headers).json() == {"claim": "duplicate"}
    assert payments(message_id) == 1


def test_a_rollback_is_a_500_and_the_redelivery_runs(monkeypatch):
    real_record = views.record_payment

    def record_then_fail(delivery):
        real_record(delivery)
        raise RuntimeError("a downstream call failed after the write")

    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    monkeypatch.setattr(views, "record_payment", record_then_fail)
    assert post(body, headers).status_code == 500
    assert payments(message_id) == 0
    monkeypatch.setattr(views, "record_payment", real_record)
    assert post(body, headers).json() == {"claim": "new"}
    assert payments(message_id) == 1


def test_fifty_concurrent_copies_record_once(monkeypatch):
    copies = 50
    message_id, body = new_id(), payment()
    headers = sign(SECRET, message_id, body)
    start = threading.Barrier(copies)
    real_record = views.record_payment

    def slow_record(delivery):
        real_record(delivery)
        time.sleep(0.3)  # hold the transaction while the copies pile up

    monkeypatch.setattr(views, "record_payment", slow_record)

    def one_copy(_):
        try:
            start.wait()
            response = post(body, headers)
            return response.status_code, response.json()["claim"]
        finally:
            connections.close_all()  # this thread's connection

    with ThreadPoolExecutor(copies) as pool:
        answers = list(pool.map(one_copy, range(copies)))
    assert sorted(answers) == [(200, "duplicate")] * (copies - 1) + [(200, "new")]
    assert payments(message_id) == 1


def test_claim_outside_atomic_is_refused():
    with pytest.raises(TransactionError):
        claim(connection, "payments", new_id())


def test_claim_rolls_back_with_the_atomic_block():
    message_id = new_id()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert claim(connection, "payments", message_id) is Claim.NEW
        raise RuntimeError("rolled back")
    with transaction.atomic():
        assert claim(connection, "payments", message_id) is Claim.NEW
    with transaction.atomic():
        assert claim(connection, "payments", message_id) is Claim.DUPLICATE


def test_force_re_runs_and_later_copies_stay_duplicates():
    message_id, body = new_id(), payment()
    delivery = Verified(message_id, 0, body)
    assert process("payments", delivery, views.record_payment) is Claim.NEW
    assert process("payments", delivery, views.record_payment, force=True) is Claim.NEW
    assert post(body, sign(SECRET, message_id, body)).json() == {"claim": "duplicate"}
    assert payments(message_id) == 2


def test_purge_keeps_the_window_and_the_command_runs():
    message_id = new_id()
    with transaction.atomic():
        claim(connection, "purge-test", message_id)
    now = datetime.now(timezone.utc)
    assert purge(connection, now=now + DEFAULT_PURGE_WINDOW - timedelta(hours=1)) == 0
    assert purge(connection, now=now + DEFAULT_PURGE_WINDOW + timedelta(hours=1)) >= 1
    with transaction.atomic():
        assert claim(connection, "purge-test", message_id) is Claim.NEW
    out = StringIO()
    call_command("inlet_inbox_purge", stdout=out)
    assert out.getvalue().startswith("deleted ")


def test_the_migration_reverses_and_applies_again():
    call_command("migrate", "payments", "zero", verbosity=0)
    call_command("migrate", "inlet_inbox", "zero", verbosity=0)
    assert "inlet_inbox" not in connection.introspection.table_names()
    call_command("migrate", verbosity=0)
    assert "inlet_inbox" in connection.introspection.table_names()
