"""deploy/: the NetworkPolicy guarding the controller's ports, and the alert rules of deploy/monitoring
(the wedge alert among them) — built with kubectl kustomize, in step with the docs and the metrics."""

from __future__ import annotations

import re

import yaml

from queueing.config import load_config
from queueing.controller.metrics import METRICS, PREFIX

from .k8s import ROOT, kustomize


def _one(build: str, kind: str) -> dict:  # type: ignore[type-arg]
    (found,) = [o for o in kustomize(build) if o["kind"] == kind]
    return found


def test_network_policy_admits_the_metrics_port_from_scrapers_and_the_visibility_port() -> None:
    policy = _one("deploy", "NetworkPolicy")
    (dep,) = [
        o
        for o in kustomize("deploy")
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "queueing-controller"
    ]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule, visibility = policy["spec"]["ingress"]
    ports = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert [p["port"] for p in rule["ports"]] == ["metrics"] and "metrics" in ports
    # the aggregated visibility API: kube-apiserver proxies to it (no selector names it)
    assert visibility == {"ports": [{"port": "visibility", "protocol": "TCP"}]} and "visibility" in ports
    assert set(ports) == {"metrics", "health", "visibility"}  # a new port needs a thought here
    # from labelled namespaces only, never from everywhere
    (source,) = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {"queueing.dra.io/metrics-scraper": "true"}
    # the ports are the configured ones
    cm = _one("deploy", "ConfigMap")
    data = yaml.safe_load(cm["data"]["config.yaml"])
    assert ports["metrics"] == int(data["metrics"]["bindAddress"].rsplit(":", 1)[1])
    assert load_config(None, {}).health.scheduling_stall_timeout > 0


def test_alert_rules_build_name_served_metrics_and_match_the_docs() -> None:
    rule = _one("deploy/monitoring", "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "max(queueing_scheduling_stalled) >= 1" in alerts["QueueingSchedulingStalled"]["expr"]
    served = {PREFIX + s.name for s in METRICS} | {
        PREFIX + s.name + x for s in METRICS if s.type == "histogram" for x in ("_bucket", "_sum", "_count")
    }
    used = {m for r in alerts.values() for m in re.findall(r"\b(queueing_[a-z_]+)", r["expr"])}
    assert used and used <= served
    ops = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(
        r"```yaml\n(apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\n.*?)```", ops, re.S
    )
    assert block is not None
    assert yaml.safe_load(block.group(1)) == yaml.safe_load(
        (ROOT / "deploy" / "monitoring" / "prometheus-rule.yaml").read_text()
    )
