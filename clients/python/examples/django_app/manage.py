#!/usr/bin/env python
"""The Django example's command line: ``python manage.py migrate``, ``runserver``,
``inlet_inbox_purge``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
