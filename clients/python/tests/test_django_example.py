"""The Django example app's own suite (``examples/django_app/tests``), run once per database
in a process of its own: Django's settings are made once per process, so each database gets
a fresh Django, as a deployment would."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from databases import DATABASES, scratch_postgres

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "django_app"
SECRET = "whsec_" + base64.b64encode(b"django example secret, 32 bytes").decode()


@contextlib.contextmanager
def database_url(dialect: str, tmp_path: Path) -> Iterator[str]:
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'django.db'}"  # an absolute path: four slashes
        return
    with scratch_postgres("inlet_inbox_django") as url:
        yield url


@pytest.mark.parametrize("dialect", DATABASES)
def test_the_django_example_app(dialect: str, tmp_path: Path):
    with database_url(dialect, tmp_path) as url:
        env = {**os.environ, "INLET_INBOX_DATABASE_URL": url, "INLET_WEBHOOK_SECRETS": SECRET}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(EXAMPLE / "tests"),
            ],
            cwd=EXAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"django example on {dialect}: {summary}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in summary and "failed" not in summary
