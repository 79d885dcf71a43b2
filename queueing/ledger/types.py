"""Column types and plain value types shared by the ledger's models, repository and reports.

Quantities are stored exactly: ``NUMERIC(38, 9)`` on PostgreSQL, the canonical decimal text on SQLite
(which has no exact decimal type). Kubernetes quantities are exact multiples of 1n (10^-9), so nine
fractional digits hold every value. Parsing and arithmetic go through :class:`queueing.api.quantity.Quantity`.

Times are integers: milliseconds since the Unix epoch, UTC. That keeps time arithmetic in the report SQL
identical on both databases (``at_ms / 86400000`` is the UTC day number).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import Numeric, String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from queueing.api.quantity import Quantity

MS_PER_DAY = 86_400_000


class ExactAmount(TypeDecorator[Quantity]):
    """A non-lossy decimal amount; Python side is a :class:`Quantity`."""

    impl = Numeric(38, 9)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(48))
        return dialect.type_descriptor(Numeric(38, 9, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        q = value if isinstance(value, Quantity) else Quantity.coerce(value)
        text = decimal_text(q)
        return text if dialect.name == "sqlite" else Decimal(text)

    def process_result_value(self, value: Any, dialect: Dialect) -> Quantity | None:
        if value is None:
            return None
        return quantity_from_number(value)


def decimal_text(q: Quantity) -> str:
    """The exact plain decimal text of a quantity ("1536", "0.5", "0.000000001")."""
    v = q.value
    sign = "-" if v < 0 else ""
    a = abs(v)
    scaled = a * 10**9  # exact: quantities are multiples of 1n
    n = scaled.numerator // scaled.denominator
    whole, frac = divmod(n, 10**9)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:09d}".rstrip("0")


def quantity_from_number(value: Any) -> Quantity:
    """A Quantity from a number the database returned (Decimal, int, float or decimal text)."""
    if isinstance(value, Quantity):
        return value
    if isinstance(value, float):
        value = repr(value)
    if isinstance(value, str):
        value = Decimal(value)
    if isinstance(value, int):
        return Quantity.from_value(value)
    if isinstance(value, Decimal):
        return Quantity.from_value(Fraction(value))
    raise TypeError(f"not a number: {value!r}")


def to_ms(t: datetime | int | float) -> int:
    """Epoch milliseconds from an aware datetime (naive means UTC) or from epoch seconds."""
    if isinstance(t, datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        delta = t - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return round(float(t) * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
