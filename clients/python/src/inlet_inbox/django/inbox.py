"""Claim, process and purge on Django's database connections, and a view decorator that
lets only verified deliveries in.

A concurrent duplicate waits for the first transaction: on PostgreSQL on the primary key,
on SQLite for the write lock, up to the database's ``"timeout"`` option. On SQLite claim
before any read in the block (``process`` does), or give the database
``"OPTIONS": {"transaction_mode": "IMMEDIATE"}`` (Django 5.1+): a deferred transaction that
read first fails "database is locked" when the winner commits (safe: a 500, and Inlet's
retry is a duplicate, but noisy).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any, Callable, Optional

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.csrf import csrf_exempt

from .._dbapi import claim_with, purge_with
from ..errors import InvalidSignature
from ..inbox import DEFAULT_PURGE_WINDOW, Claim, not_in_transaction
from ..verify import Verified, Verifier


def claim(connection: Any, consumer: str, message_id: str, *, force: bool = False) -> Claim:
    """Claims on ``connection`` (``django.db.connection`` or ``connections[alias]``) inside
    ``transaction.atomic``; refused in autocommit, where the insert would commit alone."""
    if connection.get_autocommit():
        raise not_in_transaction("Django")
    with connection.cursor() as cursor:
        # Django's cursor takes %s on every backend.
        return claim_with(cursor, "%s", consumer, message_id, force)


def purge(
    connection: Any,
    *,
    older_than: timedelta = DEFAULT_PURGE_WINDOW,
    now: Optional[datetime] = None,
) -> int:
    """Deletes rows older than the window (at once in autocommit, else with the atomic
    block); the count deleted. ``manage.py inlet_inbox_purge`` runs it."""
    with connection.cursor() as cursor:
        return purge_with(cursor, "%s", connection.vendor, older_than, now)


def process(
    consumer: str,
    delivery: Verified,
    handler: Callable[[Verified], object],
    *,
    using: str = DEFAULT_DB_ALIAS,
    force: bool = False,
) -> Claim:
    """Claims and runs ``handler(delivery)`` in ``transaction.atomic(using=...)``.

    Outside any atomic block it returns after the commit: answer 2xx then, 5xx on an
    exception (rolled back, so Inlet's retry runs the handler again). Under
    ``ATOMIC_REQUESTS`` the block is a savepoint and the request's transaction commits as
    the view returns, still before Django sends the answer (a failed commit is a 500).
    """
    with transaction.atomic(using=using):
        found = claim(connections[using], consumer, delivery.message_id, force=force)
        if found is Claim.NEW:
            handler(delivery)
    return found


def webhook_view(
    verifier: Verifier,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Decorates ``view(request, delivery)``: POST only, no CSRF (the signature is the
    authentication), the raw body verified first; a delivery that does not verify gets
    401, as Inlet's sample receiver answers (Inlet keeps it as a dead letter to look at)."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @functools.wraps(view)
        def verified_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            try:
                delivery = verifier.verify(request.headers, request.body)
            except InvalidSignature:
                return HttpResponse(status=401)
            return view(request, delivery, *args, **kwargs)

        return verified_view

    return decorate
