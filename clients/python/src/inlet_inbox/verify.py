"""Verifies a delivery exactly as Inlet signs it (Standard Webhooks, ``v1``): HMAC-SHA256,
keyed with the bytes after ``whsec_``, over ``"{webhook-id}.{webhook-timestamp}.{body}"``
and sent base64 in ``webhook-signature``, a space-separated list of ``v1,<base64>`` entries.

The rules follow Inlet's own verifier (``src/signature/standard.rs``): the raw body bytes,
every secret tried against every entry in constant time, an entry decoded only when it has
the exact length of a signature (so ``v1,`` alone, or a truncated one, can never match), at
most eight entries, and the signed time within a tolerance in both directions, checked
against an injectable clock. Every way a delivery can fail raises :class:`InvalidSignature`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Tuple, Union

from .errors import InvalidSignature

#: How far the signed time may be from now, either way (the specification's 5 minutes).
DEFAULT_TOLERANCE = timedelta(minutes=5)

#: The most entries one ``webhook-signature`` may list (Inlet's own bound): a long hostile
#: list then costs no more than a short one.
MAX_SIGNATURES = 8

#: The fewest bytes of a signing key: the specification's minimum, which Inlet enforces on
#: every destination secret (``whsec_`` alone would be an empty key anyone can sign with).
MIN_KEY_BYTES = 24

_SECRET_PREFIX = "whsec_"
_TAG_BYTES = 32  # an HMAC-SHA256 tag
_TAG_CHARS = 44  # its padded base64: the only length worth decoding
_TIMESTAMP = re.compile(rb"[0-9]{1,12}")  # Unix seconds, as Inlet writes them

HeaderValue = Union[str, bytes]
Secrets = Union[str, Sequence[str]]
#: A clock answers the current Unix time in seconds (``time.time``).
Clock = Callable[[], float]


@dataclass(frozen=True)
class Verified:
    """A delivery whose signature held. Handlers take this type, not a request, so an
    unverified body cannot reach them; ``message_id`` is Inlet's ``webhook-id``
    (``<source>:<event id>``, the same on every retry, requeue and replay): the inbox key."""

    message_id: str
    timestamp: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON, only now that its bytes are known to be Inlet's."""
        return json.loads(self.body)


