"""Settings of the Django example: an Inlet destination recording payments once.

Read from the environment: ``INLET_INBOX_DATABASE_URL`` (``sqlite:///relative.db``,
``sqlite:////absolute.db`` or ``postgresql://user@host:port/name``; required, so a typo
never becomes an empty SQLite file), ``INLET_WEBHOOK_SECRETS`` (the destination's
``whsec_`` secret; several, space-separated, while rotating), ``DJANGO_SECRET_KEY`` and
``DJANGO_ALLOWED_HOSTS`` (space-separated, default ``localhost 127.0.0.1``).
"""

import os
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


def database_from_url(url: str) -> dict:
    """Django's DATABASES entry for a URL; unknown schemes are refused."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": url[len("sqlite:///") :],
            # Wait up to 30 s for the write lock; IMMEDIATE takes it as atomic() begins, so
            # a concurrent copy waits even if the transaction read before its claim.
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
        }
    if parts.scheme in ("postgresql", "postgres"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    raise ImproperlyConfigured(f"INLET_INBOX_DATABASE_URL: unknown scheme {parts.scheme!r}")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-set-DJANGO_SECRET_KEY")
DEBUG = False
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost 127.0.0.1").split()
INSTALLED_APPS = ["inlet_inbox.django", "payments"]
MIDDLEWARE = []
ROOT_URLCONF = "project.urls"
DATABASES = {"default": database_from_url(os.environ["INLET_INBOX_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
INLET_WEBHOOK_SECRETS = os.environ["INLET_WEBHOOK_SECRETS"].split()
