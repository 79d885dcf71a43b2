"""The ``queueing`` command line: a thin dispatcher over ``queueing.commands``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# name -> module under queueing.commands; each module is imported only when its command runs
# (and for --help), so `queueing allocate` does not pay for SQLAlchemy or kubernetes-asyncio.
COMMANDS: dict[str, str] = {
    "run": "run",
    "simulate": "simulate",
    "allocate": "allocate",
    "report": "report",
    "migrate": "migrate",
    "crds": "crds",
    "explain": "explain",
    "import-kueue": "import_kueue",
    "dev": "dev",
}


def _load(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(f"queueing.commands.{COMMANDS[name]}")
    except ModuleNotFoundError as e:
        if e.name == f"queueing.commands.{COMMANDS[name]}":
            return None
        raise


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queueing",
        description="DRA-aware admission for GPU clusters: quota, cohorts, fair sharing and exact device placement.",
    )
    from queueing import __version__

    parser.add_argument("--version", action="version", version=f"queueing {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        mod = _load(name)
        if mod is None:
            continue
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        rc = args._module.run(args)
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        # a value nested deeper than the parsers and models follow (the commands name the file
        # where they can; this is the last guard): one line, no traceback
        print(f"error: {args.command}: the input is nested too deeply to process", file=sys.stderr)
        return 2
    except Exception as e:
        # a bug, not bad input: still one line for the user (QUEUEING_TRACEBACK=1 shows the traceback)
        if os.environ.get("QUEUEING_TRACEBACK") or args.command == "run":  # the controller logs it
            raise
        text = " ".join(str(e).split())[:300]
        print(
            f"error: {args.command}: internal error (please report it with the input): "
            f"{type(e).__name__}: {text}",
            file=sys.stderr,
        )
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
