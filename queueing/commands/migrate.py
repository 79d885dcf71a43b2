"""``queueing migrate``: create or upgrade the ledger's schema (Alembic), or show its revision.

    queueing migrate upgrade [REV]   --url URL     (REV defaults to head)
    queueing migrate downgrade [REV] --url URL     (REV defaults to -1; "base" removes everything)
    queueing migrate current         --url URL

The URL defaults to the configuration (``$QUEUEING_DATABASE_URL``, or ``databaseURL``/``databaseURLFile``
in the file named by ``$QUEUEING_CONFIG``), then to the embedded SQLite file ``queueing.db``.
Works from any directory: the Alembic configuration is built from the installed package.
"""

from __future__ import annotations

import argparse
import sys

HELP = "Create, upgrade or downgrade the ledger database schema (Alembic), or print its revision."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("upgrade", "downgrade", "current"), help="what to do")
    parser.add_argument("revision", nargs="?", help="target revision (upgrade: head; downgrade: -1)")
    parser.add_argument(
        "--url",
        help="database URL: postgresql+asyncpg://user@host/db or sqlite+aiosqlite:///file.db "
        "(default: $QUEUEING_DATABASE_URL or the configuration file, else sqlite+aiosqlite:///queueing.db)",
    )


def run(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from queueing.ledger import migrate
    from queueing.ledger.engine import LedgerConfigError, database_url

    try:
        url = database_url(args.url)
        if args.action == "current":
            if args.revision:
                print("queueing migrate: current takes no revision", file=sys.stderr)
                return 2
            rev = migrate.current(url)
            head = migrate.head_revision()
            label = "none (empty database)" if rev is None else rev
            print(f"{label}{' (head)' if rev == head else ''}")
            return 0
        if args.action == "upgrade":
            migrate.upgrade(url, args.revision or "head")
        else:
            migrate.downgrade(url, args.revision or "-1")
        print(f"{args.action}d to {migrate.current(url) or 'base'}")
        return 0
    except (LedgerConfigError, CommandError) as e:
        print(f"queueing migrate: {e}", file=sys.stderr)
        return 2
    except (SQLAlchemyError, OSError) as e:
        print(f"queueing migrate: database error: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__
