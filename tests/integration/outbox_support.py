"""Helpers of the outbox tests (tests/integration/test_messaging_outbox*.py): write
events through the outbox, wait for a condition, read the dispatch states."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from metallo.messaging import Outbox
from metallo.persistence.engine import session_factory
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.service import count_effects


async def write_events(engine, topology, account: str, sequences, *, rollback: bool = False) -> None:
    outbox = Outbox(topology)
    async with session_factory(engine)() as session, session.begin():
        for seq in sequences:
            await outbox.publish_event(
                session, tk.Deposited(account=account, amount=1, sequence=seq), aggregate_id=account
            )
        if rollback:
            await session.rollback()


async def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        await asyncio.sleep(interval)


async def dispatch_states(engine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT state, count(*) FROM outbox_dispatch GROUP BY state"))
        return {state: n for state, n in rows}


async def states_are(engine, expected: dict[str, int]) -> bool:
    return await dispatch_states(engine) == expected


async def count_effects_is(engine, n: int) -> bool:
    return await count_effects(engine) == n
