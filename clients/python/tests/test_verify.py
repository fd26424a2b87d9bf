"""Verification: Inlet's published Standard Webhooks vectors, the official
``standardwebhooks`` package as an independent oracle in both directions, and every way a
delivery must be refused — each with the one error type."""

from __future__ import annotations

import base64
import json
import random
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import standardwebhooks

from inlet_inbox import (
    DEFAULT_TOLERANCE,
    MAX_SIGNATURES,
    InboxError,
    InvalidSignature,
    Verified,
    Verifier,
    sign,
    verify,
)

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "signatures.json"
VECTORS = [v for v in json.loads(FIXTURES.read_text())["vectors"] if v["scheme"] == "standard"]

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
NOW = 1_700_000_000
BODY = b'{"type":"invoice.paid","data":{"amount":1200}}'
ID = "stripe:evt_1"


def signed(secret: str = SECRET, message_id: str = ID, body: bytes = BODY, at: int = NOW) -> dict:
    return sign(secret, message_id, body, timestamp=at)


def refused(headers: dict, body: bytes = BODY, secrets=SECRET, now: float = NOW) -> str:
    """The refusal's message, asserting it is the one error type."""
    with pytest.raises(InvalidSignature) as caught:
        verify(secrets, headers, body, now=now)
    assert isinstance(caught.value, InboxError)
    return str(caught.value)


def test_the_published_vectors_are_present():
    # Four at the time of writing: two valid, a list with no match, the list plus a match.
    assert len(VECTORS) >= 4
    assert {v["valid"] for v in VECTORS} == {True, False}


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["source"])
def test_published_vectors(vector):
    body = vector["body"].encode()
    if vector["valid"]:
        delivery = verify(vector["secret"], vector["headers"], body, now=vector["timestamp"])
        assert delivery == Verified(vector["headers"]["webhook-id"], vector["timestamp"], body)
    else:
        refused(vector["headers"], body, vector["secret"], vector["timestamp"])


