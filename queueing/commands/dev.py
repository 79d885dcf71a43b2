"""``queueing dev``: a complete local cluster for trying the controller, in one process.

    queueing dev --dir DIR [--port N] [--no-examples] [--examples DIR]

It starts the Kubernetes API emulator (``queueing.testing.emulator``), the stand-in cluster around it
(``queueing.testing.cluster``: Job controller, resourceclaim controller, kube-scheduler with DRA
allocation, kubelet running each pod for its ``simulate.queueing.dra.io/duration``) and the controller
through the code path of ``queueing run`` (``queueing.commands.run.serve``), with an SQLite ledger in
DIR (a fresh one each start: the cluster lives in memory) and leader election off. It writes
``DIR/kubeconfig`` (for kubectl) and ``DIR/config.yaml`` (the controller's configuration), loads the
example cluster of ``examples/`` (unless ``--no-examples``), prints what to try next and stays up
until SIGINT (Ctrl-C) or SIGTERM, then stops the controller, the stand-ins and the emulator in that
order. Exit codes: 0 after a clean stop, 2 when it cannot start (one line on stderr says why).

What is loaded, in this order (the suspend policy first, so that no queued Job ever starts
unsuspended): the MutatingAdmissionPolicy of ``deploy/base`` (or, outside a checkout, the stand-in
``suspend_queued_jobs`` hook that does the same), our CRDs (generated from the models), the namespace
``queueing-system``, then the example cluster ``examples/kustomization.yaml`` lists. Nothing under
``examples/jobs`` is loaded: that is for ``kubectl apply -f examples/jobs/`` (docs/quickstart.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from pathlib import Path
from typing import Any

HELP = "Run a local cluster (API emulator, stand-in Job controller/scheduler/kubelet) and the controller."

CHECKOUT = Path(__file__).resolve().parents[2]
SUSPEND_POLICY = CHECKOUT / "deploy" / "base" / "mutating-admission-policy.yaml"
# the pod-gated kinds' policies (queue name into pod templates, the admission gate on their pods)
POD_GATE_POLICY = CHECKOUT / "deploy" / "base" / "pod-gate-policy.yaml"
CONTROLLER_NAMESPACE = "queueing-system"

# The one coherent example cluster: examples/kustomization.yaml lists its files in load order
# (labelled namespaces, DeviceClasses, the H200 nodes with their ResourceSlices, priorities, flavors,
# the cohort, ClusterQueues, LocalQueues), and says what it leaves out and why.
EXAMPLE_CLUSTER = "kustomization.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", required=True, metavar="DIR", help="where kubeconfig, config.yaml and ledger.db go"
    )
    parser.add_argument(
        "--port", type=int, default=0, metavar="N", help="the API emulator's port (default: a free one)"
    )
    parser.add_argument(
        "--no-examples", action="store_true", help="start empty: no nodes, DeviceClasses or queues"
    )
    parser.add_argument(
        "--examples",
        metavar="DIR",
        help="the examples folder to load the cluster from (default: the checkout's examples/)",
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def controller_config(directory: Path, visibility_port: int, dashboard_port: int) -> str:
    """The controller's configuration for ``queueing dev``: SQLite in DIR, one replica, local ports,
    the visibility API over plain HTTP on ``visibility_port`` (the emulator proxies its group there),
    the dashboard on ``dashboard_port``."""
    return (
        "# written by `queueing dev`; every field is described in docs/configuration.md\n"
        f"namespace: {CONTROLLER_NAMESPACE}\n"
        f"databaseURL: sqlite+aiosqlite:///{directory / 'ledger.db'}\n"
        "leaderElection:\n  leaderElect: false\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{_free_port()}\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{_free_port()}\n"
        f"visibility:\n  bindAddress: 127.0.0.1:{visibility_port}\n"
        f"dashboard:\n  bindAddress: 127.0.0.1:{dashboard_port}\n"
    )


def example_paths(examples: Path) -> list[Path]:
    """The files of the example cluster under ``examples``, in load order (ValueError naming what is
    missing)."""
    from queueing.testing.emulator import manifest_files

    if not (examples / EXAMPLE_CLUSTER).is_file():
        raise ValueError(f"the example cluster is incomplete: {examples / EXAMPLE_CLUSTER} not found")
    paths = manifest_files(examples)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"the example cluster is incomplete: {', '.join(missing)} not found")
    return paths


def load_cluster(emu: Any, examples: Path | None) -> list[str]:
    """The suspend policy, the CRDs, the controller's namespace and (with ``examples``) the example
    cluster into the emulator; returns ``kind/name`` of what was created. A failure raises."""
    from queueing.api.crdgen import all_crds
    from queueing.testing.cluster import suspend_queued_jobs
    from queueing.testing.operator import TEST_CRDS

    created: list[str] = []
    if SUSPEND_POLICY.is_file():
        created += emu.load_objects(SUSPEND_POLICY)
    else:
        emu.store.admission_hooks.append(suspend_queued_jobs)
    if POD_GATE_POLICY.is_file():
        created += emu.load_objects(POD_GATE_POLICY)
    created += emu.load_objects(list(all_crds()))
    created += emu.load_objects(
        TEST_CRDS
    )  # the integrated kinds (RayJob, JobSet, LeaderWorkerSet, ...): test CRDs
    created += emu.load_objects(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROLLER_NAMESPACE}}]
    )
    if examples is not None:
        example_paths(examples)  # every file is there
        created += emu.load_objects(examples)
    return created


def next_steps(directory: Path, examples: Path | None) -> str:
    """The commands to try next (the examples' path as the user can type it from here)."""
    here = Path.cwd()
    ex = examples or CHECKOUT / "examples"
    shown = str(ex.relative_to(here)) if ex.is_relative_to(here) else str(ex)
    lines = [f"  export KUBECONFIG={directory / 'kubeconfig'}"]
    if examples is None:
        lines.append(f"  kubectl apply -k {shown}/            # the example cluster")
    lines += [f"  kubectl apply -f {shown}/jobs/", "  kubectl get workloads -A -w"]
    return "Try next, in another terminal:\n" + "\n".join(lines) + "\nStop with Ctrl-C."


async def _main(args: argparse.Namespace) -> int:
    from queueing.commands.run import serve
    from queueing.controller.visibility import GROUP as VISIBILITY_GROUP
    from queueing.controller.visibility import VERSION as VISIBILITY_VERSION
    from queueing.testing.cluster import StandIns
    from queueing.testing.emulator import run_emulator

    directory = Path(args.dir).resolve()
    examples: Path | None = None
    if not args.no_examples:
        examples = Path(args.examples).resolve() if args.examples else CHECKOUT / "examples"
        try:
            example_paths(examples)
        except ValueError as e:
            print(f"queueing dev: {e} (use --examples DIR or --no-examples)", file=sys.stderr)
            return 2
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # the cluster lives in memory: a ledger left by an earlier run would describe Workloads that are gone
        for stale in directory.glob("ledger.db*"):
            stale.unlink()
    except OSError as e:
        print(f"queueing dev: cannot use --dir {directory}: {e}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            emu = await stack.enter_async_context(run_emulator(port=args.port))
        except OSError as e:
            print(f"queueing dev: cannot serve the API emulator on port {args.port}: {e}", file=sys.stderr)
            return 2
        try:
            objects = load_cluster(emu, examples)
        except Exception as e:
            print(f"queueing dev: cannot load the example cluster: {e}", file=sys.stderr)
            return 2
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(_yaml(emu.kubeconfig()))
        config = directory / "config.yaml"
        visibility_port, dashboard_port = _free_port(), _free_port()
        config.write_text(controller_config(directory, visibility_port, dashboard_port))
        # as kube-aggregator does for the APIService of deploy/: the emulator proxies the group
        emu.aggregation.register(VISIBILITY_GROUP, VISIBILITY_VERSION, f"http://127.0.0.1:{visibility_port}")
        print(f"Kubernetes API emulator listening on {emu.url}", flush=True)
        print(f"dashboard (read-only): http://127.0.0.1:{dashboard_port}/", flush=True)
        nodes = sum(1 for o in objects if o.startswith("Node/"))
        print(f"loaded {len(objects)} objects ({nodes} nodes); kubeconfig: {kubeconfig}", flush=True)
        cluster = await stack.enter_async_context(StandIns(emu))
        reporter = asyncio.create_task(_report_errors(cluster))
        try:
            run_args = argparse.Namespace(
                config=str(config), kubeconfig=str(kubeconfig), context=None, skip_migrations=False
            )
            return await serve(
                run_args, stop, on_started=lambda: print(next_steps(directory, examples), flush=True)
            )
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
    return 0  # not reached: the block returns


async def _report_errors(cluster: Any) -> None:
    """What the stand-ins could not do (an error in the Job controller, kube-scheduler or kubelet they
    play), on stderr as it happens: they go on playing the rest of the cluster."""
    seen = 0
    while True:
        await asyncio.sleep(1.0)
        for line in cluster.errors[seen:]:
            print(f"queueing dev: stand-in cluster: {line}", file=sys.stderr, flush=True)
        seen = len(cluster.errors)


def _yaml(obj: Any) -> str:
    import yaml

    return str(yaml.safe_dump(obj, sort_keys=False))


def run(args: argparse.Namespace) -> int:
    rc = asyncio.run(_main(args))
    if rc == 0:
        print("queueing dev: stopped (the controller, the stand-ins and the emulator)", flush=True)
    return rc
