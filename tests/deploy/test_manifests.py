"""deploy/: the kustomizations build, every object validates, the security settings hold, RBAC is minimal."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.commands import crds as crds_cmd
from queueing.config import load_config

from .k8s import ROOT, kustomize, load_yaml_docs, validation_errors

BUILDS = {
    "deploy": "1.34.0",
    "deploy/overlays/postgres": "1.34.0",
    "deploy/overlays/kubernetes-1.36": "1.36.0",
    "deploy/overlays/kueue-labels": "1.34.0",
}
WILDCARD = "*"


def objects(build: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in kustomize(build) if o["kind"] == kind]


def one(build: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects(build, kind) if o["metadata"]["name"].startswith(name)]
    return found


@pytest.mark.parametrize("build", BUILDS)
def test_kustomization_builds_and_every_object_validates(build: str) -> None:
    objs = kustomize(build)
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "CustomResourceDefinition", "Deployment", "ClusterRole", "Role", "Service"} <= kinds
    problems = [p for o in objs for p in validation_errors(o, BUILDS[build])]
    assert problems == []


def test_validation_catches_a_bad_object() -> None:
    """The validator is not a no-op: an unknown field and a wrong type are reported."""
    dep = yaml.safe_load(yaml.safe_dump(one("deploy", "Deployment", "queueing-controller")))
    dep["spec"]["replicas"] = "two"
    dep["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    assert validation_errors(dep) != []
    pdb = one("deploy", "PodDisruptionBudget", "queueing-controller")
    assert validation_errors({**pdb, "spec": {"minAvailable": 1, "selector": {"matchLabelz": {}}}}) != []


def test_all_crds_are_deployed() -> None:
    deployed = {o["metadata"]["name"] for o in objects("deploy", "CustomResourceDefinition")}
    generated = {
        f"{c['spec']['names']['plural']}.{c['spec']['group']}"
        for c in __import__("queueing.api.crdgen", fromlist=["all_crds"]).all_crds()
    }
    assert deployed == generated
    # crds/kustomization.yml lists exactly the generated files
    listed = yaml.safe_load((ROOT / "crds" / "kustomization.yml").read_text())["resources"]
    assert sorted(listed) == sorted(crds_cmd.generated())


def _pod_specs(build: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in kustomize(build):
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            out.append((f"{o['kind']} {o['metadata']['name']}", o["spec"]["template"]["spec"]))
    return out


@pytest.mark.parametrize("build", ["deploy", "deploy/overlays/postgres"])
def test_pods_run_restricted(build: str) -> None:
    specs = _pod_specs(build)
    assert specs
    for name, spec in specs:
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True, name
        assert psc["runAsUser"] != 0, name
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", name
        for c in spec["containers"]:
            sc = c["securityContext"]
            where = f"{name} container {c['name']}"
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in sc["capabilities"], where
            assert sc.get("privileged") is not True, where
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", where
            res = c["resources"]
            assert {"cpu", "memory"} <= set(res["requests"]) and "memory" in res["limits"], where
            assert c.get("livenessProbe") and c.get("readinessProbe"), where
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name


def test_controller_deployment() -> None:
    dep = one("deploy", "Deployment", "queueing-controller")
    assert dep["spec"]["replicas"] == 2
    spec = dep["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "queueing-controller"
    (c,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e for e in c["env"]}
    assert env["QUEUEING_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    config_path = env["QUEUEING_CONFIG"]["value"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # the configuration file comes from the generated ConfigMap, the database URL from the Secret
    cm_volume = volumes[mounts[config_path]["name"]]
    cm = one("deploy", "ConfigMap", "queueing-config")
    assert cm_volume["configMap"]["name"] == cm["metadata"]["name"]  # hash-suffixed: rollout on change
    config_text = cm["data"][mounts[config_path]["subPath"]]
    data = yaml.safe_load(config_text)
    url_file = Path(data["databaseURLFile"])
    secret_volume = volumes[mounts[str(url_file.parent)]["name"]]
    assert secret_volume["secret"]["secretName"] == "queueing-database"
    assert [i["path"] for i in secret_volume["secret"]["items"]] == [url_file.name]
    assert "/tmp" in mounts and "emptyDir" in volumes[mounts["/tmp"]["name"]]
    # the ports in the configuration are the ports the probes, the Service and Prometheus use
    assert data["leaderElection"]["leaderElect"] is True
    assert ports["metrics"] == int(data["metrics"]["bindAddress"].rsplit(":", 1)[1])
    assert ports["health"] == int(data["health"]["healthProbeBindAddress"].rsplit(":", 1)[1])
    svc = one("deploy", "Service", "queueing-metrics")
    ann = svc["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == ports["metrics"]
    assert ann["prometheus.io/path"] == "/metrics"
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]  # what a ServiceMonitor selects
    # the lease RBAC names the configured lease
    role = one("deploy", "Role", "queueing-leader-election")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [data["leaderElection"]["resourceName"]]


def test_deployed_config_is_valid(tmp_path: Path) -> None:
    cm = one("deploy", "ConfigMap", "queueing-config")
    data = yaml.safe_load(cm["data"]["config.yaml"])
    secret = tmp_path / "url"
    secret.write_text("postgresql+asyncpg://queueing@db/queueing")
    data["databaseURLFile"] = str(secret)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    c = load_config(str(path), {"QUEUEING_NAMESPACE": "queueing-system"})
    assert c.lease_namespace == one("deploy", "Role", "queueing-leader-election")["metadata"]["namespace"]


def test_pod_disruption_budget_keeps_one_replica() -> None:
    pdb = one("deploy", "PodDisruptionBudget", "queueing-controller")
    dep = one("deploy", "Deployment", "queueing-controller")
    assert pdb["spec"]["minAvailable"] == 1 < dep["spec"]["replicas"]
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


# What the controller does, per issues 5 and 6 (cluster-wide), as (group, resource) -> verbs.
EXPECTED_CLUSTER_RULES: dict[tuple[str, str], set[str]] = {
    **{("queueing.dra.io", r): {"list", "watch"} for r in ("topologies", "workloadpriorityclasses")},
    # the resource-in-use finalizer
    **{
        ("queueing.dra.io", r): {"list", "watch", "patch"}
        for r in ("clusterqueues", "cohorts", "localqueues", "resourceflavors")
    },
    ("queueing.dra.io", "workloads"): {"get", "list", "watch", "create", "patch", "delete"},
    **{
        ("queueing.dra.io", f"{r}/status"): {"patch"}
        for r in ("clusterqueues", "localqueues", "workloads", "resourceflavors", "cohorts")
    },
    ("batch", "jobs"): {"list", "watch", "patch"},
    ("", "pods"): {"list", "watch", "patch", "delete"},
    ("resource.k8s.io", "resourceclaims"): {"list", "watch"},
    ("resource.k8s.io", "resourceclaims/status"): {"patch"},
    **{
        ("resource.k8s.io", r): {"list", "watch"}
        for r in ("resourceclaimtemplates", "resourceslices", "deviceclasses")
    },
    ("", "nodes"): {"list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    ("", "events"): {"create", "get", "patch"},
}


def _granted(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                out.setdefault((g, r), set()).update(rule["verbs"])
    return out


def test_rbac_has_no_wildcards_and_no_escalation() -> None:
    for o in kustomize("deploy"):
        if o["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in o["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert WILDCARD not in rule.get(key, []), (o["metadata"]["name"], rule)
                assert not any(WILDCARD in v for v in rule.get(key, [])), (o["metadata"]["name"], rule)
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            assert not {"secrets", "roles", "clusterroles", "rolebindings", "clusterrolebindings"} & set(
                rule["resources"]
            ), "the controller needs no access to Secrets or RBAC objects"


def test_cluster_role_grants_exactly_what_the_controller_uses() -> None:
    granted = _granted(one("deploy", "ClusterRole", "queueing-controller")["rules"])
    assert granted == EXPECTED_CLUSTER_RULES


def test_leases_only_in_the_controllers_namespace() -> None:
    role = one("deploy", "Role", "queueing-leader-election")
    assert role["metadata"]["namespace"] == "queueing-system"
    assert _granted(role["rules"]) == {("coordination.k8s.io", "leases"): {"create", "get", "update"}}
    binding = one("deploy", "RoleBinding", "queueing-leader-election")
    crb = one("deploy", "ClusterRoleBinding", "queueing-controller")
    sa = one("deploy", "ServiceAccount", "queueing-controller")
    for b in (binding, crb):
        assert b["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": sa["metadata"]["name"],
                "namespace": sa["metadata"]["namespace"],
            }
        ]


@pytest.mark.parametrize(
    ("build", "version"), [("deploy", "v1beta1"), ("deploy/overlays/kubernetes-1.36", "v1")]
)
def test_mutating_admission_policy_suspends_labelled_jobs(build: str, version: str) -> None:
    (policy,) = objects(build, "MutatingAdmissionPolicy")
    (binding,) = objects(build, "MutatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == f"admissionregistration.k8s.io/{version}"
    assert "namespace" not in policy["metadata"] and "namespace" not in binding["metadata"]  # cluster-scoped
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (["batch"], ["jobs"], ["CREATE"])
    assert spec["matchConstraints"]["objectSelector"]["matchExpressions"] == [
        {"key": "queueing.dra.io/queue-name", "operator": "Exists"}
    ]
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    expr = re.sub(r"\s+", "", mutation["applyConfiguration"]["expression"])
    assert expr == "Object{spec:Object.spec{suspend:true}}"
    assert spec["failurePolicy"] == "Fail"
    assert len(objects("deploy/overlays/kubernetes-1.36", "MutatingAdmissionPolicy")) == 1


def test_postgres_overlay() -> None:
    sts = one("deploy/overlays/postgres", "StatefulSet", "queueing-postgres")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    svc = one("deploy/overlays/postgres", "Service", "queueing-postgres")
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    url = one("deploy/overlays/postgres", "Secret", "queueing-database")["stringData"]["url"]
    creds = one("deploy/overlays/postgres", "Secret", "queueing-postgres")["stringData"]
    assert url == (
        f"postgresql+asyncpg://{creds['username']}:{creds['password']}@"
        f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{svc['spec']['ports'][0]['port']}/"
        f"{creds['database']}"
    )
    # the base's objects are all still there
    base = {(o["kind"], o["metadata"]["name"]) for o in kustomize("deploy")}
    assert base <= {(o["kind"], o["metadata"]["name"]) for o in kustomize("deploy/overlays/postgres")}
    netpol = one("deploy/overlays/postgres", "NetworkPolicy", "queueing-postgres")
    ctrl = one("deploy", "Deployment", "queueing-controller")["spec"]["template"]["metadata"]["labels"]
    assert netpol["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"].items() <= ctrl.items()


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage build"
    user = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")][-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER (runAsNonRoot can check it)"
    dep = one("deploy", "Deployment", "queueing-controller")
    assert int(uid) == dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    entry = [ln for ln in lines if ln.upper().startswith("ENTRYPOINT")][-1]
    assert entry.split(None, 1)[1] == '["queueing", "run"]'
    assert any("venv" in ln for ln in lines)
    # the Alembic migrations come with the package (the build maps the top-level migrations/ into it)
    assert not [ln for ln in lines if ln.upper().startswith("COPY") and "migrations" in ln]
    assert "queueing.ledger.migrate" in text  # the build checks that the installed package has them
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_example_configuration_in_base_matches_the_reference_names() -> None:
    """Every key in deploy/base/config.yaml is a documented field."""
    from queueing.config import reference_fields

    documented = {p for p, _ in reference_fields()}

    def keys(d: Any, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            path = f"{prefix}{k}"
            out.append(path)
            if isinstance(v, dict) and path != "admissionFairSharing.resourceWeights":
                out.extend(keys(v, path + "."))
        return out

    assert set(keys(load_yaml_docs(ROOT / "deploy" / "base" / "config.yaml")[0])) <= documented
