"""``python -m inlet_inbox ddl postgresql|sqlite``: prints the inbox table's DDL, for a
migration tool of your own (Alembic, Flyway, plain psql)."""

import sys

from .inbox import ddl


def main(argv: list) -> int:
    if len(argv) != 2 or argv[0] != "ddl":
        print("usage: python -m inlet_inbox ddl postgresql|sqlite", file=sys.stderr)
        return 2
    try:
        statements = ddl(argv[1])
    except ValueError as refused:
        print(refused, file=sys.stderr)
        return 2
    print(";\n\n".join(statements) + ";")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
