"""What the controller keeps about each workload it admitted: one :class:`WorkloadRecord` per UID.

A record lives from the admission (the ledger committed it) until the quota is given back and no
device of its plan is held any more. The controller's readers see its fields through views by
field (``Controller.admitted``: uid -> admitted workload, ``admissions``: uid -> the plan,
``evicting``, ``status_todo``, ...): a view reads and writes the records, so the state is in one
place, and forgetting a workload (:meth:`Records.release`) forgets all of it at once.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, MutableMapping, MutableSet, ValuesView
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar, overload

from queueing.api.v1beta1 import Admission, PodPlacement
from queueing.controller.evict import Evicting
from queueing.dra.binding import BindingDecision
from queueing.scheduling.snapshot import AdmittedWorkload

__all__ = ["FieldView", "FlagView", "Orphan", "Records", "WorkloadRecord"]

V = TypeVar("V")


@dataclass
class WorkloadRecord:
    uid: str
    admitted: AdmittedWorkload | None = None  # how the core sees it (None: quota given back)
    admission: Admission | None = None  # status.admission: the plan
    status_todo: bool = False  # admitted in the ledger, the status write not confirmed yet
    evicting: Evicting | None = None  # an eviction in progress (pods/claims not gone yet)
    pods_ready_seen: bool = False  # all its pods were Ready once
    binding: tuple[Admission, BindingDecision] | None = None  # plan binding: node only or Full
    verified: Admission | None = None  # the admission whose allocations were checked against the plan
    # hold until confirmed: the devices of a released admission, until the deadline
    held: tuple[float, list[PodPlacement]] | None = None

    def empty(self) -> bool:
        return all(getattr(self, f.name) in (None, False) for f in fields(self) if f.name != "uid")


@dataclass(frozen=True)
class Orphan:
    """An admission whose Workload was deleted while its Job runs on: the ledger keeps it open for the
    Workload the Job gets next, which takes it over (``WorkloadSource._adopt_orphans``)."""

    uid: str  # the deleted Workload
    key: str  # its namespace/name
    owner_uid: str  # its Job
    owner_key: str
    admission: Admission  # the ledger's plan


class Records:
    """The records by UID."""

    def __init__(self) -> None:
        self.by_uid: dict[str, WorkloadRecord] = {}

    def get(self, uid: str) -> WorkloadRecord | None:
        return self.by_uid.get(uid)

    def of(self, uid: str) -> WorkloadRecord:
        rec = self.by_uid.get(uid)
        if rec is None:
            rec = self.by_uid[uid] = WorkloadRecord(uid)
        return rec

    def tidy(self, uid: str) -> None:
        rec = self.by_uid.get(uid)
        if rec is not None and rec.empty():
            del self.by_uid[uid]

    def release(self, uid: str) -> None:
        """The quota is given back: everything but the devices held until confirmed is forgotten."""
        rec = self.by_uid.get(uid)
        if rec is None:
            return
        held = rec.held
        self.by_uid[uid] = WorkloadRecord(uid, held=held)
        self.tidy(uid)

    def clear(self, *names: str) -> None:
        """Reset these fields in every record (after a restart of the record)."""
        for uid, rec in list(self.by_uid.items()):
            for n in names:
                setattr(rec, n, False if isinstance(getattr(rec, n), bool) else None)
            self.tidy(uid)

    def __iter__(self) -> Iterator[WorkloadRecord]:
        return iter(list(self.by_uid.values()))


class FieldView(MutableMapping[str, V], Generic[V]):
    """uid -> one field of the records (the records whose field is set)."""

    def __init__(self, records: Records, name: str) -> None:
        self._records = records
        self._name = name

    def __getitem__(self, uid: str) -> V:
        rec = self._records.get(uid)
        v = getattr(rec, self._name) if rec is not None else None
        if v is None:
            raise KeyError(uid)
        out: V = v
        return out

    def __setitem__(self, uid: str, value: V) -> None:
        setattr(self._records.of(uid), self._name, value)

    def __delitem__(self, uid: str) -> None:
        rec = self._records.get(uid)
        if rec is None or getattr(rec, self._name) is None:
            raise KeyError(uid)
        setattr(rec, self._name, None)
        self._records.tidy(uid)

    def __iter__(self) -> Iterator[str]:
        return iter([r.uid for r in self._records if getattr(r, self._name) is not None])

    def __len__(self) -> int:
        return sum(1 for r in self._records if getattr(r, self._name) is not None)

    def __contains__(self, uid: object) -> bool:
        rec = self._records.get(uid) if isinstance(uid, str) else None
        return rec is not None and getattr(rec, self._name) is not None

    # the Mapping mixins' get/items/values go through __getitem__ per key (a miss raises and catches
    # a KeyError): these read the records once; the answers are the mixins' (tests compare them)
    @overload
    def get(self, uid: str, /) -> V | None: ...
    @overload
    def get(self, uid: str, /, default: Any) -> Any: ...
    def get(self, uid: str, /, default: Any = None) -> Any:
        rec = self._records.by_uid.get(uid)
        v = getattr(rec, self._name) if rec is not None else None
        return default if v is None else v

    def items(self) -> ItemsView[str, V]:
        return _FieldItems(self)

    def values(self) -> ValuesView[V]:
        return _FieldValues(self)

    def _pairs(self) -> list[tuple[str, V]]:
        name = self._name
        return [
            (r.uid, v) for r in list(self._records.by_uid.values()) if (v := getattr(r, name)) is not None
        ]

    def clear(self) -> None:
        self._records.clear(self._name)


class _FieldItems(ItemsView[str, V]):
    _mapping: FieldView[V]

    def __iter__(self) -> Iterator[tuple[str, V]]:
        return iter(self._mapping._pairs())


class _FieldValues(ValuesView[V]):
    _mapping: FieldView[V]

    def __iter__(self) -> Iterator[V]:
        return iter([v for _, v in self._mapping._pairs()])


class FlagView(MutableSet[str]):
    """The UIDs whose record has a flag set."""

    def __init__(self, records: Records, name: str) -> None:
        self._records = records
        self._name = name

    def __contains__(self, uid: object) -> bool:
        rec = self._records.get(uid) if isinstance(uid, str) else None
        return rec is not None and bool(getattr(rec, self._name))

    def __iter__(self) -> Iterator[str]:
        return iter([r.uid for r in self._records if getattr(r, self._name)])

    def __len__(self) -> int:
        return sum(1 for r in self._records if getattr(r, self._name))

    def add(self, uid: str) -> None:
        setattr(self._records.of(uid), self._name, True)

    def discard(self, uid: str) -> None:
        rec = self._records.get(uid)
        if rec is not None:
            setattr(rec, self._name, False)
            self._records.tidy(uid)

    def clear(self) -> None:
        self._records.clear(self._name)
