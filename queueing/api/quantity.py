"""Kubernetes resource.Quantity: exact parsing, canonical formatting and arithmetic.

The one place in the project where quantities are parsed, compared, added or printed.
Values are exact rationals (``fractions.Fraction``); like upstream, parsing rounds up to a
precision of 1n (10^-9).

Interface used across the project (keep it stable):
    Quantity.parse("1.5Gi")          -> Quantity  (QuantityError on bad input)
    Quantity.from_value(v, fmt)      -> Quantity
    q.value                          -> Fraction
    str(q)                           -> canonical form ("1536Mi")
    q.original                       -> the text as given (what models serialise back)
    q + q, q - q, q * int, comparisons, hash, bool
    q.as_int()                       -> int, rounded up (like upstream Value())
    q.milli_value()                  -> int, rounded up (like upstream MilliValue())
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["Format", "Quantity", "QuantityError", "parse_quantity"]

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_SUFFIX_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BIN_SUFFIX_BY_EXP = {v: k for k, v in _BINARY.items()}

_RE = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def _ceil_to_nano(v: Fraction) -> Fraction:
    """Round away from zero to a multiple of 1n, as upstream does for over-precise input."""
    scaled = v / _NANO
    if scaled.denominator == 1:
        return v
    n = -((-abs(scaled.numerator)) // scaled.denominator)
    return Fraction(n if v >= 0 else -n) * _NANO


class Quantity:
    __slots__ = ("_format", "_original", "_value", "_wire")

    _value: Fraction
    _format: Format
    _original: str
    _wire: str | int | float

    def __init__(self, value: Fraction | int, fmt: Format = "DecimalSI", original: str | None = None):
        self._value = _ceil_to_nano(Fraction(value))
        self._format = fmt
        self._original = original if original is not None else self.canonical()
        self._wire = self._original

    # ---- construction -------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Quantity:
        if not isinstance(text, str):
            raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
        s = text.strip()
        m = _RE.match(s)
        if not m or s == "":
            raise QuantityError(
                f"quantities must match the regular expression "
                f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
            )
        num = Fraction(Decimal(m.group("num")))
        suffix = m.group("suffix") or ""
        fmt: Format
        if suffix in _BINARY:
            value = num * (2 ** _BINARY[suffix])
            fmt = "BinarySI"
        elif suffix in _DECIMAL:
            value = num * Fraction(10) ** _DECIMAL[suffix]
            fmt = "DecimalSI"
        else:
            value = num * Fraction(10) ** int(suffix[1:])
            fmt = "DecimalExponent"
        return cls(value, fmt, original=text)

    @classmethod
    def from_value(cls, value: Fraction | int, fmt: Format = "DecimalSI") -> Quantity:
        return cls(value, fmt)

    @classmethod
    def coerce(cls, v: Any) -> Quantity:
        if isinstance(v, Quantity):
            return v
        if isinstance(v, bool):
            raise QuantityError("quantity must be a string or number, got bool")
        if isinstance(v, int):
            q = cls(v, "DecimalSI", original=str(v))
            q._wire = v  # keep the JSON number as given
            return q
        if isinstance(v, float):
            q = cls.parse(repr(v))
            q._wire = v
            return q
        return cls.parse(v)

    # ---- accessors ----------------------------------------------------
    @property
    def value(self) -> Fraction:
        return self._value

    @property
    def format(self) -> Format:
        return self._format

    @property
    def original(self) -> str:
        return self._original

    def as_int(self) -> int:
        v = self._value
        return -((-v.numerator) // v.denominator)

    def milli_value(self) -> int:
        v = self._value * 1000
        return -((-v.numerator) // v.denominator)

    def is_zero(self) -> bool:
        return self._value == 0

    # ---- formatting ---------------------------------------------------
    def canonical(self) -> str:
        v = self._value
        sign = "-" if v < 0 else ""
        a = abs(v)
        if a == 0:
            return "0"
        fmt = self._format
        if fmt == "BinarySI":
            if a < 1024 or a.denominator != 1:
                fmt = "DecimalSI"
            else:
                n = a.numerator
                exp = 0
                while exp < 60 and n % 1024 == 0:
                    n //= 1024
                    exp += 10
                return f"{sign}{n}{_BIN_SUFFIX_BY_EXP.get(exp, '')}"
        # decimal: find the largest exponent (multiple of 3) keeping an integer mantissa
        exp = -9
        mant = a * 10**9
        assert mant.denominator == 1
        n = mant.numerator
        while exp < 18 and n % 1000 == 0:
            n //= 1000
            exp += 3
        if fmt == "DecimalExponent":
            return f"{sign}{n}" if exp == 0 else f"{sign}{n}e{exp}"
        return f"{sign}{n}{_DEC_SUFFIX_BY_EXP[exp]}"

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    # ---- arithmetic and comparison -------------------------------------
    def _other(self, other: object) -> Fraction | None:
        if isinstance(other, Quantity):
            return other._value
        if isinstance(other, int | Fraction) and not isinstance(other, bool):
            return Fraction(other)
        return None

    def __add__(self, other: Quantity | int) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return Quantity(self._value + o, self._format)

    __radd__ = __add__

    def __sub__(self, other: Quantity | int) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return Quantity(self._value - o, self._format)

    def __rsub__(self, other: Quantity | int) -> Quantity:
        o = self._other(other)
        if o is None:
            return NotImplemented
        return Quantity(o - self._value, self._format)

    def __mul__(self, other: int) -> Quantity:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Quantity(self._value * other, self._format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity(-self._value, self._format)

    def __eq__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value == o

    def __lt__(self, other: Quantity | int) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value < o

    def __le__(self, other: Quantity | int) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value <= o

    def __gt__(self, other: Quantity | int) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value > o

    def __ge__(self, other: Quantity | int) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._value >= o

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return self._value != 0

    # ---- pydantic ------------------------------------------------------
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
            json_schema_input_schema=core_schema.union_schema(
                [core_schema.str_schema(), core_schema.int_schema()]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda q: q._wire, when_used="always"
            ),
        )


def parse_quantity(text: str) -> Quantity:
    return Quantity.parse(text)
