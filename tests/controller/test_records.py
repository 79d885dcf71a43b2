"""One record per admitted workload (queueing/controller/records.py) instead of parallel per-UID
dicts: the controller's views by field read and write the same records, releasing a workload forgets
all of it but the devices held until confirmed, and the reconcilers are found by file name."""

from __future__ import annotations

import ast
from collections.abc import ItemsView, Mapping, ValuesView
from pathlib import Path

from queueing.api.v1beta1 import Admission
from queueing.controller.evict import Evicting
from queueing.controller.records import FieldView, FlagView, Records

CONTROLLER = Path(__file__).resolve().parents[2] / "queueing" / "controller"


def test_views_by_field_share_one_record_per_workload() -> None:
    records = Records()
    admissions: FieldView[Admission] = FieldView(records, "admission")
    evicting: FieldView[Evicting] = FieldView(records, "evicting")
    held: FieldView[tuple[float, list[object]]] = FieldView(records, "held")  # type: ignore[type-var]
    todo = FlagView(records, "status_todo")
    adm = Admission.model_validate({"clusterQueue": "team", "podSetAssignments": []})
    admissions["u1"] = adm
    todo.add("u1")
    evicting["u1"] = Evicting("u1", "default/w1", "Preempted", "why", 1.0, None)
    held["u1"] = (9.0, [])
    admissions["u2"] = adm
    rec = records.get("u1")
    assert rec is not None and rec.admission is adm and rec.status_todo and rec.evicting is not None
    assert sorted(admissions) == ["u1", "u2"] and list(todo) == ["u1"] and "u1" in evicting
    records.release("u1")  # the quota given back: only the held devices remain
    assert "u1" not in admissions and "u1" not in todo and "u1" not in evicting
    assert held["u1"] == (9.0, [])
    del held["u1"]
    assert records.get("u1") is None  # nothing left: the record is gone
    assert admissions.pop("u2") is adm and records.get("u2") is None and not records.by_uid


def test_view_reads_agree_with_the_mapping_mixins() -> None:
    """FieldView's own get/items/values (one pass over the records) answer as the Mapping mixins do
    (through ``__getitem__`` per key), over records where the field is set, unset and reset."""
    records = Records()
    admissions: FieldView[Admission] = FieldView(records, "admission")
    evicting: FieldView[Evicting] = FieldView(records, "evicting")
    adm = Admission.model_validate({"clusterQueue": "team", "podSetAssignments": []})
    for i in range(12):
        uid = f"u{i}"
        if i % 3:
            admissions[uid] = adm
        if i % 4 == 0:
            evicting[uid] = Evicting(uid, f"default/w{i}", "Preempted", "why", float(i), None)
    del admissions["u4"]
    records.release("u5")
    for view in (admissions, evicting):
        mixin_items = [(k, view[k]) for k in view]
        assert list(view.items()) == mixin_items == list(ItemsView(view))
        assert list(view.values()) == [v for _, v in mixin_items] == list(ValuesView(view))
        for uid in [*(f"u{i}" for i in range(14)), ""]:
            assert view.get(uid) == Mapping.get(view, uid)
            assert view.get(uid, "none") == Mapping.get(view, uid, "none")
        assert dict(view.items()) == dict(view) and len(view.items()) == len(view)
    assert ("u1", adm) in admissions.items() and ("u4", adm) not in admissions.items()


def test_the_controller_keeps_no_parallel_per_uid_dicts() -> None:
    """Every per-workload field of the controller is a view over its records (checked in the source:
    no ``dict[str, Admission | AdmittedWorkload | Evicting | ...]`` or UID set is created in
    ``ControllerBase.__init__``)."""
    tree = ast.parse((CONTROLLER / "base.py").read_text())
    init = next(
        f
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name == "ControllerBase"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    per_workload = ("Admission", "AdmittedWorkload", "Evicting", "BindingDecision", "PodPlacement")
    for node in ast.walk(init):
        if isinstance(node, ast.AnnAssign):
            ann = ast.unparse(node.annotation)
            target = ast.unparse(node.target)
            if ann.startswith(("dict[", "set[")):
                assert not any(t in ann for t in per_workload), f"{target}: {ann} (use the records)"
    views = {
        "admitted",
        "admissions",
        "evicting",
        "_bindings",
        "_verified",
        "_held",
        "status_todo",
        "pods_ready_seen",
    }
    assigned = {
        ast.unparse(n.targets[0] if isinstance(n, ast.Assign) else n.target): ast.unparse(n.value)
        for n in ast.walk(init)
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
    }
    for name in views:
        assert assigned[f"self.{name}"].startswith(("FieldView(self.records", "FlagView(self.records")), name


def test_the_reconcilers_are_found_by_file_name() -> None:
    want = {
        "source.py": "WorkloadSource",
        "admission.py": "AdmissionExecutor",
        "eviction.py": "Eviction",
        "binding.py": "PlanBinding",
        "queue_sync.py": "QueueSync",
        "controller.py": "Controller",
    }
    for file, cls in want.items():
        tree = ast.parse((CONTROLLER / file).read_text())
        assert any(isinstance(n, ast.ClassDef) and n.name == cls for n in tree.body), (file, cls)
