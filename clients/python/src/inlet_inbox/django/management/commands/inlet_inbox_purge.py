"""``manage.py inlet_inbox_purge``: deletes inbox rows past the purge window (run it daily
from cron or a scheduler)."""

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from inlet_inbox.django.inbox import purge
from inlet_inbox.inbox import DEFAULT_PURGE_WINDOW


class Command(BaseCommand):
    help = (
        "Delete inlet_inbox rows claimed longer ago than the window. The window must exceed "
        "the Inlet deployment's retention.events + deadline + retention.dead_letters "
        "(68 days by default): a copy of a message can arrive until then (a replay that "
        "died and was requeued), and its row is what makes it a duplicate."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than-days", type=int, default=DEFAULT_PURGE_WINDOW.days)
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args, **options):
        connection = connections[options["database"]]
        with transaction.atomic(using=options["database"]):
            deleted = purge(connection, older_than=timedelta(days=options["older_than_days"]))
        self.stdout.write(f"deleted {deleted} inbox rows")
