"""The API server's field rules that several kinds share: object names, semantic versions, integer ranges,
quantity bounds (also the ledger's), and one entry point that lists every field error of an object.

The one place these rules live (``resource``, ``core`` and ``v1beta1`` import them). Facts from the
Kubernetes validation (``k8s.io/apimachinery/pkg/util/validation``, ``pkg/apis/resource/validation``):

* a DNS label: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63 characters (namespace names, device names,
  request names, pod claim names); a DNS subdomain: dot-separated DNS labels, at most 253 characters
  (most object names);
* a Job's name is a DNS subdomain that is also a valid label value (the API server puts it in the
  ``batch.kubernetes.io/job-name`` label of the Job's pods): at most 63 characters;
* int32 fields (``parallelism``, ``completions``, ``backoffLimit``) are JSON integers, not booleans or
  strings, within int32, and non-negative;
* a ``version`` device attribute is a semantic version (semver 2.0.0), at most 64 characters.

The ledger stores quantities as ``NUMERIC(38, 9)``: 29 digits before the decimal point, 9 after (a
quantity is already rounded to 1n). :data:`LEDGER_QUANTITY_LIMIT` is the first magnitude it cannot hold;
:func:`check_storable` rejects it at validation, naming the field, instead of at insert time.

:func:`field_errors` is the entry point for callers that must not crash on an invalid object (the
controller, the CLIs): it parses a wire-form object as its kind and returns the problems as
:class:`FieldProblem` (path in wire names, message), or none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import AfterValidator, Field, Strict

from queueing.api.quantity import Quantity

if TYPE_CHECKING:
    from queueing.api.base import KubeObject

__all__ = [
    "DNS_LABEL_PATTERN",
    "DNS_SUBDOMAIN_PATTERN",
    "LEDGER_QUANTITY_LIMIT",
    "SEMVER_PATTERN",
    "SEMVER_RE",
    "DnsLabel",
    "DnsSubdomain",
    "FieldProblem",
    "NonNegInt32",
    "check_dns_label",
    "check_dns_subdomain",
    "check_job_name",
    "check_non_negative",
    "check_semver",
    "check_storable",
    "field_errors",
    "is_storable",
]

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
DNS_SUBDOMAIN_PATTERN: Final = rf"^{_DNS_SUBDOMAIN}$"
DNS_LABEL_PATTERN: Final = rf"^{_DNS_LABEL}$"
_RE_SUBDOMAIN: Final = re.compile(DNS_SUBDOMAIN_PATTERN)
_RE_LABEL: Final = re.compile(DNS_LABEL_PATTERN)

_NUM = r"0|[1-9][0-9]*"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
#: semver 2.0.0 (https://semver.org), ASCII only; groups ``major``, ``minor``, ``patch``, ``pre``, ``build``
SEMVER_PATTERN: Final = (
    rf"^(?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
SEMVER_RE: Final = re.compile(SEMVER_PATTERN, re.ASCII)

#: 10^29: the smallest magnitude a ``NUMERIC(38, 9)`` ledger column cannot hold
LEDGER_QUANTITY_LIMIT: Final = 10**29


def _show(v: str) -> str:
    return repr(v if len(v) <= 80 else v[:77] + "...")


def check_dns_label(v: str) -> str:
    if len(v) > 63 or not _RE_LABEL.match(v):
        raise ValueError(
            f"{_show(v)} is not a valid name: lowercase letters, digits and '-', "
            "starting and ending alphanumeric, at most 63 characters"
        )
    return v


def check_dns_subdomain(v: str) -> str:
    if len(v) > 253 or not _RE_SUBDOMAIN.match(v):
        raise ValueError(
            f"{_show(v)} is not a valid name: lowercase letters, digits, '-' and '.', "
            "starting and ending alphanumeric, at most 253 characters"
        )
    return v


def check_job_name(v: str) -> str:
    """A Job name: a DNS subdomain of at most 63 characters (it becomes a label value of its pods)."""
    check_dns_subdomain(v)
    if len(v) > 63:
        raise ValueError(
            f"{_show(v)} is not a valid Job name: at most 63 characters (it is the value of the "
            "batch.kubernetes.io/job-name label of the Job's pods)"
        )
    return v


def check_semver(v: str) -> str:
    if len(v) > 64:
        raise ValueError(f"{_show(v)} is too long: a version has at most 64 characters")
    if not SEMVER_RE.match(v):
        raise ValueError(f"{_show(v)} is not a semantic version (semver 2.0.0, e.g. 1.2.3)")
    return v


def check_non_negative(q: Quantity) -> Quantity:
    if q.value < 0:
        raise ValueError(f"must be non-negative, got {q.original}")
    return q


def check_storable(q: Quantity) -> Quantity:
    """The quantity fits the ledger's ``NUMERIC(38, 9)`` column (|value| < 10^29)."""
    if abs(q.value) >= LEDGER_QUANTITY_LIMIT:
        raise ValueError(
            f"{_show(q.original)} is too large: at most 29 digits before the decimal point "
            "(the ledger stores quantities as NUMERIC(38, 9))"
        )
    return q


def is_storable(value: Fraction | int) -> bool:
    """An amount (a quota, a charge, a sum of charges) fits the ledger's column."""
    return abs(Fraction(value)) < LEDGER_QUANTITY_LIMIT


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
NonNegInt32 = Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)]
PositiveInt64 = Annotated[int, Strict(), Field(ge=1, le=2**63 - 1)]
NonNegQuantity = Annotated[Quantity, AfterValidator(check_non_negative)]
StorableQuantity = Annotated[Quantity, AfterValidator(check_storable)]


@dataclass(frozen=True)
class FieldProblem:
    """One invalid field of an object: ``path`` in wire names (``spec.resourceGroups[0]...``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def field_errors(obj: Any) -> tuple[KubeObject | None, list[FieldProblem]]:
    """Parse a wire-form object (a dict as read from the API or a file) as the model of its
    apiVersion/kind: ``(object, [])`` when valid, ``(None, problems)`` when not. Never raises for any
    input (a value nested too deeply for the parser is a problem at ``<root>``)."""
    from queueing.api.registry import ObjectError, parse_object

    try:
        return parse_object(obj), []
    except ObjectError as e:
        return None, [FieldProblem(*_split(p)) for p in e.problems]
    except RecursionError:
        return None, [FieldProblem("<root>", "nested too deeply")]


def _split(problem: str) -> tuple[str, str]:
    path, sep, msg = problem.partition(": ")
    return (path, msg) if sep else ("<root>", problem)
