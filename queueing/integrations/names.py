"""Workload names as Kueue gives them: ``<kind>-<name>-<hash>`` (kind lower-cased, the prefix cut so
that the whole name is at most 63 characters, a valid label value: the name is also the pods'
``queueing.dra.io/pod-group`` label), the hash over kind, name and the owner's UID so that objects of
different kinds, or a re-created object, never share a Workload."""

from __future__ import annotations

import hashlib

__all__ = ["workload_name"]

MAX_NAME = 63  # a label value (Kueue's ShortWorkloadNames)
HASH_LENGTH = 5


def workload_name(kind: str, name: str, uid: str) -> str:
    """``<kind>-<name>-<hash>`` for the object ``name`` of ``kind`` with UID ``uid``."""
    digest = hashlib.sha1(f"{kind}/{name}/{uid}".encode()).hexdigest()[:HASH_LENGTH]
    prefix = f"{kind.lower()}-{name}"[: MAX_NAME - 1 - HASH_LENGTH]
    return f"{prefix}-{digest}"
