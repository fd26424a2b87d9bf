"""Sets Django up on the database the environment names (the outer suite runs this once
on SQLite and once on a scratch PostgreSQL database) and migrates it, the way a deployment
would: the inbox table comes from inlet_inbox's own migration.

Standalone: ``INLET_INBOX_DATABASE_URL=sqlite:////tmp/example.db pytest tests`` from the
example's folder (the secret defaults to a test one)."""

import base64
import os
import sys
from pathlib import Path

import django

EXAMPLE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXAMPLE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ.setdefault(
    "INLET_WEBHOOK_SECRETS",
    "whsec_" + base64.b64encode(b"django example secret, 32 bytes").decode(),
)
django.setup()

from django.core.management import call_command  # noqa: E402  (after setup)
from django.test.utils import setup_test_environment  # noqa: E402

setup_test_environment()  # the test client's host, and outgoing mail kept in memory
call_command("migrate", verbosity=0)
