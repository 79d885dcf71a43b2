"""An RBAC authorizer for the emulator, evaluating Role/ClusterRole/RoleBinding/ClusterRoleBinding
objects the way the API server's RBAC authorizer does, and recording which rules were used.

    rbac = RbacAuthorizer.from_store(emu.store)        # the RBAC objects created in the emulator
    rbac = RbacAuthorizer.from_objects(yaml_docs)      # or a fixed list (e.g. ``kubectl kustomize deploy``)
    emu.authorizer = rbac
    ...
    rbac.denied          # requests refused (RequestAttributes)
    rbac.unused()        # granted (rule, apiGroup, resource, verb) combinations never exercised

Subjects: ``User``, ``Group`` and ``ServiceAccount``; a service-account user
``system:serviceaccount:<ns>:<name>`` is also in the groups ``system:serviceaccounts``,
``system:serviceaccounts:<ns>`` and ``system:authenticated``. Users in ``superusers`` (default
``admin``, the emulator's default kubeconfig user) bypass RBAC, like ``system:masters``. Rules:
``apiGroups``, ``resources`` (``*``, ``pods/status``, ``*/status``), ``verbs`` (``*``),
``resourceNames``. Aggregated ClusterRoles and non-resource URLs are not evaluated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from queueing.dra.verify import VerifyError
from queueing.testing.emulator import RequestAttributes
from queueing.testing.store import Store
from queueing.verify import verify_from_env

__all__ = ["Grant", "RbacAuthorizer"]


@dataclass(frozen=True, order=True)
class Grant:
    """One granted combination, named after the role and rule granting it."""

    role: str  # "ClusterRole/name" or "Role/ns/name"
    rule: int
    api_group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        group = self.api_group or "core"
        return f"{self.role} rule {self.rule}: {self.verb} {self.resource} ({group})"


def _matches(values: list[str] | None, value: str) -> bool:
    return values is not None and ("*" in values or value in values)


def _resource_matches(resources: list[str] | None, resource: str, sub: str) -> bool:
    full = f"{resource}/{sub}" if sub else resource
    for r in resources or []:
        if r == "*" or r == full:
            return True
        if sub and r == f"*/{sub}":
            return True
    return False


_Decision = tuple[str, int] | None  # (role label, rule index) of the granting rule, or None: denied


@dataclass
class RbacAuthorizer:
    """Decisions are cached per (user, verb, group, resource, subresource, namespace, and name when a
    rule names resources), until any RBAC object changes: the source's objects are compared by
    identity with those the cache was built from (a stored object is never changed in place; a list
    given to ``from_objects`` is read as it was). ``verify`` (``QUEUEING_VERIFY=1``): every cached
    decision is checked against a fresh evaluation."""

    source: Callable[[], Iterable[dict[str, Any]]]
    superusers: frozenset[str] = frozenset({"admin"})
    denied: list[RequestAttributes] = field(default_factory=list)
    used: set[Grant] = field(default_factory=set)
    verify: bool = field(default_factory=lambda: verify_from_env(os.environ))
    _objects: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    _names_matter: bool = field(default=False, repr=False)
    _decisions: dict[tuple[str, ...], _Decision] = field(default_factory=dict, repr=False)

    @classmethod
    def from_objects(
        cls, objects: Iterable[dict[str, Any]], superusers: Iterable[str] = ("admin",)
    ) -> RbacAuthorizer:
        docs = [o for o in objects if isinstance(o, dict)]
        return cls(lambda: docs, frozenset(superusers))

    @classmethod
    def from_store(cls, store: Store, superusers: Iterable[str] = ("admin",)) -> RbacAuthorizer:
        def objects() -> Iterable[dict[str, Any]]:
            for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
                rt = store.types.get(f"rbac.authorization.k8s.io/{plural}")
                if rt is not None:
                    yield from store.objects[rt.key].values()

        return cls(objects, frozenset(superusers))

    # ------------------------------------------------------------ evaluation
    def _index(self) -> tuple[dict[tuple[str, str, str], dict[str, Any]], list[dict[str, Any]]]:
        roles: dict[tuple[str, str, str], dict[str, Any]] = {}
        bindings: list[dict[str, Any]] = []
        for obj in self.source():
            kind = obj.get("kind")
            meta = obj.get("metadata") or {}
            if kind == "ClusterRole":
                roles[("ClusterRole", "", meta.get("name", ""))] = obj
            elif kind == "Role":
                roles[("Role", meta.get("namespace", "") or "", meta.get("name", ""))] = obj
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                bindings.append(obj)
        return roles, bindings

    @staticmethod
    def _groups(user: str) -> set[str]:
        groups = {"system:authenticated"} if user != "system:anonymous" else {"system:unauthenticated"}
        parts = user.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            groups |= {"system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"}
        return groups

    @classmethod
    def _subject_matches(cls, subject: dict[str, Any], user: str, binding_ns: str) -> bool:
        kind = subject.get("kind")
        if kind == "User":
            return bool(subject.get("name") == user)
        if kind == "Group":
            return subject.get("name") in cls._groups(user)
        if kind == "ServiceAccount":
            ns = subject.get("namespace") or binding_ns
            return user == f"system:serviceaccount:{ns}:{subject.get('name')}"
        return False

    def _role_refs(self, a: RequestAttributes) -> Iterable[tuple[str, dict[str, Any]]]:
        roles, bindings = self._index()
        for b in bindings:
            meta = b.get("metadata") or {}
            bns = meta.get("namespace", "") or ""
            if b.get("kind") == "RoleBinding" and bns != a.namespace:
                continue
            if not any(self._subject_matches(s, a.user, bns) for s in b.get("subjects") or []):
                continue
            ref = b.get("roleRef") or {}
            if ref.get("kind") == "ClusterRole":
                key = ("ClusterRole", "", ref.get("name", ""))
                label = f"ClusterRole/{key[2]}"
            else:
                key = ("Role", bns, ref.get("name", ""))
                label = f"Role/{bns}/{key[2]}"
            role = roles.get(key)
            if role is not None:
                yield label, role

    def __call__(self, a: RequestAttributes) -> bool:
        if a.user in self.superusers:
            return True
        objects = tuple(self.source())
        was = self._objects
        if (
            was is None
            or len(was) != len(objects)
            or any(x is not y for x, y in zip(was, objects, strict=True))
        ):
            self._objects = objects  # held, so that no other object can take their ids
            self._decisions.clear()
            self._names_matter = any(
                isinstance(r, dict) and r.get("resourceNames")
                for o in objects
                if o.get("kind") in ("Role", "ClusterRole")
                for r in o.get("rules") or []
            )
        key: tuple[str, ...] = (a.user, a.verb, a.group, a.resource, a.subresource, a.namespace)
        if self._names_matter:
            key += (a.name,)
        if key in self._decisions:
            decision = self._decisions[key]
            if self.verify and (fresh := self._decide(a)) != decision:
                raise VerifyError("cached RBAC decision", decision, fresh, str(key))
        else:
            decision = self._decisions[key] = self._decide(a)
        if decision is None:
            self.denied.append(a)
            return False
        self.used.add(Grant(decision[0], decision[1], a.group, a.resource_key, a.verb))
        return True

    def _decide(self, a: RequestAttributes) -> _Decision:
        """The rule that grants the request (its role's label and its index), or None."""
        for label, role in self._role_refs(a):
            for i, rule in enumerate(role.get("rules") or []):
                if not _matches(rule.get("verbs"), a.verb):
                    continue
                if not _matches(rule.get("apiGroups"), a.group):
                    continue
                if not _resource_matches(rule.get("resources"), a.resource, a.subresource):
                    continue
                names = rule.get("resourceNames")
                if names and a.name not in names:
                    continue
                return label, i
        return None

    # ------------------------------------------------------------ reporting
    def granted(self, subject_user: str) -> set[Grant]:
        """Every explicit (rule, apiGroup, resource, verb) the user is granted (wildcards kept as ``*``)."""
        out: set[Grant] = set()
        probe = RequestAttributes(subject_user, "", "", "", "", "", "", "", "", True)
        _, bindings = self._index()
        for ns in {""} | {(b.get("metadata") or {}).get("namespace", "") or "" for b in bindings}:
            for label, role in self._role_refs(_with_namespace(probe, ns)):
                for i, rule in enumerate(role.get("rules") or []):
                    for g in rule.get("apiGroups") or []:
                        for r in rule.get("resources") or []:
                            for v in rule.get("verbs") or []:
                                out.add(Grant(label, i, g, r, v))
        return out

    def unused(self, subject_user: str) -> list[Grant]:
        """Granted combinations no request of ``subject_user`` has used (wildcards never count as used)."""
        used = {(g.role, g.rule, g.api_group, g.resource, g.verb) for g in self.used}
        return sorted(
            g
            for g in self.granted(subject_user)
            if (g.role, g.rule, g.api_group, g.resource, g.verb) not in used
        )


def _with_namespace(a: RequestAttributes, ns: str) -> RequestAttributes:
    return RequestAttributes(
        a.user, a.verb, a.group, a.version, a.resource, a.subresource, ns, a.name, a.path, True
    )
