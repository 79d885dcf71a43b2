"""``queueing run``: the controller.

    queueing run [--config FILE] [--kubeconfig FILE] [--context NAME] [--skip-migrations]

The configuration comes from ``--config``, else the file named by ``$QUEUEING_CONFIG``, overlaid by
``QUEUEING_*`` environment variables (docs/configuration.md). Without ``--kubeconfig`` the in-cluster
service account is used (falling back to ``$KUBECONFIG`` / ``~/.kube/config`` outside a cluster).
The ledger's schema is upgraded to the current revision at start unless ``--skip-migrations``.
With ``leaderElection.leaderElect`` (the default) the replica campaigns for the Lease and only admits
and evicts while it holds it; ``/metrics`` is served on ``metrics.bindAddress`` and ``/healthz`` and
``/readyz`` on ``health.healthProbeBindAddress``; periodic jobs sample usage, re-sync, compact the
ledger and re-check inadmissible workloads. SIGTERM or SIGINT stop it cleanly (the current step
finishes, the leader term ends, the Lease is released, informers close). Exit codes: 0 after a clean
stop, 2 for a bad configuration or an unreachable cluster or database at start.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

HELP = "Run the controller: watch the cluster, queue Jobs as Workloads, admit them with a device plan."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="configuration file (default: $QUEUEING_CONFIG)")
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster service account)"
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context")
    parser.add_argument(
        "--skip-migrations", action="store_true", help="do not upgrade the ledger's schema at start"
    )


async def _main(args: argparse.Namespace) -> int:
    from queueing.config import ConfigError, load_config
    from queueing.controller.process import ControllerProcess
    from queueing.kube.client import KubeClient, load_api_client
    from queueing.ledger.errors import is_outage, short_reason
    from queueing.ledger.migrate import upgrade_async
    from queueing.ledger.repository import Ledger

    try:
        config = load_config(args.config, os.environ)
    except ConfigError as e:
        print(f"queueing run: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("queueing.run")
    try:
        api = await load_api_client(args.kubeconfig, args.context)
    except Exception as e:
        print(f"queueing run: cannot load the cluster configuration: {e}", file=sys.stderr)
        return 2
    ledger = Ledger.from_url(config.resolved_database_url())
    proc: ControllerProcess | None = None
    try:
        if not args.skip_migrations:
            try:
                await upgrade_async(ledger.engine)
            except Exception as e:
                print(f"queueing run: cannot prepare the ledger database: {e}", file=sys.stderr)
                return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        proc = ControllerProcess(KubeClient(api), ledger, config)
        try:
            await proc.start()
        except TimeoutError:
            print("queueing run: the informers did not sync with the API server in time", file=sys.stderr)
            return 2
        except Exception as e:
            if isinstance(e, OSError) and not isinstance(e, ConnectionError):  # a port that cannot be bound
                print(f"queueing run: cannot serve the metrics or probe endpoints: {e}", file=sys.stderr)
                return 2
            if not is_outage(e):
                raise
            print(f"queueing run: the ledger database is unreachable ({short_reason(e)})", file=sys.stderr)
            return 2
        log.info(
            "controller started (plan binding mode %s, identity %s, leader election %s)",
            config.plan_binding_mode,
            proc.identity,
            "on" if proc.elector is not None else "off",
        )
        await stop.wait()
        log.info("stopping: finishing the current step, releasing the lease")
        return 0
    finally:
        if proc is not None:
            try:
                await proc.stop()
            except Exception:
                log.exception("error while stopping")
        await ledger.close()
        await api.close()


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args))
