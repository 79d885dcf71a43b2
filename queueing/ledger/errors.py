"""What a failed ledger call means: the database is away (an outage: every admission waits), or the data
of one object cannot be stored (that object is isolated, everyone else goes on).

* :func:`is_outage` — connections refused or cut, timeouts, a pool that cannot connect: nothing about
  the request itself; retrying later is all there is to do.
* :func:`is_data_error` — the database refused the values (``numeric field overflow``, a constraint
  violated, a value too long) or the ledger refused the object (any
  :class:`~queueing.ledger.repository.LedgerError`, e.g. ``InvalidSpec``): retrying the same data gives
  the same answer.
* :func:`amount_error` — whether a quantity fits the ledger's amount column (``NUMERIC(38, 9)``: 29
  integer digits, 9 fractional), checked before any write so that PostgreSQL and SQLite (which stores
  the text and would take it) refuse the same values.
* :func:`short_reason` — one line about an error without its text (no host, port or SQL), for logs
  and probes that anyone may read.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction

from sqlalchemy import exc as sa

from queueing.api.quantity import Quantity
from queueing.api.validation import LEDGER_QUANTITY_LIMIT

__all__ = [
    "AMOUNT_INTEGER_DIGITS",
    "AMOUNT_SCALE",
    "MAX_AMOUNT",
    "amount_error",
    "is_data_error",
    "is_outage",
    "short_reason",
]

AMOUNT_SCALE = 9  # fractional digits of the amount column
AMOUNT_INTEGER_DIGITS = 38 - AMOUNT_SCALE  # NUMERIC(38, 9)
MAX_AMOUNT = LEDGER_QUANTITY_LIMIT  # exclusive bound of an amount's absolute value: 10**AMOUNT_INTEGER_DIGITS


def amount_error(q: Quantity) -> str | None:
    """Why ``q`` does not fit the ledger's amount column, or None. The ledger keeps amounts exact to
    1n (10^-9, the finest Kubernetes quantity); a larger amount needs more than 29 integer digits."""
    v = Fraction(q.value)
    text = getattr(q, "original", None) or str(q)
    if abs(v) >= MAX_AMOUNT:
        return (
            f"{text} is too large for the ledger (at most {AMOUNT_INTEGER_DIGITS} integer digits, below 1e29)"
        )
    if (v * 10**AMOUNT_SCALE).denominator != 1:
        return f"{text} is finer than the ledger keeps (a multiple of 1n, 10^-9)"
    return None


_OUTAGE = (
    sa.OperationalError,  # connection refused / lost, server shutting down, too many clients
    sa.InterfaceError,  # the connection is closed
    sa.TimeoutError,  # the pool could not hand out a connection in time
    ConnectionError,
    TimeoutError,
    asyncio.TimeoutError,
    OSError,
)


def _sqlstate(e: BaseException) -> str:
    """The SQLSTATE of a database error (asyncpg's adapter raises a plain ``DBAPIError`` for most)."""
    orig = getattr(e, "orig", None)
    for x in (orig, getattr(orig, "__cause__", None)):
        code = getattr(x, "sqlstate", None) or getattr(x, "pgcode", None)
        if isinstance(code, str):
            return code
    return ""


# SQLSTATE classes: 22 data exception (numeric field overflow, value too long), 23 integrity constraint
# violation; 08 connection exception, 53 insufficient resources, 57 operator intervention (shutdown)
_DATA_CLASSES = ("22", "23")
_OUTAGE_CLASSES = ("08", "53", "57")


def is_outage(e: BaseException) -> bool:
    """Whether ``e`` says the database is unreachable (the data may be fine)."""
    if isinstance(e, sa.DBAPIError) and e.connection_invalidated:
        return True
    state = _sqlstate(e)
    if state[:2] in _OUTAGE_CLASSES:
        return True
    if state[:2] in _DATA_CLASSES or isinstance(e, sa.DataError | sa.IntegrityError | sa.ProgrammingError):
        return False
    if isinstance(e, _OUTAGE):
        return True
    cause = e.__cause__ or e.__context__
    # asyncpg raises its own errors; SQLAlchemy wraps most, a connect in progress may not be
    name = type(e).__name__
    if name in (
        "ConnectionDoesNotExistError",
        "CannotConnectNowError",
        "InterfaceError",
        "PostgresConnectionError",
    ):
        return True
    return cause is not None and cause is not e and isinstance(cause, ConnectionError | OSError)


def is_data_error(e: BaseException) -> bool:
    """Whether ``e`` is the database or the ledger refusing this data (the same data fails again)."""
    from queueing.ledger.repository import LedgerError  # the repository imports this module

    if isinstance(e, LedgerError):
        return True
    if is_outage(e):
        return False
    return isinstance(e, sa.DataError | sa.IntegrityError) or _sqlstate(e)[:2] in _DATA_CLASSES


def short_reason(e: BaseException) -> str:
    """The error's kind, without its text (which may name hosts, ports, SQL or values)."""
    orig = getattr(e, "orig", None)
    if orig is not None:
        return f"{type(e).__name__} ({type(orig).__name__})"
    return type(e).__name__
