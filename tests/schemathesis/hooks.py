"""Schemathesis hooks for scripts/check-api: what the OpenAPI document states in prose
but cannot express as a schema, supplied the way a real client would.

- Every well-formed Idempotency-Key a case carries is replaced by a fresh one. Generated
  keys repeat ("0" is a favourite), and a key used again with another body is rightly
  422 (idempotency_key_reused); a malformed key (a negative case) is left as generated.
- A replay or bulk request that acts (dry_run not true) needs an Idempotency-Key: OpenAPI
  cannot make a header depend on a body field, so such a case without one gets a fresh
  key (the header is optional in the document, so no check relies on its absence).
- Half of the evaluations name an event that is stored (scripts/check-api stores
  evt_check_1 to 3 of source stripe), chosen by the case's own text so a seed replays
  it, so the run reaches the filters and transforms and not only 404.
- Half of the webhooks go to the stored source (stripe) signed as Stripe signs, with the
  secret scripts/check-api exports, so the run reaches ingest and not only 404 or 401:
  a JSON body with an id is stored (200), anything else is refused for its body (400).
"""

import hashlib
import hmac
import os
import re
import time
import uuid
import zlib

import schemathesis

KEY = re.compile(r"[!-~]{1,255}")
KEYED_WHEN_ACTING = {"/admin/replay", "/admin/bulk"}
STORED = ["evt_check_1", "evt_check_2", "evt_check_3"]


def _name_a_stored_event(case):
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("event_id"), str):
        return
    choice = zlib.crc32(body["event_id"].encode("utf-8", "surrogatepass")) % (2 * len(STORED))
    if choice < len(STORED) and isinstance(body.get("source"), str):
        body["source"], body["event_id"] = "stripe", STORED[choice]


def _sign_as_stripe(case):
    secret = os.environ.get("INLET_CHECK_STRIPE_SECRET")
    body = case.body
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    if not secret or not isinstance(body, bytes) or zlib.crc32(body) % 2:
        return
    case.path_parameters = {**(case.path_parameters or {}), "source": "stripe"}
    case.body = body
    stamp = int(time.time())
    mac = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    case.headers["Stripe-Signature"] = f"t={stamp},v1={mac}"


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    headers = case.headers if case.headers is not None else {}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and KEY.fullmatch(key):
        headers["Idempotency-Key"] = uuid.uuid4().hex
    elif key is None and case.operation.path in KEYED_WHEN_ACTING:
        body = case.body if isinstance(case.body, dict) else {}
        if body.get("dry_run") is not True:
            headers["Idempotency-Key"] = uuid.uuid4().hex
    case.headers = headers
    if case.operation.path == "/webhooks/{source}":
        _sign_as_stripe(case)
    if case.operation.path == "/admin/evaluate":
        _name_a_stored_event(case)
