"""Explanations as data: text with typed references to the objects it names.

Why a gang does not fit names its own pods and claims (``pod default/train-main-3``, ``claim
default/train-main-3-gpus``). Kept as text only, such a message cannot be told for another workload of
the same shape, or cached for one: ``GangExplanation.parts`` keeps it as :data:`Part` values,
text and :class:`ObjRef` (kind and ``namespace/name`` of a Pod or ResourceClaim of the gang), so
that a caller that knows which pod and claim of its workload an object is (the scheduling core's
placer) can render it for another workload; :func:`render` gives the text with the objects' keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["ObjRef", "Part", "render"]


@dataclass(frozen=True, slots=True)
class ObjRef:
    """A Pod or ResourceClaim of the gang being explained, by ``namespace/name``."""

    kind: Literal["Pod", "ResourceClaim"]
    key: str


Part = str | ObjRef


def render(parts: Iterable[Part], name: Callable[[ObjRef], str] | None = None) -> str:
    """The text of ``parts``: each reference as ``name(ref)`` (default: its key)."""
    return "".join(p if isinstance(p, str) else (name(p) if name is not None else p.key) for p in parts)
