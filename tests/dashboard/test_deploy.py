"""deploy/overlays/dashboard: builds, validates, and turns the dashboard on at its named port."""

from __future__ import annotations

from queueing.config import load_config
from queueing.controller.http import parse_bind_address
from tests.deploy.k8s import kustomize, validation_errors

OVERLAY = "deploy/overlays/dashboard"


def test_dashboard_overlay_serves_the_dashboard_on_its_named_port() -> None:
    objs = kustomize(OVERLAY)
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    assert validation_errors(dep, "1.34.0") == []  # the rest is the base (tests/deploy validates it)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    config = load_config(None, {k: v for k, v in env.items() if k.startswith("QUEUEING_DASHBOARD")})
    assert config.dashboard.bind_address is not None
    port = parse_bind_address(config.dashboard.bind_address)[1]
    assert {"name": "dashboard", "containerPort": port, "protocol": "TCP"} in c["ports"]
    # one port more than the base, on a port of its own; no Service exposes the dashboard
    (base,) = [o for o in kustomize("deploy") if o["kind"] == "Deployment"]
    base_ports = base["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [p for p in c["ports"] if p["name"] != "dashboard"] == base_ports
    assert port not in {p["containerPort"] for p in base_ports}
    assert all(
        p.get("targetPort") != "dashboard" for o in objs if o["kind"] == "Service" for p in o["spec"]["ports"]
    )
