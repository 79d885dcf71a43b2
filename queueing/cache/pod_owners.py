"""``PodOwners``: the managed pods by Workload UID label and by controlling owner, kept by deltas.

Binding and eviction ask, for each admitted Workload, for its pods: those labelled with its UID, or
for a Job's Workload every pod the Job controls. A pass over every pod per sync to answer that grew
with the pods the cluster keeps (a finished Job's pods stay until the Job is deleted: 50,000 in the
full end-to-end run). The pods informer's mirror hands every change here (:meth:`PodOwners.apply`),
and a question is answered from one bucket, in key order as a pass over the informer (which lists
in key order) gives them.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from queueing.api.core import Pod
from queueing.api.v1beta1 import WORKLOAD_UID_LABEL
from queueing.dra.verify import VerifyError

__all__ = ["PodOwners"]


def _owners(p: Pod) -> list[str]:
    return [o.uid for o in p.metadata.owner_references or [] if o.controller]


class PodOwners:
    """See the module docstring."""

    def __init__(self) -> None:
        # Workload UID (the label's value; "" for none) -> pod key -> pod
        self._by_uid: dict[str, dict[str, Pod]] = {}
        # controlling owner's UID -> pod key -> pod
        self._by_owner: dict[str, dict[str, Pod]] = {}

    def apply(self, old: Pod | None, new: Pod | None) -> None:
        """An informer delta: ``old`` left (None: it is new), ``new`` is there now (None: deleted)."""
        if old is not None:
            key = old.key
            _drop(self._by_uid, old.labels.get(WORKLOAD_UID_LABEL, ""), key)
            for uid in _owners(old):
                _drop(self._by_owner, uid, key)
        if new is not None:
            key = new.key
            self._by_uid.setdefault(new.labels.get(WORKLOAD_UID_LABEL, ""), {})[key] = new
            for uid in _owners(new):
                self._by_owner.setdefault(uid, {})[key] = new

    def labelled(self, uid: str) -> list[Pod]:
        """The pods labelled with Workload UID ``uid``, in key order."""
        return _sorted(self._by_uid.get(uid))

    def controlled_by(self, uid: str) -> list[Pod]:
        """The pods whose controlling owner has UID ``uid``, in key order."""
        return _sorted(self._by_owner.get(uid))

    def check(self, pods: Iterable[Pod]) -> None:
        """Verify mode: the same buckets built from scratch from ``pods`` (the informer's objects)."""
        fresh = PodOwners()
        for p in pods:
            fresh.apply(None, p)
        for name, mine, theirs in (
            ("by Workload UID label", self._by_uid, fresh._by_uid),
            ("by controlling owner", self._by_owner, fresh._by_owner),
        ):
            got, want = _layout(mine), _layout(theirs)
            if got != want:
                raise VerifyError(f"PodOwners ({name})", got, want)


def _layout(index: dict[str, dict[str, Pod]]) -> dict[str, list[tuple[str, int]]]:
    """Bucket -> its pods' (key, object id), sorted: the same pods as the same objects."""
    return {b: sorted((k, id(p)) for k, p in pods.items()) for b, pods in index.items() if pods}


def _drop(index: dict[str, dict[str, Pod]], bucket: str, key: str) -> None:
    pods = index.get(bucket)
    if pods is not None:
        pods.pop(key, None)
        if not pods:
            del index[bucket]


def _sorted(pods: dict[str, Pod] | None) -> list[Pod]:
    if not pods:
        return []
    return [pods[k] for k in sorted(pods)]
