"""Errors that abort an allocation (as upstream's allocator returns an error, not "does not fit")."""

from __future__ import annotations

__all__ = ["AllocationError"]


class AllocationError(Exception):
    """Invalid input or an error that aborts allocation upstream.

    ``obj`` names the object (``DeviceClass gpu``, ``ResourceClaim default/train``), ``field`` the
    field path inside it (``spec.selectors[0].cel.expression``); ``str(err)`` is one line
    ``<obj>: <field>: <message>``.
    """

    def __init__(self, obj: str, field: str, message: str) -> None:
        self.obj = obj
        self.field = field
        self.message = " ".join(message.split())
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.obj}: {self.field}: {self.message}" if self.field else f"{self.obj}: {self.message}"
