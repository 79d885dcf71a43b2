"""The kinds the emulator serves: built-in Kubernetes resources plus those defined by CRD objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUILTINS", "ResourceType", "from_crd"]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    schema: dict[str, Any] | None = None  # openAPIV3Schema (CRDs only)
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    crd: bool = False
    other_versions: tuple[str, ...] = ()  # further served versions of a CRD (same storage, no conversion)

    @property
    def key(self) -> str:
        """Identity of the stored collection: ``group/plural`` (``/pods`` for core)."""
        return f"{self.group}/{self.plural}"

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``plural.group`` as used in API error messages (``workloads.queueing.dra.io``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def versions(self) -> tuple[str, ...]:
        return (self.version, *self.other_versions)

    def discovery(self) -> list[dict[str, Any]]:
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(ALL_VERBS),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        if self.status_subresource:
            out.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if self.key == "/pods":
            out.append({"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                        "verbs": ["create"]})  # fmt: skip
        return out


def _col(name: str, path: str, typ: str = "string", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": typ, "jsonPath": path, "priority": priority}


_AGE = _col("Age", ".metadata.creationTimestamp", "date")

BUILTINS: list[ResourceType] = [
    ResourceType(
        "", "v1", "namespaces", "namespace", "Namespace", False, ("ns",), (), True,
        printer_columns=[_col("Status", ".status.phase"), _AGE],
    ),
    ResourceType(
        "", "v1", "nodes", "node", "Node", False, ("no",), (), True,
        printer_columns=[_AGE],
    ),
    ResourceType(
        "", "v1", "pods", "pod", "Pod", True, ("po",), ("all",), True,
        printer_columns=[
            _col("Status", ".status.phase"),
            _AGE,
            _col("Node", ".spec.nodeName", priority=1),
        ],
    ),
    ResourceType(
        "", "v1", "events", "event", "Event", True, ("ev",), (),
        printer_columns=[
            _col("Type", ".type"),
            _col("Reason", ".reason"),
            _col("Object", ".involvedObject.name"),
            _col("Message", ".message"),
        ],
    ),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",), (), printer_columns=[_AGE]),
    ResourceType("", "v1", "secrets", "secret", "Secret", True, (), (), printer_columns=[_col("Type", ".type"), _AGE]),
    ResourceType("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), (), printer_columns=[_AGE]),
    ResourceType(
        "", "v1", "services", "service", "Service", True, ("svc",), ("all",), True,
        printer_columns=[_col("Type", ".spec.type"), _col("Cluster-IP", ".spec.clusterIP"), _AGE],
    ),
    ResourceType(
        "apps", "v1", "deployments", "deployment", "Deployment", True, ("deploy",), ("all",), True,
        printer_columns=[_col("Replicas", ".spec.replicas", "integer"), _col("Available", ".status.availableReplicas", "integer"), _AGE],
    ),
    ResourceType(
        "apps", "v1", "statefulsets", "statefulset", "StatefulSet", True, ("sts",), ("all",), True,
        printer_columns=[_col("Replicas", ".spec.replicas", "integer"), _AGE],
    ),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True, ("pdb",), (), True,
        printer_columns=[_col("Min Available", ".spec.minAvailable"), _col("Max Unavailable", ".spec.maxUnavailable"), _AGE],
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True, printer_columns=[_AGE]),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True,
                 printer_columns=[_col("Role", ".roleRef.name"), _AGE]),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False, printer_columns=[_AGE]),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", False,
                 printer_columns=[_col("Role", ".roleRef.name"), _AGE]),
    # v1beta1 (Kubernetes 1.34/1.35) and v1 (1.36+) are served: the same objects, as the shapes agree
    ResourceType("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicies", "mutatingadmissionpolicy",
                 "MutatingAdmissionPolicy", False, printer_columns=[_AGE], other_versions=("v1",)),
    ResourceType("admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicybindings",
                 "mutatingadmissionpolicybinding", "MutatingAdmissionPolicyBinding", False, printer_columns=[_AGE],
                 other_versions=("v1",)),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
                 "SelfSubjectAccessReview", False),
    ResourceType("authorization.k8s.io", "v1", "subjectaccessreviews", "subjectaccessreview",
                 "SubjectAccessReview", False),
    ResourceType("events.k8s.io", "v1", "events", "event", "Event", True, (), (),
                 printer_columns=[_col("Type", ".type"), _col("Reason", ".reason"), _col("Note", ".note")]),
    ResourceType(
        "batch", "v1", "jobs", "job", "Job", True, (), ("all",), True,
        printer_columns=[
            _col("Suspended", ".spec.suspend", "boolean"),
            _col("Active", ".status.active", "integer"),
            _col("Succeeded", ".status.succeeded", "integer"),
            _AGE,
        ],
    ),
    ResourceType(
        "resource.k8s.io", "v1", "resourceslices", "resourceslice", "ResourceSlice", False,
        printer_columns=[_col("Node", ".spec.nodeName"), _col("Driver", ".spec.driver"),
                         _col("Pool", ".spec.pool.name"), _AGE],
    ),
    ResourceType(
        "resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", False, printer_columns=[_AGE]
    ),
    ResourceType(
        "resource.k8s.io", "v1", "resourceclaims", "resourceclaim", "ResourceClaim", True, (), (), True,
        printer_columns=[_AGE],
    ),
    ResourceType(
        "resource.k8s.io", "v1", "resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate",
        True, printer_columns=[_AGE],
    ),
    ResourceType(
        "scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", False, ("pc",),
        printer_columns=[_col("Value", ".value", "integer"), _col("Global-Default", ".globalDefault", "boolean"),
                         _AGE],
    ),
    ResourceType(
        "coordination.k8s.io", "v1", "leases", "lease", "Lease", True,
        printer_columns=[_col("Holder", ".spec.holderIdentity"), _AGE],
    ),
    # stored as kube-apiserver stores them; the emulator's aggregation layer (aggregation.py) is
    # configured in code, not from these (a Service has no endpoints here)
    ResourceType(
        "apiregistration.k8s.io", "v1", "apiservices", "apiservice", "APIService", False, (), ("api-extensions",), True,
        printer_columns=[_col("Service", ".spec.service.name"), _AGE],
    ),
    ResourceType(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
        "CustomResourceDefinition", False, ("crd", "crds"), ("api-extensions",), True,
        printer_columns=[_col("Created At", ".metadata.creationTimestamp")],
    ),
]  # fmt: skip


def from_crd(crd: dict[str, Any]) -> ResourceType:
    """The resource a CRD object defines (its storage version first; other served versions alias it)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not versions:
        raise ValueError("spec.versions: Required value: must have at least one served version")
    versions.sort(key=lambda v: not v.get("storage", False))
    main = versions[0]
    plural = names.get("plural") or ""
    kind = names.get("kind") or ""
    if not plural or not kind or not spec.get("group"):
        raise ValueError("spec.group, spec.names.plural and spec.names.kind are required")
    return ResourceType(
        group=spec["group"],
        version=main["name"],
        plural=plural,
        singular=names.get("singular") or kind.lower(),
        kind=kind,
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        status_subresource="status" in (main.get("subresources") or {}),
        schema=(main.get("schema") or {}).get("openAPIV3Schema"),
        printer_columns=list(main.get("additionalPrinterColumns") or []),
        crd=True,
        other_versions=tuple(v["name"] for v in versions[1:]),
    )
