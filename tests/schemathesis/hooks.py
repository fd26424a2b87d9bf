"""Schemathesis hooks for scripts/check-api: what the OpenAPI document states in prose
but cannot express as a schema, supplied the way a real client would. Every change is
made by assigning the case's container anew, so schemathesis revalidates the case (a
negative case a hook made valid is judged as valid).

- Every well-formed Idempotency-Key a case carries is replaced by a fresh one. Generated
  keys repeat ("0" is a favourite), and a key used again with another body is rightly
  422 (idempotency_key_reused); a malformed key (a negative case) is left as generated.
- A replay or bulk request that acts (dry_run not true) needs an Idempotency-Key: OpenAPI
  cannot make a header depend on a body field, so such a case without one gets a fresh
  key (the header is optional in the document, so no check relies on its absence).
- Names must be configured ones (configuration is not in the document): a bulk filter's
  and an evaluation's `source` and `destination`, when they are valid text, become the
  configured `stripe` and `app` or null, a hook-secret clear's `source` the configured
  `asana` (a source of another scheme is 400, as documented); half of the evaluations name a stored event
  (scripts/check-api stores evt_check_1 to 3). Choices follow the case's own text, so a
  seed replays them.
- Webhooks are sent as generated: none carries a valid signature, so the run checks the
  route's refusals. (Signing some in a hook would make schemathesis's auth checks judge
  requests the hook repaired, and they want 401 where DESIGN.md answers a missing
  signature 400; signatures are the chaos suite's signature fuzzer's domain.)
"""

import re
import uuid
import zlib

import schemathesis

KEY = re.compile(r"[!-~]{1,255}")
TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f]{0,255}")
KEYED_WHEN_ACTING = {"/admin/replay", "/admin/bulk"}
STORED = ["evt_check_1", "evt_check_2", "evt_check_3"]
CONFIGURED = {"source": "stripe", "destination": "app"}


def _pick(text, choices):
    return choices[zlib.crc32(str(text).encode("utf-8", "surrogatepass")) % len(choices)]


def _configured_names(fields):
    """`fields` with each valid source or destination a configured name or null."""
    named = dict(fields)
    for name, configured in CONFIGURED.items():
        value = named.get(name)
        if isinstance(value, str) and TEXT.fullmatch(value):
            named[name] = _pick(value, [configured, None])
    return named


def _name_a_stored_event(body):
    event_id = body.get("event_id")
    if isinstance(event_id, str) and isinstance(body.get("source"), str):
        choice = _pick(event_id, STORED + [None] * len(STORED))
        if choice is not None:
            body["source"], body["event_id"] = "stripe", choice
    return body


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    headers = dict(case.headers or {})
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and KEY.fullmatch(key):
        headers["Idempotency-Key"] = uuid.uuid4().hex
    elif key is None and case.operation.path in KEYED_WHEN_ACTING:
        body = case.body if isinstance(case.body, dict) else {}
        if body.get("dry_run") is not True:
            headers["Idempotency-Key"] = uuid.uuid4().hex
    case.headers = headers
    path = case.operation.path
    if path == "/admin/evaluate" and isinstance(case.body, dict):
        case.body = _name_a_stored_event(_configured_names(case.body))
    elif path == "/admin/hook-secrets/clear" and isinstance(case.body, dict):
        # The document says the source is one whose secret a handshake establishes.
        source = case.body.get("source")
        if isinstance(source, str) and TEXT.fullmatch(source):
            case.body = {**case.body, "source": "asana"}
    elif path == "/admin/bulk" and isinstance(case.body, dict):
        if isinstance(case.body.get("filter"), dict):
            case.body = {**case.body, "filter": _configured_names(case.body["filter"])}