@pytest.mark.parametrize(
    "vector", [v for v in VECTORS if " " not in v["headers"]["webhook-signature"]]
)
def test_sign_reproduces_the_published_signatures_and_the_oracle_agrees(vector):
    at = vector["timestamp"]
    ours = sign(
        vector["secret"], vector["headers"]["webhook-id"], vector["body"].encode(), timestamp=at
    )
    oracle = standardwebhooks.Webhook(vector["secret"]).sign(
        vector["headers"]["webhook-id"], datetime.fromtimestamp(at, timezone.utc), vector["body"]
    )
    assert ours == {
        k: vector["headers"][k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")
    }
    assert ours["webhook-signature"] == oracle


def random_cases(count: int):
    """Seeded random secrets, ids and bodies, binary bodies and non-UTF-8 bytes included."""
    rng = random.Random(52)
    for _ in range(count):
        secret = "whsec_" + base64.b64encode(rng.randbytes(rng.choice([24, 32, 64]))).decode()
        message_id = f"src{rng.randrange(99)}:evt_{rng.getrandbits(64):x}"
        body = rng.randbytes(rng.randrange(0, 2048))
        yield secret, message_id, body


def test_the_official_library_verifies_what_sign_makes():
    now = int(time.time())  # the official library reads the real clock
    for secret, message_id, body in random_cases(200):
        headers = sign(secret, message_id, body, timestamp=now)
        standardwebhooks.Webhook(secret).verify(body, headers, json_parse=False)


def test_verify_accepts_what_the_official_library_signs_and_refuses_a_tampered_copy():
    for secret, message_id, body in random_cases(200):
        at = datetime.fromtimestamp(NOW, timezone.utc)
        headers = {
            "webhook-id": message_id,
            "webhook-timestamp": str(NOW),
            "webhook-signature": standardwebhooks.Webhook(secret).sign(message_id, at, body),
        }
        assert verify(secret, headers, body, now=NOW).body == body
        tampered = body + b" "
        refused(headers, tampered, secret)
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            # The oracle refuses it too (its clock is real, so sign afresh for it).
            now_headers = dict(headers, **{"webhook-timestamp": str(int(time.time()))})
            now_headers["webhook-signature"] = standardwebhooks.Webhook(secret).sign(
                message_id, datetime.now(timezone.utc), body
            )
            standardwebhooks.Webhook(secret).verify(tampered, now_headers, json_parse=False)


def test_wrong_secret_is_refused():
    assert "no signature matches" in refused(signed(secret=OTHER_SECRET))


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_or_empty_header_is_refused(name):
    headers = signed()
    assert "missing" in refused({k: v for k, v in headers.items() if k != name})
    assert "missing" in refused(dict(headers, **{name: ""}))


def test_no_headers_at_all_is_refused():
    refused({})


@pytest.mark.parametrize(
    "entries",
    [
        "v1,",
        "v1, v1,",
        "v1,=",
        "v1,!!!",
        "v2,{sig}",
        "v1a,{sig}",
        "v1,{sig_short}",
        "v1,{sig}x",
        " ",
        "{sig}",
    ],
)
def test_an_empty_or_malformed_entry_matches_nothing(entries):
    sig = signed()["webhook-signature"][3:]
    headers = dict(signed(), **{"webhook-signature": entries.format(sig=sig, sig_short=sig[:-2])})
    refused(headers)


def test_an_empty_v1_entry_does_not_pass_for_any_body():
    # The bug a published verifier once had: "v1," compared as a prefix matched every body.
    for body in (b"", b"{}", BODY, b"x" * 10_000):
        refused({"webhook-id": ID, "webhook-timestamp": str(NOW), "webhook-signature": "v1,"}, body)


def test_unknown_and_empty_entries_are_skipped_next_to_a_good_one():
    good = signed()["webhook-signature"]
    headers = dict(signed(), **{"webhook-signature": f"v1,  v2,abc v1a,xyz {good}"})
    assert verify(SECRET, headers, BODY, now=NOW).message_id == ID


def test_more_than_the_bound_of_entries_is_refused_even_with_a_good_one():
    good = signed()["webhook-signature"]
    bogus = "v1," + base64.b64encode(b"\0" * 32).decode()
    at_bound = " ".join([bogus] * (MAX_SIGNATURES - 1) + [good])
    verify(SECRET, dict(signed(), **{"webhook-signature": at_bound}), BODY, now=NOW)
    over = bogus + " " + at_bound
    assert "more than 8" in refused(dict(signed(), **{"webhook-signature": over}))


@pytest.mark.parametrize(
    "skew", [-DEFAULT_TOLERANCE.total_seconds(), DEFAULT_TOLERANCE.total_seconds()]
)
def test_the_tolerance_holds_to_the_second_both_ways(skew):
    verify(SECRET, signed(), BODY, now=NOW + skew)


def test_an_old_signature_is_refused():
    assert "tolerance" in refused(signed(at=NOW - 301))


def test_a_future_signature_is_refused():
    assert "tolerance" in refused(signed(at=NOW + 301))


def test_the_tolerance_and_the_clock_are_injectable():
    clock_at = [float(NOW)]
    verifier = Verifier([SECRET], tolerance=timedelta(seconds=10), clock=lambda: clock_at[0])
    headers = signed()
    verifier.verify(headers, BODY)
    clock_at[0] += 11
    with pytest.raises(InvalidSignature):
        verifier.verify(headers, BODY)


def test_a_wrong_signature_is_refused_as_a_mismatch_even_when_old():
    # The signature is checked before the time, as Inlet does: the log says what is wrong.
    assert "no signature matches" in refused(signed(secret=OTHER_SECRET, at=NOW - 10_000))


@pytest.mark.parametrize(
    "value",
    [
        "1e9",
        " 1700000000",
        "1700000000 ",
        "-1",
        "+1700000000",
        "١٧٠٠٠٠٠٠٠٠",
        "1_700_000_000",
        "9" * 13,
    ],
)
def test_a_timestamp_that_is_not_digits_is_refused(value):
    headers = sign(SECRET, ID, BODY, timestamp=NOW)
    refused(dict(headers, **{"webhook-timestamp": value}))


def test_every_secret_in_rotation_verifies():
    both = [OTHER_SECRET, SECRET]
    verify(both, signed(secret=SECRET), BODY, now=NOW)
    verify(both, signed(secret=OTHER_SECRET), BODY, now=NOW)
    refused(signed(secret=SECRET), secrets=[OTHER_SECRET])


def test_a_list_with_the_new_and_old_signatures_verifies_with_either_secret():
    sigs = (
        signed(secret=SECRET)["webhook-signature"]
        + " "
        + signed(secret=OTHER_SECRET)["webhook-signature"]
    )
    headers = dict(signed(), **{"webhook-signature": sigs})
    verify(OTHER_SECRET, headers, BODY, now=NOW)
    verify(SECRET, headers, BODY, now=NOW)


def test_header_names_are_case_insensitive_and_bytes_values_work():
    headers = {k.title(): v.encode() for k, v in signed().items()}
    assert verify(SECRET, headers, BODY, now=NOW).message_id == ID


def test_a_utf8_id_as_servers_decode_it_verifies_and_reads_back_as_text():
    message_id = "shop:évt_ü"
    headers = sign(SECRET, message_id, BODY, timestamp=NOW)
    # ASGI and WSGI decode the bytes Inlet sent (UTF-8) as latin-1.
    as_served = dict(headers, **{"webhook-id": message_id.encode().decode("latin-1")})
    assert verify(SECRET, as_served, BODY, now=NOW).message_id == message_id


def test_the_body_is_bytes_exactly():
    headers = signed()
    refused(headers, BODY.replace(b":", b": "))
    refused(headers, BODY + b"\n")
    with pytest.raises(TypeError):
        verify(SECRET, headers, BODY.decode(), now=NOW)
    assert verify(SECRET, headers, bytearray(BODY), now=NOW).json()["data"]["amount"] == 1200


@pytest.mark.parametrize(
    "secret",
    ["whsec_", "whsec_not base64!", "whsec_" + base64.b64encode(b"k" * 23).decode(), "whsec_YWJj"],
)
def test_weak_or_malformed_secrets_are_refused_at_startup(secret):
    with pytest.raises(ValueError):
        Verifier(secret)


def test_a_secret_without_its_prefix_is_the_same_key():
    verify(SECRET[len("whsec_") :], signed(), BODY, now=NOW)


def test_a_verifier_never_prints_its_keys():
    assert SECRET[6:] not in repr(Verifier(SECRET)) and "1 secret" in repr(Verifier(SECRET))


def test_a_bit_flipped_anywhere_in_the_signature_is_refused():
    good = signed()["webhook-signature"]
    tag = bytearray(base64.b64decode(good[3:]))
    for index in range(len(tag)):
        flipped = bytearray(tag)
        flipped[index] ^= 1
        refused(
            dict(
                signed(), **{"webhook-signature": "v1," + base64.b64encode(bytes(flipped)).decode()}
            )
        )
