"""The three patch formats of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
a simplified strategic merge patch.

Strategic merge here: maps merge recursively like a merge patch; a list of maps is merged element by
element by its Kubernetes merge key (``name`` for containers, volumes, env, scheduling gates, resource
claims...; ``type`` for conditions; ``uid`` for owner references; ``containerPort``, ``mountPath``, ...)
when every element carries that key, otherwise replaced; ``finalizers`` merges as a set; ``$patch:
delete|replace`` on a map or list element is honoured; ``$setElementOrder/...``, ``$retainKeys`` and
``$deleteFromPrimitiveList/...`` directives are accepted and (mostly) ignored.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PatchError", "json_patch", "merge_patch", "strategic_merge_patch"]


class PatchError(ValueError):
    pass


def merge_patch(target: Any, patch: Any, take: bool = False) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied, as a new object: ``target`` is never
    changed, and what the patch leaves as it was is shared with it. ``take``: the patch is the
    caller's to give (a freshly decoded request body), so its values go into the result without
    copies."""
    if not isinstance(patch, dict):
        return patch if take else copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v, take)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [_unescape(t) for t in path[1:].split("/")]


def _resolve_parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError(f"path {path!r}: {t!r} not found")
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError) as e:
                raise PatchError(f"path {path!r}: bad index {t!r}") from e
        else:
            raise PatchError(f"path {path!r}: cannot descend into a scalar")
    return cur, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for t in _pointer(path):
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError) as e:
                raise PatchError(f"path {path!r} not found") from e
        else:
            raise PatchError(f"path {path!r} not found")
    return cur


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent, last = _resolve_parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-":
            parent.append(copy.deepcopy(value))
        else:
            try:
                idx = int(last)
            except ValueError as e:
                raise PatchError(f"path {path!r}: bad index") from e
            if idx < 0 or idx > len(parent):
                raise PatchError(f"path {path!r}: index out of range")
            parent.insert(idx, copy.deepcopy(value))
    else:
        raise PatchError(f"path {path!r}: parent is a scalar")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _resolve_parent(doc, tokens, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} not found")
        del parent[last]
    elif isinstance(parent, list):
        try:
            del parent[int(last)]
        except (ValueError, IndexError) as e:
            raise PatchError(f"path {path!r} not found") from e
    else:
        raise PatchError(f"path {path!r} not found")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _remove(doc, path) if _pointer(path) else doc
            doc = _add(doc, path, op.get("value"))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op["from"]))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test operation failed at {path!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


# list field name -> merge key (from the Kubernetes types' patchMergeKey tags)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "claims": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
}
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def _strategic_list(field: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if field in MERGE_PRIMITIVE_LISTS and all(not isinstance(x, dict) for x in patch):
        out = list(target)
        out.extend(x for x in patch if x not in out)
        return out
    key = MERGE_KEYS.get(field)
    if (
        key is None
        or not all(isinstance(x, dict) for x in target)
        or not all(isinstance(x, dict) and (key in x or x.get("$patch") == "replace") for x in patch)
    ):
        return [strategic_merge_patch(None, x) if isinstance(x, dict) else copy.deepcopy(x) for x in patch]
    if any(x.get("$patch") == "replace" for x in patch):
        return [
            strategic_merge_patch(None, x)
            for x in patch
            if not (isinstance(x, dict) and x.get("$patch") == "replace")
        ]
    out = [copy.deepcopy(x) for x in target]
    for item in patch:
        idx = next((i for i, x in enumerate(out) if x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(strategic_merge_patch(None, item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "delete":
        return None
    replace = patch.get("$patch") == "replace"
    result: dict[str, Any] = {} if replace or not isinstance(target, dict) else dict(target)
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and isinstance(result.get(k), list):
            result[k] = _strategic_list(k, result[k], v)
        elif isinstance(v, list):
            result[k] = [strategic_merge_patch(None, x) if isinstance(x, dict) else x for x in v]
        elif isinstance(v, dict):
            merged = strategic_merge_patch(result.get(k), v)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        else:
            result[k] = v
    # "$deleteFromPrimitiveList/<field>": [values]
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/") and isinstance(v, list):
            field = k.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in v]
    return result
