"""Just enough of the Kubernetes protobuf encoding to read what kubectl's typed clients post as
``application/vnd.kubernetes.protobuf``: the access reviews of ``kubectl auth can-i`` and the objects
``kubectl create namespace|secret|configmap|job`` and ``kubectl run`` make (Namespace, Secret,
ConfigMap, Job, Pod). The emulator answers in JSON, which those clients accept.

Wire format: the magic ``k8s\\x00`` followed by a ``runtime.Unknown`` message (1: TypeMeta {1: apiVersion,
2: kind}, 2: raw object bytes); the raw object is the kind's generated protobuf message (proto2, field
numbers as in k8s.io/api's ``generated.proto``).

:data:`MESSAGES` lists, per message, the fields decoded into the JSON shape. Go's marshaller writes
every non-pointer field, so a field at its zero value (empty string or message, 0, false) that is not
listed is what the client left unset and is skipped, as is a listed one unless :data:`KEEP_ZERO` names
it (a pointer field, where 0 / false is a value); a field that is not listed but has a value is an
error naming the message and field number (the emulator answers 415: send that object as JSON).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

__all__ = ["MESSAGES", "PROTOBUF", "ProtobufError", "decode_access_review", "decode_object"]

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"  # the content type


class ProtobufError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, Any]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((num, value))
        elif wire == 2:
            length, pos = _varint(buf, pos)
            out.append((num, buf[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _strings(buf: bytes, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for num, value in _fields(buf):
        if num in names and isinstance(value, bytes):
            out[names[num]] = value.decode()
    return out


_RESOURCE_ATTRS = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}
_NON_RESOURCE_ATTRS = {1: "path", 2: "verb"}


def decode_access_review(data: bytes) -> dict[str, Any]:
    """A (Self)SubjectAccessReview in protobuf as the JSON-shaped dict."""
    type_meta, raw = _unknown(data)
    spec: dict[str, Any] = {}
    for num, value in _fields(raw):
        if num != 2:
            continue
        for snum, svalue in _fields(value):
            if snum == 1:
                spec["resourceAttributes"] = _strings(svalue, _RESOURCE_ATTRS)
            elif snum == 2:
                spec["nonResourceAttributes"] = _strings(svalue, _NON_RESOURCE_ATTRS)
            elif snum == 3 and type_meta.get("kind") == "SubjectAccessReview":
                spec["user"] = svalue.decode()
            elif snum == 4 and type_meta.get("kind") == "SubjectAccessReview":
                spec.setdefault("groups", []).append(svalue.decode())
    return {**type_meta, "metadata": {}, "spec": spec}


# --------------------------------------------------------------------------- objects
# kinds of field: a scalar, "map:<value kind>", or the name of a message in MESSAGES;
# a trailing "[]" marks a repeated field
STRING, BYTES, BOOL, INT = "string", "bytes", "bool", "int"
QUANTITY, TIME = "Quantity", "Time"  # resource.Quantity {1: string}; meta.v1.Time {1: seconds, 2: nanos}

MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {
        1: ("name", STRING),
        2: ("generateName", STRING),
        3: ("namespace", STRING),
        5: ("uid", STRING),
        6: ("resourceVersion", STRING),
        7: ("generation", INT),
        8: ("creationTimestamp", TIME),
        11: ("labels", "map:string"),
        12: ("annotations", "map:string"),
        13: ("ownerReferences", "OwnerReference[]"),
        14: ("finalizers", "string[]"),
    },
    "OwnerReference": {
        1: ("kind", STRING),
        3: ("name", STRING),
        4: ("uid", STRING),
        5: ("apiVersion", STRING),
        6: ("controller", BOOL),
        7: ("blockOwnerDeletion", BOOL),
    },
    "LabelSelector": {
        1: ("matchLabels", "map:string"),
        2: ("matchExpressions", "LabelSelectorRequirement[]"),
    },
    "LabelSelectorRequirement": {1: ("key", STRING), 2: ("operator", STRING), 3: ("values", "string[]")},
    "Namespace": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "string[]")},
    "NamespaceStatus": {1: ("phase", STRING)},
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map:bytes"),
        3: ("type", STRING),
        4: ("stringData", "map:string"),
        5: ("immutable", BOOL),
    },
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map:string"),
        3: ("binaryData", "map:bytes"),
        4: ("immutable", BOOL),
    },
    "Job": {1: ("metadata", "ObjectMeta"), 2: ("spec", "JobSpec"), 3: ("status", "Status")},
    "JobSpec": {
        1: ("parallelism", INT),
        2: ("completions", INT),
        3: ("activeDeadlineSeconds", INT),
        4: ("selector", "LabelSelector"),
        5: ("manualSelector", BOOL),
        6: ("template", "PodTemplateSpec"),
        7: ("backoffLimit", INT),
        8: ("ttlSecondsAfterFinished", INT),
        9: ("completionMode", STRING),
        10: ("suspend", BOOL),
        14: ("podReplacementPolicy", STRING),
        15: ("managedBy", STRING),
    },
    "Pod": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec"), 3: ("status", "Status")},
    # a created object's status (JobStatus, PodStatus) is what the client left at its zero values
    "Status": {},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {
        2: ("containers", "Container[]"),
        3: ("restartPolicy", STRING),
        4: ("terminationGracePeriodSeconds", INT),
        5: ("activeDeadlineSeconds", INT),
        6: ("dnsPolicy", STRING),
        7: ("nodeSelector", "map:string"),
        8: ("serviceAccountName", STRING),
        10: ("nodeName", STRING),
        16: ("hostname", STRING),
        17: ("subdomain", STRING),
        19: ("schedulerName", STRING),
        20: ("initContainers", "Container[]"),
        22: ("tolerations", "Toleration[]"),
        24: ("priorityClassName", STRING),
        25: ("priority", INT),
        38: ("schedulingGates", "PodSchedulingGate[]"),
        39: ("resourceClaims", "PodResourceClaim[]"),
    },
    "Container": {
        1: ("name", STRING),
        2: ("image", STRING),
        3: ("command", "string[]"),
        4: ("args", "string[]"),
        5: ("workingDir", STRING),
        6: ("ports", "ContainerPort[]"),
        7: ("env", "EnvVar[]"),
        8: ("resources", "ResourceRequirements"),
        13: ("terminationMessagePath", STRING),
        14: ("imagePullPolicy", STRING),
        16: ("stdin", BOOL),
        17: ("stdinOnce", BOOL),
        18: ("tty", BOOL),
        20: ("terminationMessagePolicy", STRING),
        24: ("restartPolicy", STRING),
    },
    "ContainerPort": {
        1: ("name", STRING),
        2: ("hostPort", INT),
        3: ("containerPort", INT),
        4: ("protocol", STRING),
        5: ("hostIP", STRING),
    },
    "EnvVar": {1: ("name", STRING), 2: ("value", STRING)},
    "ResourceRequirements": {
        1: ("limits", "map:Quantity"),
        2: ("requests", "map:Quantity"),
        3: ("claims", "ResourceClaim[]"),
    },
    "ResourceClaim": {1: ("name", STRING), 2: ("request", STRING)},
    "Toleration": {
        1: ("key", STRING),
        2: ("operator", STRING),
        3: ("value", STRING),
        4: ("effect", STRING),
        5: ("tolerationSeconds", INT),
    },
    "PodSchedulingGate": {1: ("name", STRING)},
    "PodResourceClaim": {
        1: ("name", STRING),
        3: ("resourceClaimName", STRING),
        4: ("resourceClaimTemplateName", STRING),
    },
}
# pointer fields: present means set, so 0 / false / "" is kept
KEEP_ZERO = {
    ("Secret", "immutable"),
    ("ConfigMap", "immutable"),
    *(("JobSpec", f) for f in ("parallelism", "completions", "activeDeadlineSeconds", "manualSelector")),
    *(("JobSpec", f) for f in ("backoffLimit", "ttlSecondsAfterFinished", "suspend")),
    *(("PodSpec", f) for f in ("terminationGracePeriodSeconds", "activeDeadlineSeconds", "priority")),
    ("Toleration", "tolerationSeconds"),
    ("OwnerReference", "controller"),
    ("OwnerReference", "blockOwnerDeletion"),
}
# kind -> (message, apiVersions it is decoded for)
KINDS = {
    "Namespace": ("Namespace", {"v1"}),
    "Secret": ("Secret", {"v1"}),
    "ConfigMap": ("ConfigMap", {"v1"}),
    "Pod": ("Pod", {"v1"}),
    "Job": ("Job", {"batch/v1"}),
}


def _signed(v: int) -> int:
    """A proto2 int32/int64 varint (negative numbers are 10-byte two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _time(buf: bytes) -> str | None:
    seconds = 0
    for num, value in _fields(buf):
        if num == 1 and isinstance(value, int):
            seconds = _signed(value)
    if not buf:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scalar(kind: str, value: Any, where: str) -> Any:
    if kind in (STRING, BYTES, QUANTITY, TIME) or kind in MESSAGES:
        if not isinstance(value, bytes):
            raise ProtobufError(f"{where}: expected a length-delimited field")
        if kind == STRING:
            return value.decode()
        if kind == BYTES:
            return base64.b64encode(value).decode()
        if kind == QUANTITY:
            return next((v.decode() for n, v in _fields(value) if n == 1 and isinstance(v, bytes)), "")
        if kind == TIME:
            return _time(value)
        return _message(kind, value)
    if not isinstance(value, int):
        raise ProtobufError(f"{where}: expected a varint")
    return bool(value) if kind == BOOL else _signed(value)


def _zero(value: Any) -> bool:
    return value in (0, b"")


def _message(name: str, buf: bytes) -> dict[str, Any]:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for num, value in _fields(buf):
        if num not in schema:
            if _zero(value):
                continue
            raise ProtobufError(f"field {num} of {name} is not decoded by the emulator")
        field, kind = schema[num]
        where = f"{name}.{field}"
        if kind.startswith("map:"):
            entry = dict(_fields(value)) if isinstance(value, bytes) else {}
            key = entry.get(1, b"")
            if not isinstance(key, bytes):
                raise ProtobufError(f"{where}: a map key is not a string")
            out.setdefault(field, {})[key.decode()] = _scalar(kind[4:], entry.get(2, b""), where)
        elif kind.endswith("[]"):
            out.setdefault(field, []).append(_scalar(kind[:-2], value, where))
        else:
            decoded = _scalar(kind, value, where)
            if decoded is None or (decoded in ("", 0, False) and (name, field) not in KEEP_ZERO):
                out.pop(field, None)
                continue
            out[field] = decoded
    return out


def _unknown(data: bytes) -> tuple[dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf message")
    type_meta: dict[str, Any] = {}
    raw = b""
    for num, value in _fields(data[len(MAGIC) :]):
        if num == 1 and isinstance(value, bytes):
            type_meta = _strings(value, {1: "apiVersion", 2: "kind"})
        elif num == 2 and isinstance(value, bytes):
            raw = value
    return type_meta, raw


def decode_object(data: bytes) -> dict[str, Any]:
    """A Namespace, Secret, ConfigMap, Pod or Job in protobuf as its JSON-shaped dict
    (ProtobufError naming the kind, or the message and field, it cannot read)."""
    type_meta, raw = _unknown(data)
    kind, api_version = type_meta.get("kind", ""), type_meta.get("apiVersion", "")
    if kind not in KINDS or api_version not in KINDS[kind][1]:
        raise ProtobufError(f"{kind or '<no kind>'} {api_version}: protobuf is not decoded for this kind")
    obj = _message(KINDS[kind][0], raw)
    if obj.get("status") == {}:
        del obj["status"]
    return {"apiVersion": api_version, "kind": kind, **obj}
