"""Kubernetes resource.Quantity: exact parsing, canonical formatting and arithmetic.

The one place in the project where quantities are parsed, compared, added or printed.
Values are exact rationals (``fractions.Fraction``), never floats.

Interface used across the project (keep it stable):
    Quantity.parse("1.5Gi")          -> Quantity  (QuantityError on bad input)
    Quantity.from_value(v, fmt)      -> Quantity  (v: int | Fraction; rounded to 1n like parsing)
    Quantity.coerce(v)               -> Quantity  (str | int | float | Quantity, as read from JSON/YAML)
    q.value                          -> Fraction  (exact)
    q.format                         -> "BinarySI" | "DecimalSI" | "DecimalExponent"
    str(q)                           -> canonical form ("1536Mi")
    q.original                       -> the text as given (what models serialise back)
    q + q, q - q, -q, q * int, int * q, comparisons with Quantity/int/Fraction, hash, bool
    q.as_int()                       -> int, rounded away from zero (upstream Value())
    q.milli_value()                  -> int, rounded away from zero (upstream MilliValue())
    QUANTITY_PATTERN                 -> the regular expression CRD schemas use for quantities
    format_amount(v, resource)       -> an amount as kubectl prints it ("16Gi", "500m", "8"): the
                                        one formatter for amounts shown to users (reasons, reports)
A pydantic field typed ``Quantity`` accepts str/int/float, serialises back to exactly what was
given (text or JSON number), and has the int-or-string JSON schema Kubernetes CRDs use.

Rules, as in k8s.io/apimachinery/pkg/api/resource (quantity.go, suffix.go, amount.go):

* Grammar (``parseQuantityString``): ``[+-]? digits* ('.' digits*)? suffix`` where the suffix is
  ``Ki|Mi|Gi|Ti|Pi|Ei`` (BinarySI), ``n|u|m||k|M|G|T|P|E`` (DecimalSI) or ``[eE][+-]?digits``
  (DecimalExponent). No whitespace (the JSON path trims it first, see ``coerce``). Quirks kept:
  ``"1."``, ``".5"`` and ``"1.G"`` are valid, and so are ``"."``, ``"+"``, ``"-"`` (all zero).
* Precision: non-zero values are rounded to a multiple of 1n (10^-9) *away from zero*
  (``inf.RoundUp`` on the magnitude): ``0.1n`` -> ``1n``, ``-0.1n`` -> ``-1n``.
* Cap: only BinarySI values are capped, at magnitude 2^63-1 (``9Ei`` -> 9223372036854775807).
  Decimal values are not capped (``12E`` is 1.2e19).
* A parsed BinarySI value with 0 < |v| < 1 becomes DecimalSI.
* Canonical form (``CanonicalizeBytes``): ``0`` for zero; BinarySI with |v| < 1024 or a
  fractional value is printed as DecimalSI; BinarySI prints the largest power of 1024 dividing the
  value; decimal formats print an integer mantissa with the largest exponent that is a multiple
  of 3 (``1.5`` -> ``1500m``, ``1.5Gi`` -> ``1536Mi``, ``1e3`` -> ``1e3``, ``1.2e3`` -> ``1200``).
* Arithmetic keeps the left operand's format, unless the left operand is zero, then the right's
  (``Quantity.Add/Sub``).
* ``Value()``/``MilliValue()`` round away from zero (``negativeScaleInt64``).

Deliberate differences from upstream, each where upstream would lose information:
* Upstream prints a DecimalSI value whose exponent exceeds 18 (e.g. ``1000E``) without any
  suffix (``"1"``), changing its magnitude; here the mantissa grows instead (``1000E``).
* A computed BinarySI value above 2^63-1 (only arithmetic makes one) prints as DecimalSI here,
  since binary text that large would be capped when read back. So ``parse(str(q)) == q`` always.
* Upstream truncates exponents to int32; here a positive exponent above 1000 is rejected
  (QuantityError); any negative exponent works (a non-zero value below 1n becomes 1n).
* Results are Python ints/Fractions, so ``as_int()`` never overflows.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

__all__ = [
    "QUANTITY_PATTERN",
    "Format",
    "Quantity",
    "QuantityError",
    "amount_quantity",
    "format_amount",
    "is_bytes",
    "parse_quantity",
]

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

#: The pattern Kubernetes CRDs (controller-gen) put on resource.Quantity fields.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# upstream's splitREString, quoted in its format error
_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_SUFFIX_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BIN_SUFFIX_BY_POW = {v // 10: k for k, v in _BINARY.items()}
_BIN_SUFFIX_BY_POW[0] = ""

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_EXPONENT_RE = re.compile(r"[+-]?[0-9]+")

_NANO = 10**9
_MAX_INT64 = 2**63 - 1
_MAX_BINARY_POW = 6  # Ei = 1024^6
_MAX_DECIMAL_EXP = 18  # E = 10^18
_EXP_LIMIT = 1000


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def _round_to_nano(v: Fraction) -> Fraction:
    """Round away from zero to a multiple of 1n, as upstream does for over-precise input."""
    scaled = v * _NANO
    if scaled.denominator == 1:
        return v
    mag = -(-abs(scaled.numerator) // scaled.denominator)  # ceil of the magnitude
    return Fraction(mag if v > 0 else -mag, _NANO)


def _away_from_zero(v: Fraction) -> int:
    mag = -(-abs(v.numerator) // v.denominator)
    return mag if v >= 0 else -mag


def _scan(text: str) -> tuple[bool, str, str, str]:
    """Split ``text`` into (positive, integer digits, fraction digits, suffix).

    Mirrors upstream ``parseQuantityString``; raises QuantityError where it returns ErrFormatWrong.
    """
    end = len(text)
    pos = 0
    positive = True
    if end and text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(
            f"invalid quantity {text!r}: quantities must match the regular expression '{_SPLIT_RE}'"
        )
    return positive, num, denom, text[suffix_start:]


def _interpret(text: str, suffix: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix, as upstream ``suffixHandler.interpret``."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "DecimalSI"
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT_RE.fullmatch(suffix[1:]):
        exp = int(suffix[1:])
        if exp > _EXP_LIMIT:
            raise QuantityError(
                f"invalid quantity {text!r}: exponent {exp} is out of the supported range "
                f"(at most {_EXP_LIMIT})"
            )
        return 10, exp, "DecimalExponent"
    raise QuantityError(f"invalid quantity {text!r}: unable to parse quantity's suffix {suffix!r}")


class Quantity:
    """An exact Kubernetes quantity. Immutable; compare and hash by value."""

    __slots__ = ("_canonical", "_format", "_original", "_value", "_wire")

    _value: Fraction
    _format: Format
    _original: str | None
    _wire: str | int | float | None
    _canonical: str | None

    def __init__(self, value: Fraction | int, fmt: Format = "DecimalSI", original: str | None = None) -> None:
        self._value = _round_to_nano(Fraction(value))
        self._format = fmt
        self._original = original
        self._wire = None
        self._canonical = None

    @classmethod
    def _exact(cls, value: Fraction, fmt: Format) -> Quantity:
        """Internal: a value already a multiple of 1n (sums, differences, multiples of such)."""
        q = object.__new__(cls)
        q._value = value
        q._format = fmt
        q._original = None
        q._wire = None
        q._canonical = None
        return q

    # ---- construction -------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse like upstream ``ParseQuantity`` (no surrounding whitespace allowed)."""
        if not isinstance(text, str):
            raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
        if text == "":
            raise QuantityError(
                f"invalid quantity '': quantities must match the regular expression '{_SPLIT_RE}'"
            )
        positive, num, denom, suffix = _scan(text)
        base, exp, fmt = _interpret(text, suffix)
        mantissa = int(num + denom)
        value: Fraction
        if mantissa == 0:
            value = Fraction(0)
        elif base == 2:
            value = Fraction(mantissa << exp, 10 ** len(denom))
        else:
            shift = exp - len(denom)
            if len(str(mantissa)) + shift < -9:
                # below 1n (the mantissa has fewer digits than the shift takes away): rounds away
                # from zero to exactly 1n; avoids computing 10**huge for exponents like e-999999
                value = Fraction(1, _NANO)
            elif shift >= 0:
                value = Fraction(mantissa * 10**shift)
            else:
                value = Fraction(mantissa, 10**-shift)
        if not positive:
            value = -value
        value = _round_to_nano(value)
        if fmt == "BinarySI":
            if abs(value) > _MAX_INT64:
                value = Fraction(_MAX_INT64 if value > 0 else -_MAX_INT64)
            if 0 < abs(value) < 1:
                fmt = "DecimalSI"
        return cls(value, fmt, original=text)

    @classmethod
    def from_value(cls, value: Fraction | int, fmt: Format = "DecimalSI") -> Quantity:
        """A quantity of exactly ``value`` (rounded to 1n away from zero), printed in ``fmt``."""
        if isinstance(value, bool) or not isinstance(value, int | Fraction):
            raise QuantityError(f"quantity value must be int or Fraction, got {type(value).__name__}")
        return cls(value, fmt)

    @classmethod
    def coerce(cls, v: Any) -> Quantity:
        """Accept what JSON/YAML gives: a string (trimmed, like upstream UnmarshalJSON) or a number."""
        if isinstance(v, Quantity):
            return v
        if isinstance(v, bool):
            raise QuantityError("quantity must be a string or number, got bool")
        if isinstance(v, int):
            q = cls.parse(str(v))
            q._wire = v  # keep the JSON number as given
            return q
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise QuantityError(f"quantity must be a finite number, got {v!r}")
            q = cls.parse(repr(v).replace("e+", "e"))
            q._wire = v
            return q
        if isinstance(v, str):
            q = cls.parse(v.strip())
            q._original = v
            return q
        raise QuantityError(f"quantity must be a string or number, got {type(v).__name__}")

    # ---- accessors ----------------------------------------------------
    @property
    def value(self) -> Fraction:
        return self._value

    @property
    def format(self) -> Format:
        return self._format

    @property
    def original(self) -> str:
        """The text this quantity was parsed from; the canonical form for computed ones."""
        return self._original if self._original is not None else self.canonical()

    def as_int(self) -> int:
        """The value rounded to an integer away from zero (upstream ``Value()``)."""
        return _away_from_zero(self._value)

    def milli_value(self) -> int:
        """The value in thousandths rounded away from zero (upstream ``MilliValue()``)."""
        return _away_from_zero(self._value * 1000)

    def is_zero(self) -> bool:
        return self._value == 0

    # ---- formatting ---------------------------------------------------
    def canonical(self) -> str:
        """The canonical text (upstream ``String()``), cached."""
        if self._canonical is None:
            self._canonical = self._format_canonical()
        return self._canonical

    def _format_canonical(self) -> str:
        v = self._value
        if v == 0:
            return "0"
        sign = "-" if v < 0 else ""
        a = abs(v)
        fmt = self._format
        if fmt == "BinarySI":
            if a < 1024 or a.denominator != 1 or a > _MAX_INT64:
                # small or fractional binary values print as DecimalSI (upstream); so do values
                # past the binary parse cap, which would not read back (ours)
                fmt = "DecimalSI"
            else:
                n = a.numerator
                p = 0
                while p < _MAX_BINARY_POW and n % 1024 == 0:
                    n //= 1024
                    p += 1
                return f"{sign}{n}{_BIN_SUFFIX_BY_POW[p]}"
        # decimal: integer mantissa, exponent a multiple of 3 and as large as possible
        scaled = a * _NANO
        assert scaled.denominator == 1  # values are always multiples of 1n
        n = scaled.numerator
        exp = -9
        while n % 10 == 0:
            n //= 10
            exp += 1
        while exp % 3:
            n *= 10
            exp -= 1
        if fmt == "DecimalExponent":
            return f"{sign}{n}e{exp}" if exp else f"{sign}{n}"
        if exp > _MAX_DECIMAL_EXP:
            n *= 10 ** (exp - _MAX_DECIMAL_EXP)
            exp = _MAX_DECIMAL_EXP
        return f"{sign}{n}{_DEC_SUFFIX_BY_EXP[exp]}"

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    # ---- arithmetic and comparison -------------------------------------
    @staticmethod
    def _other(other: object) -> Fraction | None:
        if isinstance(other, Quantity):
            return other._value
        if isinstance(other, int | Fraction) and not isinstance(other, bool):
            return Fraction(other)
        return None

    @staticmethod
    def _make(other: object, value: Fraction, fmt: Format) -> Quantity:
        # a Fraction operand may be finer than 1n: round like any new quantity
        if isinstance(other, Fraction):
            return Quantity(value, fmt)
        return Quantity._exact(value, fmt)

    def _result_format(self, other: object) -> Format:
        # upstream Add/Sub: a zero receiver takes the other operand's format
        if self._value == 0 and isinstance(other, Quantity):
            return other._format
        return self._format

    def __add__(self, other: Quantity | int | Fraction) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return self._make(other, self._value + o, self._result_format(other))

    __radd__ = __add__

    def __sub__(self, other: Quantity | int | Fraction) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return self._make(other, self._value - o, self._result_format(other))

    def __rsub__(self, other: Quantity | int | Fraction) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return self._make(other, o - self._value, self._format)

    def __mul__(self, other: int) -> Quantity:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Quantity._exact(self._value * other, self._format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity._exact(-self._value, self._format)

    def __abs__(self) -> Quantity:
        return Quantity._exact(abs(self._value), self._format)

    def __eq__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value == o

    def __lt__(self, other: Quantity | int | Fraction) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value < o

    def __le__(self, other: Quantity | int | Fraction) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value <= o

    def __gt__(self, other: Quantity | int | Fraction) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value > o

    def __ge__(self, other: Quantity | int | Fraction) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value >= o

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return self._value != 0

    # ---- pydantic ------------------------------------------------------
    def _serialise(self) -> str | int | float:
        return self._wire if self._wire is not None else self.original

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def validate(v: Any) -> Quantity:
            try:
                return cls.coerce(v)
            except QuantityError as e:
                raise ValueError(str(e)) from None

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                cls._serialise, when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # what controller-gen emits for resource.Quantity
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }


