"""What a failed ledger call means (``queueing.ledger.errors``), on the real databases: a value the
amount column cannot hold is refused before any write on both (PostgreSQL would say ``numeric field
overflow``, SQLite would store the text), a refusal of the data is a data error and not an outage, a
server that does not answer is an outage."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from queueing.api.quantity import Quantity
from queueing.ledger.engine import is_postgres
from queueing.ledger.errors import MAX_AMOUNT, amount_error, is_data_error, is_outage, short_reason
from queueing.ledger.repository import InvalidSpec, Ledger, LedgerError
from queueing.ledger.state import ClusterQueueSpec, CohortSpec, QuotaSpec
from tests.controller.test_process import free_port

Q = Quantity.parse


def test_amount_range_is_the_column_s() -> None:
    assert amount_error(Q(str(MAX_AMOUNT - 1))) is None
    assert amount_error(Q("1n")) is None and amount_error(Q("0")) is None
    assert "too large" in (amount_error(Q(str(MAX_AMOUNT))) or "")
    assert "1e100 is too large" in (amount_error(Q("1e100")) or "")
    assert "too large" in (amount_error(Q("-1e30")) or "")


async def test_a_quota_that_does_not_fit_is_refused_naming_the_field(ledger: Ledger) -> None:
    spec = ClusterQueueSpec("huge", (QuotaSpec("default", "gpu", Q("1e100")),))
    with pytest.raises(
        InvalidSpec, match=r"ClusterQueue huge: flavor default, resource gpu: nominalQuota: 1e100"
    ):
        await ledger.upsert_cluster_queue(spec, at=0)
    with pytest.raises(InvalidSpec, match="lendingLimit"):
        await ledger.upsert_cohort(
            CohortSpec("c", "parent", (QuotaSpec("default", "gpu", Q("1"), None, Q("1e40")),)), at=0
        )
    assert "huge" not in (await ledger.load_state()).cluster_queues  # nothing was written
    e = InvalidSpec("x")
    assert isinstance(e, LedgerError) and is_data_error(e) and not is_outage(e)
    await ledger.upsert_cluster_queue(ClusterQueueSpec("fine", (QuotaSpec("default", "gpu", Q("8")),)), at=0)


async def test_the_database_refusing_a_value_is_a_data_error(ledger: Ledger) -> None:
    if not is_postgres(ledger.engine):
        pytest.skip("SQLite has no NUMERIC(38, 9) to overflow")
    with pytest.raises(Exception) as caught:
        async with ledger.engine.connect() as c:
            await c.execute(text("SELECT CAST('1e100' AS NUMERIC(38, 9))"))
    assert "numeric field overflow" in str(caught.value)
    assert is_data_error(caught.value) and not is_outage(caught.value)


async def test_a_server_that_does_not_answer_is_an_outage() -> None:
    lg = Ledger.from_url(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing")
    try:
        with pytest.raises(Exception) as caught:
            await lg.load_state()
    finally:
        await lg.close()
    assert is_outage(caught.value) and not is_data_error(caught.value)
    assert "127.0.0.1" not in short_reason(caught.value)
