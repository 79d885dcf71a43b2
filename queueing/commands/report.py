"""``queueing report``: the admin reports over the ledger (same results on PostgreSQL and SQLite).

    queueing report NAME [--url URL] [--since T] [--until T] [-o table|csv|json]
                         [--cluster-queue X] [--namespace X] [--cohort X] [--where COLUMN=VALUE ...]
    queueing report --list

T is an ISO 8601 date or date-time (no zone = UTC). Filters are exact matches passed to the database
as bound parameters. See docs/reports.md for every report with an example.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime

HELP = (
    "Print an admin report from the ledger (usage vs quota, device-hours, wait times, evictions, fair share)."
)

_SHORTCUTS = {"cluster_queue": "cluster-queue", "namespace": "namespace", "cohort": "cohort"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="report name (see --list)")
    parser.add_argument("--list", action="store_true", help="print the report names, one a line")
    parser.add_argument(
        "--url", help="database URL (default: $QUEUEING_DATABASE_URL, else the SQLite default)"
    )
    parser.add_argument("--since", type=_time, help="from this time (ISO 8601; UTC if no zone)")
    parser.add_argument("--until", type=_time, help="before this time (ISO 8601; UTC if no zone)")
    parser.add_argument("-o", "--output", choices=("table", "csv", "json"), default="table")
    for col, opt in _SHORTCUTS.items():
        parser.add_argument(f"--{opt}", dest=f"f_{col}", metavar="NAME", help=f"only rows with this {col}")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COLUMN=VALUE",
        help="only rows where COLUMN equals VALUE",
    )


def _time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or date-time: {text!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def run(args: argparse.Namespace) -> int:
    from queueing.ledger.reports import ReportError, get_report, report_names

    if args.list:
        for name in report_names():
            print(name)
        return 0
    if not args.name:
        print("queueing report: give a report name (queueing report --list shows them)", file=sys.stderr)
        return 2
    try:
        report = get_report(args.name)
        where: dict[str, str] = {}
        for col in _SHORTCUTS:
            value = getattr(args, f"f_{col}")
            if value is not None:
                if col not in report.filters:
                    raise ReportError(f"report {report.name} has no {col} column to filter on")
                where[col] = value
        for item in args.where:
            col, sep, value = item.partition("=")
            if not sep:
                raise ReportError(f"--where {item!r}: expected COLUMN=VALUE")
            where[col.strip()] = value
        return asyncio.run(_run(args, where))
    except ReportError as e:
        print(f"queueing report: {e}", file=sys.stderr)
        return 2


async def _run(args: argparse.Namespace, where: dict[str, str]) -> int:
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from queueing.ledger.engine import LedgerConfigError, create_engine, database_url
    from queueing.ledger.reports import ReportError, format_rows, run_report

    try:
        url = database_url(args.url)
        engine = create_engine(url)
    except LedgerConfigError as e:
        print(f"queueing report: {e}", file=sys.stderr)
        return 2
    try:
        result = await run_report(engine, args.name, since=args.since, until=args.until, where=where)
        sys.stdout.write(format_rows(result, args.output))
        return 0
    except ReportError as e:
        print(f"queueing report: {e}", file=sys.stderr)
        return 2
    except (DBAPIError, SQLAlchemyError, OSError) as e:
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        if "no such table" in msg or "does not exist" in msg:
            msg += f" (is the ledger migrated? run: queueing migrate upgrade --url {args.url or url})"
        print(f"queueing report: database error: {msg}", file=sys.stderr)
        return 1
    finally:
        await engine.dispose()