def parse_quantity(text: str) -> Quantity:
    return Quantity.parse(text)


# resources counted in bytes (also as the last segment of a name: ``gpu.nvidia.com/memory``)
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


def is_bytes(resource: str) -> bool:
    """Whether amounts of ``resource`` are bytes: ``memory``, ``ephemeral-storage``, ``storage``,
    ``hugepages-*``, and names ending in one of them (a device capacity ``gpu.nvidia.com/memory``)."""
    base = resource.rsplit("/", 1)[-1]
    return base in _BYTE_RESOURCES or base.startswith("hugepages-")


def format_amount(value: Fraction | int | Quantity, resource: str | None = None) -> str:
    """An amount as kubectl prints a quantity: its canonical text (``500m``, ``8``, ``1500``).
    Amounts of bytes (``is_bytes(resource)``) print in the shorter of the BinarySI and DecimalSI
    forms, BinarySI when as short (``16Gi``, ``16G``, ``140706Mi``), so a sum of ``Gi`` requests
    reads as one; everything else prints DecimalSI (``0.5`` -> ``500m``). A value finer than 1n
    rounds to 1n away from zero, as a parsed quantity does."""
    return amount_quantity(value, resource).canonical()


def amount_quantity(value: Fraction | int | Quantity, resource: str | None = None) -> Quantity:
    """The amount as a quantity in the format :func:`format_amount` prints it in (for API objects
    that carry amounts, e.g. a Workload's ``resourceUsage``)."""
    v = value.value if isinstance(value, Quantity) else Fraction(value)
    dec = Quantity(v, "DecimalSI")
    if resource is None or not is_bytes(resource):
        return dec
    binary = Quantity(v, "BinarySI")
    return binary if len(binary.canonical()) <= len(dec.canonical()) else dec
