"""The inbox for Django: add ``"inlet_inbox.django"`` to ``INSTALLED_APPS`` and run
``migrate`` (it creates the ``inlet_inbox`` table for PostgreSQL or SQLite). Claims run as
raw SQL on Django's connection inside ``transaction.atomic``; :func:`process` wraps the
whole thing, and :func:`webhook_view` verifies the request first."""

from .inbox import claim, process, purge, webhook_view

__all__ = ["claim", "process", "purge", "webhook_view"]
