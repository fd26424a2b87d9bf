"""Creates the inbox table with the same DDL as ``inlet_inbox.ddl`` (PostgreSQL or
SQLite): one definition for Django and non-Django applications sharing a database."""

from django.db import migrations

from inlet_inbox.inbox import TABLE, ddl


def create_inbox(apps, schema_editor):
    for statement in ddl(schema_editor.connection.vendor):
        schema_editor.execute(statement)


def drop_inbox(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [migrations.RunPython(create_inbox, drop_inbox, elidable=False)]
