"""Reasons as data: what blocks a workload, rendered for the workload it is written to.

The scheduling cycle gives one pending reason to a whole run of workloads of one shape (the head
did not fit, so neither do the rest: ``cycle``), and the placer's caches answer for every workload
of a shape. A reason's text must therefore not be the head's: a :class:`Why` keeps the parts that
name objects of the workload as references, by what is the same for every workload of the shape —
a pod by its pod set and index (:class:`PodRef`), a claim by the pod and the name written in the
pod spec (:class:`PodClaimRef`) — and :meth:`Why.render` writes them for the workload at hand
(``team-b/notebook-2-main-0``, claim ``gpus``). Everything else in a reason (nodes, classes,
flavors, amounts) is the same for every workload of the shape. Whys compare by value, which is
what the simulator compares between cycles to report only changed reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Part", "PodClaimRef", "PodRef", "Why", "pod_name"]


def pod_name(workload: str, pod_set: str, index: int) -> str:
    """Name of the ``index``-th pod of a pod set in plans (``<workload>-<podset>-<index>``)."""
    return f"{workload}-{pod_set}-{index}"


@dataclass(frozen=True, slots=True)
class PodRef:
    """The ``index``-th pod of pod set ``pod_set`` of the workload a reason is written to."""

    pod_set: str
    index: int


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """A claim of a pod of that workload, by its name in the pod spec (``spec.resourceClaims[].name``)."""

    pod_set: str
    index: int
    name: str


Part = str | PodRef | PodClaimRef


@dataclass(frozen=True, slots=True)
class Why:
    """A reason's message as data. ``kind``: what blocks (``placement``: the gang does not fit on
    the nodes; ``allocation-error``: the allocator rejects the input); ``parts``: the text, with
    the workload's pods and claims as references; ``device_class``, ``node`` and ``numbers``
    (name -> amount, e.g. ``short``) say the same for programs."""

    kind: str
    parts: tuple[Part, ...]
    device_class: str | None = None
    node: str | None = None
    numbers: tuple[tuple[str, Fraction], ...] = ()

    def render(self, key: str | None = None) -> str:
        """The text for the workload ``key`` (``namespace/name``). Without a key, pods read
        ``<workload>-<podset>-<index>``: the text for no workload in particular."""
        ns, _, name = key.partition("/") if key is not None else ("", "", "<workload>")
        out: list[str] = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, PodRef):
                pod = pod_name(name, p.pod_set, p.index)
                out.append(f"{ns}/{pod}" if ns else pod)
            else:
                out.append(p.name)
        return "".join(out)

    def prefixed(self, text: str) -> Why:
        return Why(self.kind, (text, *self.parts), self.device_class, self.node, self.numbers)

    @property
    def pod(self) -> PodRef | None:
        """The first pod the reason names."""
        for p in self.parts:
            if isinstance(p, PodRef):
                return p
            if isinstance(p, PodClaimRef):
                return PodRef(p.pod_set, p.index)
        return None

    @property
    def claim(self) -> str | None:
        """The first claim the reason names, as written in the pod spec."""
        return next((p.name for p in self.parts if isinstance(p, PodClaimRef)), None)
