"""Writing to the API server: retries for transient failures, and what a failure means.

``retrying(call, what=...)`` runs ``call()`` until it succeeds, retrying (with exponential backoff) on
the failures that say nothing about the request itself: 409 Conflict (a stale resourceVersion or an
injected conflict; the callers' writes are patches computed from the current state, so repeating
them is safe), 429, 5xx, connection errors and client timeouts. Anything else (400, 403, 404, 422, an
``AlreadyExists``) is raised at once as the ``ApiException``: retrying would not change the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import aiohttp

from queueing.kube.client import ApiException

__all__ = [
    "RETRYABLE_STATUS",
    "api_reason",
    "describe_error",
    "each",
    "is_already_exists",
    "is_not_found",
    "retrying",
]

log = logging.getLogger("queueing.kube.writes")

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({409, 429, 500, 502, 503, 504})


def api_reason(e: ApiException) -> str:
    """The ``reason`` of the Status in the error body (``AlreadyExists``, ``Conflict``, ...)."""
    try:
        body = json.loads(e.body or "{}")
    except (TypeError, ValueError):
        return str(e.reason or "")
    return str(body.get("reason") or e.reason or "") if isinstance(body, dict) else str(e.reason or "")


def describe_error(e: BaseException) -> str:
    """An error in one line: an API error as ``409 AlreadyExists`` (kubernetes-asyncio's ``str()`` is a
    multi-line dump of the HTTP response), anything else as ``Type: first line``."""
    if isinstance(e, ApiException):
        return f"{e.status} {api_reason(e) or e.reason or ''}".strip()
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def is_already_exists(e: BaseException) -> bool:
    return isinstance(e, ApiException) and e.status == 409 and api_reason(e) == "AlreadyExists"


def is_not_found(e: BaseException) -> bool:
    return isinstance(e, ApiException) and e.status == 404


def is_conflict(e: BaseException) -> bool:
    return isinstance(e, ApiException) and e.status == 409 and api_reason(e) != "AlreadyExists"


def is_invalid(e: BaseException) -> bool:
    """422 Invalid: the API server refuses the write because of the object's own data (e.g. a CRD rule
    on a spec stored before the rule existed, which a status write must still pass)."""
    return isinstance(e, ApiException) and e.status == 422


def _retryable(e: BaseException) -> bool:
    if isinstance(e, ApiException):
        return e.status in RETRYABLE_STATUS and not is_already_exists(e)
    return isinstance(e, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError)


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = 8,
    initial: float = 0.05,
    maximum: float = 2.0,
) -> T:
    """``await call()``, retried on transient failures up to ``attempts`` times in all."""
    delay = initial
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except Exception as e:
            if not _retryable(e) or attempt == attempts:
                raise
            status = e.status if isinstance(e, ApiException) else type(e).__name__
            log.info("%s: %s (attempt %d of %d); retrying", what, status, attempt, attempts)
            await asyncio.sleep(delay)
            delay = min(delay * 2, maximum)
    raise AssertionError("unreachable")


async def each(items: Iterable[T], fn: Callable[[T], Awaitable[object]], *, limit: int = 16) -> None:
    """Run ``fn(item)`` for every item, at most ``limit`` at once (independent writes, e.g. the status
    of each admitted Workload: one round trip's latency each instead of their sum). Every call runs
    to its end; then the first ``Exception`` is raised. Anything that is not an ``Exception`` (a
    cancellation, a simulated crash) cancels the calls still running and is raised at once, as the
    loop would have stopped there."""
    sem = asyncio.Semaphore(max(1, limit))

    async def one(item: T) -> None:
        async with sem:
            await fn(item)

    tasks = [asyncio.ensure_future(one(i)) for i in items]
    if not tasks:
        return
    try:
        pending: set[asyncio.Future[None]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                exc = None if t.cancelled() else t.exception()
                if exc is not None and not isinstance(exc, Exception):
                    raise exc
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        if any(not t.done() for t in tasks):
            await asyncio.wait(tasks)
    for t in tasks:
        exc = None if t.cancelled() else t.exception()
        if exc is not None:
            raise exc
