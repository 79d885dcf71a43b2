"""``queueing simulate``: run the scheduler on a scenario in virtual time.

Contract (other checks depend on it):
    queueing simulate -f FILE [-f FILE ...] [-o json|table] [--ledger URL] [--plot FILE.png] [--config FILE]
                      [--serve HOST:PORT]

``-f`` takes files or directories (every ``*.yaml``/``*.yml``/``*.json`` in it, in name order; ``-`` is
stdin). Objects: Node, ResourceSlice, DeviceClass, ResourceClaimTemplate, ResourceClaim, PriorityClass,
Namespace, batch/v1 Job, Pod (pod groups, bound pods) and the ``queueing.dra.io`` kinds. Jobs carry
the label ``queueing.dra.io/queue-name``, optionally ``queueing.dra.io/priority-class``, and the
annotations ``simulate.queueing.dra.io/arrival`` (offset from the start, default ``0s``) and
``simulate.queueing.dra.io/duration`` (run time once admitted; required).

``-o json`` (default): one JSON object a line, in time order::

    {"time": 0, "event": "Admitted", "job": "ns/name", "clusterQueue": "cq", "reason": "...", "nodes": [...]}
    {"time": 90, "event": "Evicted", "job": "ns/name", "clusterQueue": "cq", "reason": "InClusterQueue", "preemptor": "ns/other"}
    {"time": 600, "event": "Finished", "job": "ns/name", "clusterQueue": "cq", "reason": "Succeeded"}
    {"time": 0, "event": "Inadmissible", "job": "ns/name", "clusterQueue": "cq", "reason": "Pending: ..."}
    {"event": "Summary", "time": ..., "clusterQueues": {"cq": {"admitted": .., "meanWait": .., "p90Wait": .., ...}}, "deviceUtilisation": ..}

``Inadmissible`` is printed when a job's pending reason changes. ``-o table`` prints the same for
people. ``--plot FILE.png`` draws queue lengths and device utilisation over time (needs matplotlib:
the ``plot`` extra). ``--ledger URL`` records the run in the ledger (``queueing report`` works on it).
``--config FILE`` is the controller's configuration file (fair sharing, admission fair sharing, requeue
backoff). ``--serve HOST:PORT`` then serves the dashboard (docs/dashboard.md) replaying the run with a
time slider, until interrupted.

Exit 0: the simulation ran; 2: invalid input or configuration (one line on stderr naming the object
and field), or the ledger/plot could not be written, or the ledger refused a write of the history
(its quota check, the core's own, disagrees with the simulation: a bug; one line naming the event).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

HELP = "Simulate admission of Jobs on a cluster in virtual time (events as JSON lines or a table)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML/JSON file or directory with the scenario (repeatable; - is stdin)",
    )
    parser.add_argument("-o", "--output", choices=("json", "table"), default="json", help="output format")
    parser.add_argument("--ledger", metavar="URL", help="record the run in the ledger at URL")
    parser.add_argument("--plot", metavar="FILE.png", help="draw queue lengths and device utilisation")
    parser.add_argument(
        "--config", metavar="FILE", help="controller configuration file (scheduling settings)"
    )
    parser.add_argument(  # dashboard
        "--serve", metavar="HOST:PORT", help="then serve the dashboard replaying the run (Ctrl-C stops)"
    )


class _Progress:
    """A progress bar on stderr: redrawn in place on a terminal; on a pipe, a line every 10 s once
    the run has taken more than 5 s. Nothing for short runs that are not on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int, now: float) -> None:
        t = time.monotonic()
        elapsed = t - self.t0
        if self.tty:
            if t - self.last < 0.2 or elapsed < 1.0:
                return
        elif elapsed < 5.0 or t - self.last < 10.0:
            return
        self.last = t
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        line = f"simulating [{bar:<30}] {done}/{total} jobs finished, virtual time {now:.0f}s, {elapsed:.0f}s"
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from queueing.config import ConfigError, load_config
    from queueing.dra.errors import AllocationError
    from queueing.scheduling.config import SchedulingConfig
    from queueing.simulate.engine import Simulation
    from queueing.simulate.output import PlotUnavailable, plot, write_json, write_table
    from queueing.simulate.scenario import ScenarioError, load_scenario

    if args.serve:  # dashboard: a bad address fails before the run, not after
        from queueing.dashboard.replay import address_error

        if (why := address_error(args.serve)) is not None:
            print(f"error: --serve {args.serve}: {why}", file=sys.stderr)
            return 2
    try:
        config = load_config(args.config, {}).scheduling() if args.config else SchedulingConfig()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.files)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in scenario.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.plot:  # fail before the run, not after
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "error: --plot needs matplotlib, which is not installed: pip install 'queueing[plot]'",
                file=sys.stderr,
            )
            return 2
    start_epoch = float(int(time.time()))
    progress = _Progress(sys.stderr)
    try:
        sim = Simulation(scenario, config, progress=progress)
        result = sim.run()
    except AllocationError as e:
        progress.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    progress.close()
    if args.output == "table":
        write_table(result, sys.stdout)
    else:
        write_json(result, sys.stdout)
    sys.stdout.flush()
    rc = 0
    if args.plot:
        try:
            plot(result, args.plot)
        except PlotUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            rc = 2
    if args.ledger:
        import asyncio

        from queueing.ledger.engine import LedgerConfigError
        from queueing.ledger.repository import LedgerError
        from queueing.simulate.record import record

        try:
            rec = asyncio.run(record(result, scenario, sim.placer, args.ledger, start_epoch=start_epoch))
        except (LedgerConfigError, LedgerError, OSError, ValueError) as e:
            print(f"error: --ledger {args.ledger}: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # database driver errors (connection refused, ...)
            print(
                f"error: --ledger: cannot record the run: {type(e).__name__}: {e}".splitlines()[0],
                file=sys.stderr,
            )
            return 2
        print(f"recorded run {rec.run_id} in the ledger ({rec.written} writes)", file=sys.stderr)
    if args.serve:  # dashboard: replay the run with a time slider
        from queueing.dashboard.replay import serve_replay

        return serve_replay(scenario, result, args.serve) or rc
    return rc
