"""Just enough of the Kubernetes protobuf encoding to read the access reviews ``kubectl auth can-i``
sends (typed clients post built-in objects as ``application/vnd.kubernetes.protobuf``; the emulator
answers in JSON, which they accept).

Wire format: the magic ``k8s\\x00`` followed by a ``runtime.Unknown`` message (1: TypeMeta {1: apiVersion,
2: kind}, 2: raw object bytes); the raw object is the kind's generated protobuf message.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ProtobufError", "decode_access_review"]

MAGIC = b"k8s\x00"


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
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf message")
    type_meta: dict[str, Any] = {}
    raw = b""
    for num, value in _fields(data[len(MAGIC) :]):
        if num == 1:
            type_meta = _strings(value, {1: "apiVersion", 2: "kind"})
        elif num == 2:
            raw = value
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
