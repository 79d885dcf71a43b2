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
stop, 2 for a bad configuration, no kubeconfig, CRDs not installed, the Lease's namespace missing, or an
unreachable cluster or database at start (one line on stderr says which).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queueing.config import Config
    from queueing.kube.client import KubeClient

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
PREFLIGHT_TIMEOUT = 10.0  # seconds per request of the start-up checks

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


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def missing_kubeconfig(kubeconfig: str | None, env: Mapping[str, str]) -> str | None:
    """What is missing to find the cluster, in one line (None: a kubeconfig file or the in-cluster
    service account is there). Without ``--kubeconfig``, as kubernetes-asyncio looks: the service
    account, else ``$KUBECONFIG`` (its files), else ``~/.kube/config``."""
    if kubeconfig:
        return None if os.path.isfile(kubeconfig) else f"kubeconfig {kubeconfig}: no such file"
    if env.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(SERVICE_ACCOUNT_TOKEN):
        return None
    files = [f for f in env.get("KUBECONFIG", "").split(os.pathsep) if f]
    candidates = files or [os.path.expanduser("~/.kube/config")]
    if any(os.path.isfile(os.path.expanduser(f)) for f in candidates):
        return None
    looked = f"$KUBECONFIG ({', '.join(files)})" if files else "~/.kube/config"
    return (
        f"no cluster configuration: not in a pod (no service account) and {looked} does not exist; "
        "pass --kubeconfig FILE (`queueing dev` writes one for a local cluster)"
    )


async def preflight(kube: KubeClient, config: Config) -> str | None:
    """What keeps the controller from working in this cluster, in one line, or None: the API server
    does not answer, our CRDs are not installed, or the leader-election Lease's namespace does not
    exist (the elector would retry on 404 forever). Uses only reads the controller's RBAC allows
    (list); a 403 proves nothing and is passed over."""
    from kubernetes_asyncio.client.exceptions import ApiException

    from queueing.api.crdgen import all_crds
    from queueing.kube.client import NAMESPACES, Resource

    server = kube.api.configuration.host
    not_served = []
    ours = [
        Resource(c["spec"]["group"], v["name"], c["spec"]["names"]["plural"], c["spec"]["scope"] == "Namespaced",
                 c["spec"]["names"]["kind"])
        for c in all_crds()
        for v in c["spec"]["versions"]
        if v.get("served") and v.get("storage")
    ]  # fmt: skip
    try:
        for res in ours:
            try:
                await kube.request("GET", res.path(None), {"limit": 1}, timeout=PREFLIGHT_TIMEOUT)
            except ApiException as e:
                if e.status == 404:
                    not_served.append(f"{res.plural}.{res.group}")
                elif e.status not in (401, 403):
                    return (
                        f"the API server {server} answers {e.status} {e.reason} for {res.plural}.{res.group}"
                    )
        if not_served:
            return (
                f"the API server {server} does not serve {', '.join(not_served)}: the CRDs are not "
                "installed (kubectl apply --server-side -f crds/)"
            )
        if config.leader_election.leader_elect:
            ns = config.lease_namespace
            lease = f"{ns}/{config.leader_election.resource_name}"
            try:
                found = await kube.request(
                    "GET",
                    NAMESPACES.path(None),
                    {"fieldSelector": f"metadata.name={ns}"},
                    timeout=PREFLIGHT_TIMEOUT,
                )
            except ApiException as e:
                if e.status not in (401, 403):
                    raise
            else:
                if not (found or {}).get("items"):
                    return (
                        f"the namespace {ns} does not exist, so the leader-election Lease {lease} cannot be "
                        f"created: kubectl create namespace {ns} (or set leaderElection.resourceNamespace, "
                        "or leaderElection.leaderElect: false for a single replica)"
                    )
    except (OSError, TimeoutError) as e:
        return f"cannot reach the API server {server}: {_one_line(e)}"
    except ApiException as e:
        return f"the API server {server} answers {e.status} {e.reason}"
    return None


async def serve(
    args: argparse.Namespace,
    stop: asyncio.Event | None = None,
    on_started: Callable[[], None] | None = None,
) -> int:
    """The controller until ``stop`` is set (by default: until SIGTERM or SIGINT); the exit code.

    ``queueing dev`` runs this same function next to its emulator, with its own ``stop`` and an
    ``on_started`` callback (called once the controller runs)."""
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
    if config.log_level != "debug":
        # APScheduler logs every run of every periodic job at INFO; its warnings and errors still show
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    log = logging.getLogger("queueing.run")
    missing = missing_kubeconfig(args.kubeconfig, os.environ)
    if missing:
        print(f"queueing run: {missing}", file=sys.stderr)
        return 2
    try:
        api = await load_api_client(args.kubeconfig, args.context)
    except Exception as e:
        where = f" {args.kubeconfig}" if args.kubeconfig else ""
        print(f"queueing run: cannot load the cluster configuration{where}: {_one_line(e)}", file=sys.stderr)
        return 2
    problem = await preflight(KubeClient(api), config)
    if problem:
        print(f"queueing run: {problem}", file=sys.stderr)
        await api.close()
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
        if stop is None:
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
        if on_started is not None:
            on_started()
        await stop.wait()
        log.info(
            "stopping: finishing the current step%s",
            ", releasing the lease" if proc.elector is not None else "",
        )
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
    from queueing.gcpolicy import tune_for_controller

    tune_for_controller()  # process-wide: this process is the controller and nothing else
    return asyncio.run(serve(args))