def signing_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret (the prefix is optional, as in Inlet).

    Raises ``ValueError`` (a configuration mistake, not a bad delivery) when the secret is
    not strict base64 or its key is shorter than :data:`MIN_KEY_BYTES`.
    """
    encoded = secret[len(_SECRET_PREFIX) :] if secret.startswith(_SECRET_PREFIX) else secret
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a Standard Webhooks secret is whsec_ followed by base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"a Standard Webhooks secret needs at least {MIN_KEY_BYTES} bytes of key, "
            f"this one has {len(key)}"
        )
    return key


class Verifier:
    """Verifies deliveries against every secret in rotation. Build one at startup, so a
    mistyped secret fails there and not on the first delivery.

    ``clock`` answers Unix seconds; tests pass a fixed one instead of sleeping.
    """

    def __init__(
        self,
        secrets: Secrets,
        *,
        tolerance: timedelta = DEFAULT_TOLERANCE,
        clock: Clock = time.time,
    ) -> None:
        listed = [secrets] if isinstance(secrets, str) else list(secrets)
        if not listed:
            raise ValueError("a Verifier needs at least one secret")
        if tolerance <= timedelta(0):
            raise ValueError("the tolerance must be longer than zero")
        self._keys: Tuple[bytes, ...] = tuple(signing_key(s) for s in listed)
        # Whole seconds, like the timestamps and like Inlet's own check.
        self._tolerance = int(tolerance.total_seconds())
        self._clock = clock

    def __repr__(self) -> str:
        # Never print the keys.
        return f"Verifier(<{len(self._keys)} secret(s)>, tolerance={self._tolerance}s)"

    def verify(self, headers: Mapping[str, HeaderValue], body: bytes) -> Verified:
        """The verified delivery, or :class:`InvalidSignature`.

        ``headers``: any mapping (a framework's case-insensitive headers or a plain dict);
        ``str`` values are taken as ASGI and WSGI servers decode them (latin-1, so the bytes
        Inlet sent come back exactly). ``body``: the raw request bytes, never re-encoded JSON.
        """
        payload = _body_bytes(body)
        message_id = _required(headers, "webhook-id")
        timestamp = _required(headers, "webhook-timestamp")
        listed = _required(headers, "webhook-signature")
        signed_at = parse_timestamp(timestamp)
        tags = signature_tags(listed)
        if not _any_matches(self._keys, (message_id, b".", timestamp, b".", payload), tags):
            raise InvalidSignature("webhook-signature: no signature matches any secret")
        check_tolerance(signed_at, self._clock(), self._tolerance)
        return Verified(_text(message_id), signed_at, payload)


def verify(
    secrets: Secrets,
    headers: Mapping[str, HeaderValue],
    body: bytes,
    *,
    tolerance: timedelta = DEFAULT_TOLERANCE,
    now: Union[float, datetime, None] = None,
) -> Verified:
    """One-off :meth:`Verifier.verify`; ``now`` (Unix seconds or an aware datetime) stands
    in for the clock."""
    clock = time.time if now is None else (lambda: _unix_seconds(now))
    return Verifier(secrets, tolerance=tolerance, clock=clock).verify(headers, body)


def sign(
    secret: str,
    message_id: str,
    body: bytes,
    *,
    timestamp: Union[int, datetime, None] = None,
) -> dict:
    """The three Standard Webhooks headers Inlet would send for ``body`` (for tests and
    for local senders). ``timestamp`` defaults to now."""
    signed_at = str(math.floor(_unix_seconds(time.time() if timestamp is None else timestamp)))
    parts = (message_id.encode(), b".", signed_at.encode(), b".", _body_bytes(body))
    tag = _mac(signing_key(secret), parts)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": signed_at,
        "webhook-signature": "v1," + base64.b64encode(tag).decode("ascii"),
    }


def parse_timestamp(value: bytes) -> int:
    """The signed time in Unix seconds: digits only, as Inlet writes it."""
    if not _TIMESTAMP.fullmatch(value):
        raise InvalidSignature("webhook-timestamp: not a whole number of seconds")
    return int(value)


def signature_tags(listed: bytes) -> Tuple[bytes, ...]:
    """The HMAC tags of the ``v1`` entries in a ``webhook-signature`` list.

    Other versions, undecodable entries and entries of the wrong length are skipped, as in
    Inlet; a list with none left (``v1,`` alone, say) is refused, and so is one of more than
    :data:`MAX_SIGNATURES` entries.
    """
    entries = [entry for entry in listed.split(b" ") if entry]
    if len(entries) > MAX_SIGNATURES:
        raise InvalidSignature(
            f"webhook-signature: more than {MAX_SIGNATURES} signatures, the most one "
            "delivery may carry"
        )
    tags = tuple(tag for tag in map(_v1_tag, entries) if tag is not None)
    if not tags:
        raise InvalidSignature("webhook-signature: no v1,<base64> signature")
    return tags


def check_tolerance(signed_at: int, now: float, tolerance_secs: int) -> None:
    """Refuses a signed time further than the tolerance from ``now``, either way: an old
    one is a captured request played back, a future one a clock to fix."""
    skew = math.floor(now) - signed_at
    if abs(skew) > tolerance_secs:
        raise InvalidSignature(
            f"webhook-timestamp: signed at {signed_at}, {skew} s from now; "
            f"the tolerance is {tolerance_secs} s"
        )


def _v1_tag(entry: bytes) -> Optional[bytes]:
    """The 32 bytes of a ``v1,<base64>`` entry, when it is exactly that long: checking the
    length first is what makes ``v1,`` (or a prefix of a real tag) match nothing."""
    if not entry.startswith(b"v1,") or len(entry) - 3 != _TAG_CHARS:
        return None
    try:
        tag = base64.b64decode(entry[3:], validate=True)
    except binascii.Error:
        return None
    return tag if len(tag) == _TAG_BYTES else None


def _any_matches(keys: Iterable[bytes], parts: Tuple[bytes, ...], tags: Tuple[bytes, ...]) -> bool:
    """Whether any tag is the MAC of the parts under any key. One MAC per key, however many
    tags; each comparison in constant time, and every one made (no early exit on a key)."""
    matched = False
    for key in keys:
        mac = _mac(key, parts)
        for tag in tags:
            matched |= hmac.compare_digest(mac, tag)
    return matched


def _mac(key: bytes, parts: Tuple[bytes, ...]) -> bytes:
    """HMAC-SHA256 over the parts, fed one by one so a large body is not copied."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def _required(headers: Mapping[str, HeaderValue], name: str) -> bytes:
    """A header's bytes; missing or empty is a refusal."""
    value = headers.get(name)
    if value is None:
        # A plain dict is case-sensitive; framework headers already answered above.
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    raw = _header_bytes(value) if value is not None else b""
    if not raw:
        raise InvalidSignature(f"{name}: missing")
    return raw


def _header_bytes(value: HeaderValue) -> bytes:
    """The bytes on the wire. ASGI and WSGI decode header bytes as latin-1, so encoding back
    recovers them exactly; a str beyond latin-1 was decoded as UTF-8 by its framework."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape")


def _body_bytes(body: Any) -> bytes:
    """The raw body. A str is refused: re-encoding text is how signatures stop matching."""
    if isinstance(body, (bytes, bytearray)) or (
        isinstance(body, memoryview) and body.itemsize == 1
    ):
        return bytes(body)
    raise TypeError("the body must be the raw request bytes, not " + type(body).__name__)


def _text(message_id: bytes) -> str:
    """The id as text: Inlet's event ids are UTF-8; anything else is kept byte for byte."""
    try:
        return message_id.decode("utf-8")
    except UnicodeDecodeError:
        return message_id.decode("latin-1")


def _unix_seconds(moment: Union[float, int, datetime]) -> float:
    """Unix seconds of a number or of a datetime (a naive one is taken as UTC)."""
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        return aware.timestamp()
    return float(moment)
